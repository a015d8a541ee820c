"""Issue 45 item 15: what comes from elsewhere is checked field by field. A sweep's spec (and its rows) from a shipped
``sweep.json`` (``sweep unpack``), from a record kept beside the registry (``.octlm/sweeps/<name>.json``, read by
``doctor --repair``) and from the registry's row (every reader: ``sweep status``, ``show``, ``report``, ``extend``,
``retry``, the workers) goes through one checker, which refuses in one line naming the source and the key; nothing
half-written, no traceback, no worker killed. Real homes, real registries, the files edited as a hand would."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_corpus, write_experiment

Change = Callable[[dict], None]


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def rows(home: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql, params).fetchall()


def small_home(tmp_path: Path, name: str = "home") -> Path:
    home = write_corpus(tmp_path / name)
    write_experiment(home, training={"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1})
    return home


def swept(home: Path, name: str = "s") -> None:
    grid = ("--grid", "training.learning_rate=1e-3,3e-3", "--halving", "4,8")
    made = cli(home, "sweep", "new", name, "--from", "EXP-001", *grid)
    assert made.exit_code == 0, made.stderr


SPECS: list[tuple[Change, str]] = [  # a spec damaged as a hand (or a bug) would, and the key its line names
    (lambda s: s.update(metric="track"), "spec.metric must be one of eval_loss"),  # a text column of metrics
    (lambda s: s.update(grid="x"), "spec.grid must be a mapping"),
    (lambda s: s.update(grid={"training.learning_rate": []}), "spec.grid must be"),
    (lambda s: s.update(grid={"no.such": [1, 2]}), "spec.grid must be"),
    (lambda s: s.update(keep="abc"), "spec.keep must be a number above 0 and below 1 (not 'abc')"),
    (lambda s: s.update(seeds=-5), "spec.seeds must be a whole number from 1 to 1000 (not -5)"),
    (lambda s: s.update(halving=[4, 2]), "spec.halving must be"),
    (lambda s: s.update(ranges={"training.learning_rate": {"low": 1, "high": 0, "log": 0}}), "spec.ranges"),
    (lambda s: s.update(trials=0), "spec.trials must be"),
    (lambda s: s.update(prefix="../"), "spec.prefix must be"),
    (lambda s: s.update(history=[{"event": "extended"}]), "spec.history must be"),
    (lambda s: s.update(overrides="training.steps=4"), "spec.overrides must be"),
]


@pytest.mark.parametrize(("change", "said"), SPECS)
def test_a_shipped_sweeps_spec_is_checked_field_by_field(tmp_path: Path, change: Change, said: str) -> None:
    """Before, a shipped spec was checked only to be a mapping: a text metric then killed the workers, `grid: "x"`
    gave a traceback in `report` and `extend`, `keep: "abc"` and `seeds: -5` went in."""
    home = small_home(tmp_path)
    swept(home)
    folder = tmp_path / "shipped"
    assert cli(home, "sweep", "pack", "s", "-o", str(folder)).exit_code == 0
    manifest = json.loads((folder / "sweep.json").read_text())
    change(manifest["sweep"]["spec"])
    (folder / "sweep.json").write_text(json.dumps(manifest))
    target = small_home(tmp_path, "target")
    (target / "experiments" / "EXP-001.yaml").unlink()
    result = cli(target, "sweep", "unpack", str(folder))
    line = one_line(result)
    assert result.exit_code == 2 and f"{folder / 'sweep.json'}: sweep: {said}" in line, line
    assert line.endswith("nothing was changed")
    assert not (target / "experiments").exists() or not list((target / "experiments").iterdir())


def forget_registry(home: Path) -> None:
    for path in home.glob("registry.db*"):
        path.unlink()


def edit_record(home: Path, name: str, change: Change) -> Path:
    path = home / ".octlm" / "sweeps" / f"{name}.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return path


RECORDS: list[tuple[Change, str]] = [
    (lambda r: r["sweep"].update(name="../../evil"), "sweep: name must be lowercase letters"),
    (lambda r: r["sweep"]["spec"].update(metric="track"), "sweep: spec.metric must be one of"),
    (lambda r: r["sweep"]["spec"].update(keep="abc"), "sweep: spec.keep must be"),
    (lambda r: r["sweep"].update(uuid="x"), "sweep: uuid must be a UUID"),
    (lambda r: r["trials"][1].update(status="hacked"), "trial 2: status must be one of"),
    (lambda r: r["trials"][0].update(experiment_id="../EXP-002"), "trial 1: experiment_id must be"),
    (
        lambda r: r.update(decisions=[{"rung": 0, "step": 2, "ranking": "x", "promoted": [], "created": None}]),
        "decision 1: ranking must be",
    ),
    (lambda r: r.update(version=7), "version must be 1"),
]


@pytest.mark.parametrize(("change", "said"), RECORDS)
def test_a_kept_sweep_record_is_checked_before_doctor_rebuilds_from_it(home: Path, change: Change, said: str) -> None:
    """Before, a kept record was read as a mapping with a list of trials and rebuilt as it was: a sweep named
    `../../evil` came back, and `show` crashed on it. Now `doctor` says what is wrong with it in one line naming
    the file and the key, rebuilds nothing from it (a sound record beside it is rebuilt), and the home stays
    usable."""
    swept(home, "s")
    swept(home, "good")
    path = edit_record(home, "s", change)
    forget_registry(home)
    checked = cli(home, "doctor", "--repair", "--json")
    assert checked.exit_code == 1, checked.stderr
    problems = {p["kind"]: p for p in json_out(checked)["problems"] if "sweep" in p["kind"]}
    invalid = problems["invalid sweep record"]
    assert invalid["where"] == ".octlm/sweeps/s.json" and said in invalid["detail"] and not invalid["repaired"]
    assert problems["sweep without rows"]["where"] == "sweep good" and problems["sweep without rows"]["repaired"]
    assert rows(home, "select name from sweeps") == [("good",)]
    for command in (("show",), ("show", "good"), ("sweep", "status", "good")):
        assert cli(home, *command).exit_code == 0, command
    assert not (home.parent / "evil.json").exists() and path.exists()  # left for a person to mend or remove


def test_a_kept_record_that_is_not_json_is_said_and_not_rebuilt(home: Path) -> None:
    swept(home, "s")
    (home / ".octlm" / "sweeps" / "s.json").write_text('{"format": "octlm-sweep-record", "sweep": ')
    forget_registry(home)
    checked = json_out(cli(home, "doctor", "--repair", "--json"))
    (invalid,) = [p for p in checked["problems"] if p["kind"] == "invalid sweep record"]
    assert invalid["where"] == ".octlm/sweeps/s.json" and "cannot be read as JSON" in invalid["detail"]


def damage_row(home: Path, key: str, value: object) -> None:
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update sweeps set spec = json_set(spec, ?, json(?))", (f"$.{key}", json.dumps(value)))


@pytest.mark.parametrize(("key", "value"), [("metric", "track"), ("grid", "x"), ("keep", "abc"), ("seeds", -5)])
def test_a_damaged_registry_row_is_refused_in_one_line_by_every_reader(
    home: Path, tmp_path: Path, key: str, value: object
) -> None:
    """The registry's own row is checked by the one read every command makes of a sweep (``Registry.sweep``)."""
    swept(home)
    damage_row(home, key, value)
    for command in (
        ("sweep", "status", "s"),
        ("show", "s"),
        ("report", "s", "-o", str(tmp_path / "s.html")),
        ("sweep", "extend", "s", "--seeds", "2"),
        ("sweep", "retry", "s"),
        ("sweep", "pack", "s", "-o", str(tmp_path / "shipped")),
    ):
        result = cli(home, *command)
        line = one_line(result)
        assert result.exit_code == 2 and f"registry.db: sweep s: spec.{key} must be" in line, (command, line)
    assert not (tmp_path / "s.html").exists() and not (tmp_path / "shipped").exists()
    assert rows(home, "select count(*) from sweep_trials") == [(2,)]


@pytest.mark.slow
def test_a_worker_refuses_a_damaged_sweep_in_one_line_and_fails_its_trials_without_dying(home: Path) -> None:
    """A text metric in the registry's row: `work s` refuses in one line before claiming anything; `work` on every
    sweep fails each of its trials with that line (before anything trains) and goes on to the end of the queue,
    every claim released (before: the worker recorded the text as the trial's value, then died formatting it)."""
    swept(home)
    damage_row(home, "metric", "track")
    named = octlm(home, "work", "s", "--until-empty")
    assert named.returncode == 2 and "registry.db: sweep s: spec.metric must be one of" in one_line(named)
    assert rows(home, "select count(*) from sweep_claims") == [(0,)]
    every = octlm(home, "work", "--until-empty")
    assert every.returncode == 5, every.stderr  # its trials failed in this call (issue 45 item 1)
    assert every.stderr.count("spec.metric must be one of") == 2 and "Traceback" not in every.stderr
    assert rows(home, "select status, value from sweep_trials") == [("failed", None), ("failed", None)]
    assert rows(home, "select count(*) from sweep_claims where released is null") == [(0,)]
    assert not (home / "checkpoints" / "EXP-002").exists()  # refused before it trained


def test_a_sampler_not_in_the_table_is_refused_in_one_line_by_every_command_that_uses_it(
    home: Path, tmp_path: Path
) -> None:
    """Issue 47 item 1: a spec naming a sampler the table does not hold (a hand's edit, a newer octlm's sampler) was
    read as grid: `extend` grew it with the grid's configurations, a TPE sweep's workers stopped asking, silently.
    Now every command that uses the sampler refuses in one line naming the registry, the sweep and the key; nothing
    is changed."""
    from octlm.core.errors import BadInput
    from octlm.core.home import Home
    from octlm.store.registry import Registry
    from octlm.tasks.sweeps.planning import plan

    swept(home)
    damage_row(home, "sampler", "sobol")
    said = "registry.db: sweep s: spec.sampler must be one of grid, random, tpe (not 'sobol')"
    for command in (
        ("sweep", "extend", "s", "--seeds", "2"),
        ("sweep", "retry", "s"),
        ("sweep", "pack", "s", "-o", str(tmp_path / "shipped")),
        ("sweep", "pack", "s", "-o", str(tmp_path / "sharded"), "--shards", "2"),
        ("work", "s", "--until-empty"),
    ):
        result = cli(home, *command)
        line = one_line(result)
        assert result.exit_code == 2 and said in line, (command, line)
    assert not (tmp_path / "shipped").exists() and not (tmp_path / "sharded").exists()
    assert rows(home, "select count(*), min(status), max(status) from sweep_trials") == [(2, "queued", "queued")]
    assert rows(home, "select count(*) from sweep_claims") == [(0,)]
    with Registry(home / "registry.db") as registry:
        sweep = registry.sweep("s")
    assert sweep is not None
    with pytest.raises(BadInput, match=re.escape(said)):
        plan.top_up(Home(home), sweep)  # the workers' top-up: before, nothing asked, silently


def test_a_shipped_sweep_naming_no_sampler_of_the_table_is_not_unpacked(tmp_path: Path) -> None:
    home = small_home(tmp_path)
    swept(home)
    folder = tmp_path / "shipped"
    assert cli(home, "sweep", "pack", "s", "-o", str(folder)).exit_code == 0
    manifest = json.loads((folder / "sweep.json").read_text())
    manifest["sweep"]["spec"]["sampler"] = "cmaes"
    (folder / "sweep.json").write_text(json.dumps(manifest))
    target = small_home(tmp_path, "target")
    result = cli(target, "sweep", "unpack", str(folder))
    line = one_line(result)
    assert result.exit_code == 2 and f"{folder / 'sweep.json'}: sweep: spec.sampler must be one of" in line, line
    assert line.endswith("nothing was changed") and sorted(p.name for p in (target / "experiments").iterdir()) == [
        "EXP-001.yaml"
    ]


@pytest.mark.slow
def test_every_sweep_worker_fails_the_trials_of_a_sweep_naming_no_sampler_and_goes_on(home: Path) -> None:
    """`work` on every sweep: the trials of the sweep whose sampler is not in the table fail with the line before
    anything trains (before: trained as grid's), and the worker ends the queue, every claim released."""
    swept(home)
    damage_row(home, "sampler", "sobol")
    every = octlm(home, "work", "--until-empty")
    assert every.returncode == 5, every.stderr
    assert every.stderr.count("spec.sampler must be one of grid, random, tpe (not 'sobol')") == 2, every.stderr
    assert "Traceback" not in every.stderr
    assert rows(home, "select status, value from sweep_trials") == [("failed", None), ("failed", None)]
    assert rows(home, "select count(*) from sweep_claims where released is null") == [(0,)]
    assert not (home / "checkpoints" / "EXP-002").exists()
