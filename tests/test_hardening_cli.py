"""Issue 12, items 8, 9 and 12 (CLI, views, registry, doctor): attacks reproduced with real files,
processes, pipes, pseudo-terminals and SQLite databases."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from conftest import cli, json_out, run_on_terminal, write_experiment

from octlm.cli import common
from octlm.cli.render import plain
from octlm.core import layout
from octlm.core.home import Home
from octlm.store import liveness
from octlm.store.experiments import load, register
from octlm.store.registry import Registry

DESCRIPTION = "[/x] oops [link=http://x]a[/link] [blink]b[/blink] \x1b[31mred\x07 :x:"
SHOWN = ("[/x]", "oops", "[link=http://x]a[/link]", "[blink]b[/blink]", "[31mred", ":x:")
OCTLM = [sys.executable, "-m", "octlm"]


def on_terminal(home: Path, *args: str) -> tuple[int, str]:
    return run_on_terminal([*OCTLM, "--home", str(home), *args], columns=400, keep_no_color=True)


def run(home: Path | None, *args: str | bytes, **kwargs) -> subprocess.CompletedProcess:
    command = [*OCTLM, *(["--home", str(home)] if home else []), *args]
    env = {**os.environ, "NO_COLOR": "1", **kwargs.pop("env", {})}
    return subprocess.run(command, capture_output=True, timeout=120, env=env, **kwargs)


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == code, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr


def recorded_run(home: Path, experiment_id: str = "EXP-001", **fields) -> int:
    """A registered experiment with one run row written through the registry's own API."""
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))
        return registry.start_run(experiment_id, "train", start_step=0, **fields)


# ---------------------------------------------------------------- item 8: user text is plain text


def test_plain_removes_controls_keeps_text() -> None:
    assert plain("a\x1b[31mb\x07\r\n\tc\ud800\u202e") == "a[31mb  c\ufffd"
    assert plain("line\none\ttab", multiline=True) == "line\none\ttab"
    assert plain(":x: [bold]") == ":x: [bold]"


def test_markup_in_a_description_shows_verbatim_on_a_terminal_and_in_pipes(home: Path) -> None:
    assert cli(home, "new", "EXP-002", "--description", DESCRIPTION).exit_code == 0
    for args in (["show"], ["show", "EXP-002"], ["show", "EXP-001", "EXP-002"]):
        code, screen = on_terminal(home, *args)
        assert code == 0 and "Traceback" not in screen, screen
        assert all(token in screen for token in SHOWN), (args, screen)
        for raw in ("\x1b[31mred", "\x07", "\x1b]8;", "\x1b[5m", "\u274c"):  # colour, bell, link, blink, emoji
            assert raw not in screen, (args, raw)
    for args in (["show"], ["show", "--csv"], ["show", "EXP-002"], ["show", "EXP-002", "--csv"]):
        piped = cli(home, *args)
        assert piped.exit_code == 0 and "[/x] oops [link=http://x]a[/link]" in piped.stdout, args
        assert "\x1b" not in piped.stdout and "\x07" not in piped.stdout, args
    listed = cli(home, "show", "--json")
    assert "\x1b" not in listed.stdout and json_out(listed)["experiments"][1]["description"] == DESCRIPTION


def test_a_home_path_with_markup_and_emoji_codes_stays_text(tmp_path: Path) -> None:
    home = tmp_path / "h [/x] :x: [link=http://x]"
    write_experiment(home)
    recorded_run(home, argv=["octlm", "--home", str(home), "train", "EXP-001"], host="here [/x]")
    for args in (["show"], ["show", "EXP-001"]):
        code, screen = on_terminal(home, *args)
        assert code == 0 and "Traceback" not in screen, screen
    code, screen = on_terminal(home, "show", "EXP-404")
    assert code == 2 and f"{home}/experiments/EXP-404.yaml" in screen.replace("\r\n", "")
    assert "\u274c" not in screen and "Traceback" not in screen


# ---------------------------------------------------------------- item 9: bad input is one line, exit 2


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["sample", "EXP-001", "--temperature", "nan"], "--temperature nan: must be a finite number"),
        (["sample", "EXP-001", "--temperature", "inf"], "--temperature inf"),
        (["sample", "EXP-001", "--seed", "1e23"], "'--seed'"),
        (["sample", "EXP-001", "--seed", "99999999999999999999999"], "--seed 99999999999999999999999: must be at most"),
        (["sample", "EXP-001", "--max-new-tokens", "100000000"], "--max-new-tokens 100000000: must be at most 100,000"),
        (["sample", "EXP-001", "--prompt", b"caf\xe9"], "--prompt: not valid UTF-8"),
        (["new", "--description", b"\xff\xfe"], "--description: not valid UTF-8"),
        (["overfit", "EXP-001", "--steps", "1e20"], "'--steps'"),
        (["overfit", "EXP-001", "--steps", "100000000000000000000"], "must be at most 1,000,000,000"),
        (["bench", "--precision", ",,"], "--precision ',,'"),
        (["bench", ""], "malformed experiment ID ''"),
        (["show", "--bogus"], "No such option: --bogus"),
        (["doctor", "--other-hosts"], "give it with --repair"),
        (["new", "--set", "training.steps=" + "9" * 40], "training.steps: must be at most 1,000,000,000"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(home: Path, args: list, fragment: str) -> None:
    assert fragment in one_line(run(home, *args))


@pytest.mark.parametrize(
    "yaml_text, fragment",
    [
        ("training: {steps: 100000000000000000000, warmup_steps: 1}", "training.steps: must be at most 1,000,000,000"),
        ("tokenizer: {vocab_size: 1000000000000}", "tokenizer.vocab_size: must be at most 1,048,576"),
        ("training: {batch_size: 100000000}", "training.batch_size: must be at most 65,536"),
        ("model: {context_length: 10000000, d_model: 32, n_heads: 2}", "model.context_length: must be at most"),
        ("model: {n_layers: 100000}", "model.n_layers: must be at most 1,024"),
        ("training: {eval_blocks: 100000000}", "training.eval_blocks: must be at most"),
        ("checkpoint: {keep: 100000000}", "checkpoint.keep: must be at most"),
        ("data: {max_bytes: 100000000000000000}", "data.max_bytes: must be at most"),
        (
            "training:\n  steps: 20\n  batch_size: 4\n  steps: 30\n",
            "line 4, column 3: malformed YAML: duplicate key 'steps'",
        ),
        ("model: {n_layers: 1, n_layers: 2}", "duplicate key 'n_layers' (first on line 1)"),
        ("training: {steps: " + "7" * 5000 + "}", "malformed YAML"),
    ],
)
def test_config_sizes_have_limits_and_keys_are_unique(home: Path, yaml_text: str, fragment: str) -> None:
    (home / "experiments" / "EXP-001.yaml").write_text(yaml_text)
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 2 and fragment in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and len(result.stderr) < 300


def test_config_errors_cut_the_offending_value(home: Path) -> None:
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump({"training": {"steps": "x" * 100_000}}))
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 2 and "xxxxxxxx…" in result.stderr and len(result.stderr) < 200
    keys = json_out(cli(home, "config", "keys", "--json"))["keys"]
    assert next(k for k in keys if k["key"] == "training.steps")["doc"].endswith("at most 1,000,000,000")


@pytest.mark.parametrize(
    "error, code, fragment",
    [
        (OverflowError("Python int too large to convert to C long"), 2, "a number too large"),
        (ValueError("could not convert string to float: 'x'"), 2, "bad value"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2, "not valid UTF-8"),
        (MemoryError(), 3, "out of memory"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), 3, "memory"),
        (type("OutOfMemoryError", (RuntimeError,), {})("CUDA error"), 3, "out of memory on the device"),
        (BrokenPipeError(32, "Broken pipe"), 0, ""),
    ],
)
def test_handled_maps_every_failure_to_one_line(error: BaseException, code: int, fragment: str, capsys) -> None:
    @common.handled
    def command() -> None:
        raise error

    with pytest.raises(typer.Exit) as caught:
        command()
    assert caught.value.exit_code == code
    stderr = capsys.readouterr().err
    assert fragment in stderr and stderr.count("\n") == (1 if fragment else 0), stderr


@pytest.mark.parametrize("reader", ["show --csv | head -1", "show | head -1", "show --json | head -c 10"])
def test_a_reader_that_leaves_early_is_no_error(home: Path, reader: str) -> None:
    assert cli(home, "new", "--description", "d" * 300_000).exit_code == 0  # far more than a pipe holds
    script = f"set -o pipefail; {' '.join(OCTLM)} --home '{home}' {reader} >/dev/null"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


# ---------------------------------------------------------------- item 12: read-only registry


def test_reads_never_write_a_linked_registry(home: Path, tmp_path: Path) -> None:
    assert cli(home, "new", "--description", "second").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("pragma journal_mode=delete")
    shutil.move(home / "registry.db", elsewhere / "registry.db")
    (home / "registry.db").symlink_to(elsewhere / "registry.db")
    before = (elsewhere / "registry.db").read_bytes()
    for args in (["show"], ["show", "EXP-002"], ["show", "EXP-001", "EXP-002", "--json"], ["doctor", "--json"]):
        assert cli(home, *args).exit_code in (0, 1), args
    assert (elsewhere / "registry.db").read_bytes() == before
    assert sorted(p.name for p in elsewhere.iterdir()) == ["registry.db"]
    assert not list(home.glob("registry.db-*"))
    with sqlite3.connect(elsewhere / "registry.db") as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "delete"


def test_show_works_on_a_read_only_medium(home: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    assert cli(home, "new", "--description", "second").exit_code == 0
    assert not list(home.glob("registry.db-*"))  # the last writer folded the WAL back in
    mount = f"mount --bind '{home}' '{home}' && mount -o remount,ro,bind '{home}' '{home}'"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} && ! touch '{home}/x'"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {probe.stderr!r}")
    show = f"{mount} && exec {' '.join(OCTLM)} --home '{home}' show --json"
    done = subprocess.run(["unshare", "-m", "sh", "-c", show], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [(e["id"], e["description"]) for e in json.loads(done.stdout)["experiments"]] == [
        ("EXP-001", "tiny test experiment"),  # a file not registered yet: its YAML speaks for it
        ("EXP-002", "second"),
    ]


def test_show_and_doctor_work_in_a_home_made_read_only(home: Path) -> None:
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv")
    assert cli(home, "new", "--description", "second").exit_code == 0
    paths = [home, home / "experiments", home / "registry.db", *(home / "experiments").iterdir()]
    for path in paths:  # chmod a-w, as a user for whom the home is read-only (root, less its override)
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        if subprocess.run([*drop, "sh", "-c", f"touch '{home}/x'"], capture_output=True).returncode == 0:
            pytest.skip("cannot drop the permission override here")
        shown, checked = (
            subprocess.run([*drop, *OCTLM, "--home", str(home), *args], capture_output=True, text=True, timeout=60)
            for args in (["show", "--json"], ["doctor", "--json"])
        )
        assert shown.returncode == 0, shown.stderr
        assert [e["description"] for e in json.loads(shown.stdout)["experiments"]] == ["tiny test experiment", "second"]
        assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr  # EXP-001 has no row
        assert [p["kind"] for p in json.loads(checked.stdout)["problems"]] == ["experiment without row"]
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


def test_a_pending_migration_is_read_in_memory_and_never_written(home: Path) -> None:
    recorded_run(home, latest_metrics={"eval_loss": 3.0})
    with sqlite3.connect(home / "registry.db") as conn:  # as the previous release left it
        conn.execute("delete from _sqlite_migrations where name like 'm003%'")
        conn.execute("alter table runs drop column pid_start")
    before = (home / "registry.db").read_bytes()
    listed = cli(home, "show", "--json")
    assert listed.exit_code == 0 and json_out(listed)["experiments"][0]["eval_loss"] == 3.0
    assert (home / "registry.db").read_bytes() == before
    with Registry(home / "registry.db") as registry:  # a writer migrates
        assert "pid_start" in registry.runs("EXP-001")[0]


# ---------------------------------------------------------------- item 12: malformed rows


def test_a_malformed_row_is_skipped_by_show_and_repaired_by_doctor(home: Path) -> None:
    write_experiment(home, "EXP-002")
    recorded_run(home, "EXP-001", latest_metrics={"eval_loss": 2.5})
    recorded_run(home, "EXP-002", latest_metrics={"eval_loss": 3.5})
    with sqlite3.connect(home / "registry.db") as conn:  # one damaged row, as a hand edit leaves it
        conn.execute("update runs set latest_metrics = '{\"eval_loss\": ' where experiment_id = 'EXP-002'")
        conn.execute("update experiments set config_json = '{' where id = 'EXP-002'")
    listed = cli(home, "show", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [(e["id"], e["eval_loss"]) for e in json_out(listed)["experiments"]] == [("EXP-001", 2.5), ("EXP-002", None)]
    assert listed.stderr.count("octlm: warning:") == 2 and "latest_metrics is not valid JSON" in listed.stderr
    assert cli(home, "show", "EXP-002").exit_code == 0 and cli(home, "show", "--csv").exit_code == 0
    checked = json_out(cli(home, "doctor", "--json"))
    assert sorted(p["where"] for p in checked["problems"] if p["kind"] == "malformed registry cell") == [
        "experiments row EXP-002",
        "runs row 2",
    ]
    assert not checked["healthy"]
    assert json_out(cli(home, "doctor", "--repair", "--json"))["healthy"]
    clean = cli(home, "show", "--json")
    assert clean.stderr == "" and json_out(clean)["experiments"][1]["steps"] == 12
    assert cli(home, "doctor").exit_code == 0


def test_junk_in_a_run_file_does_not_break_compare_or_plot(home: Path) -> None:
    write_experiment(home, "EXP-002")
    (home / "runs").mkdir()
    (home / "runs" / "EXP-001.jsonl").write_text(
        '[1, 2]\n"text"\n{"tokens": "many", "train_loss": 5.0}\n{"tokens": 64, "train_loss": NaN, "eval_loss": 4.0}\n'
    )
    (home / "runs" / "EXP-002.jsonl").write_text('{"tokens": 64, "train_loss": 3.0, "lr": "fast"}\n')
    for args in (["EXP-001", "EXP-002"], ["EXP-001", "EXP-002", "--plot"], ["EXP-001", "EXP-002", "--plot", "--json"]):
        result = cli(home, "show", *args)
        assert result.exit_code == 0, (args, result.stderr)
    compared = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))
    assert [e["best"]["train_loss"] for e in compared["experiments"]] == [5.0, 3.0]


# ---------------------------------------------------------------- item 12: process liveness


def test_start_run_records_the_process_start_time(tmp_path: Path, home: Path) -> None:
    run_id = recorded_run(home)
    with Registry(home / "registry.db", create=False) as registry:
        [row] = registry.runs("EXP-001")
    assert row["id"] == run_id and row["pid_start"] == liveness.start_time(os.getpid()) is not None
    assert row["status"] == "running"


def test_a_reused_pid_does_not_keep_a_dead_run_running(home: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"])  # alive, with the pid the dead run recorded
    try:
        started = liveness.start_time(stranger.pid)
        assert started is not None
        recorded_run(home, pid=stranger.pid, pid_start=started - 1)
        detail = json_out(cli(home, "show", "EXP-001", "--json"))
        assert detail["runs"][0]["status"] == "crashed" and detail["status"] == "crashed"
        assert json_out(cli(home, "show", "--json"))["experiments"][0]["status"] == "crashed"
        with sqlite3.connect(home / "registry.db") as conn:
            conn.execute("update runs set pid_start = ?", (started,))  # the same process: still running
        assert json_out(cli(home, "show", "EXP-001", "--json"))["status"] == "running"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_run_of_another_host_reads_unknown_and_doctor_can_mark_it(home: Path) -> None:
    recorded_run(home, host="gpu-box-7", pid=4242)
    assert json_out(cli(home, "show", "--json"))["experiments"][0]["status"] == "unknown (host gpu-box-7)"
    assert json_out(cli(home, "show", "EXP-001", "--json"))["runs"][0]["status"] == "unknown (host gpu-box-7)"
    checked = json_out(cli(home, "doctor", "--repair", "--json"))
    [problem] = [p for p in checked["problems"] if p["kind"] == "run on another host"]
    assert not problem["repaired"] and "--other-hosts" in problem["detail"] and not checked["healthy"]
    assert json_out(cli(home, "doctor", "--repair", "--other-hosts", "--json"))["healthy"]
    assert json_out(cli(home, "show", "EXP-001", "--json"))["runs"][0]["status"] == "crashed"


# ---------------------------------------------------------------- item 12: checkpoints doctor trusts


def test_doctor_reports_checksum_disagreement_and_foreign_checkpoints(home: Path) -> None:
    from octlm.train import checkpoint

    write_experiment(home, "EXP-002")
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    four, eight = layout.checkpoint_path(folder, 4), layout.checkpoint_path(folder, 8)
    real = layout.read_sidecar(eight)
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update checkpoints set sha256 = ? where step = 4", ("0" * 64,))  # a stale row
    layout.sidecar(eight).write_text(f"{'f' * 64}  {eight.name}\n")  # a stale checksum file
    (home / "checkpoints" / "EXP-002").mkdir()
    for path in (four, layout.sidecar(four)):  # copied from another experiment
        shutil.copy(path, home / "checkpoints" / "EXP-002" / path.name)
    record = checkpoint.read(four)
    record.kind = "overfit"  # an overfit checkpoint dropped into the main folder
    checkpoint.save(layout.checkpoint_path(folder, 12), record)
    checked = json_out(cli(home, "doctor", "--json"))
    found = {(p["kind"], p["where"]): p["detail"] for p in checked["problems"]}
    assert "the registry row is stale" in found[("checksum disagreement", "checkpoints/EXP-001/step-000004.pt")]
    assert "step-000008.sha256 is stale" in found[("checksum disagreement", "checkpoints/EXP-001/step-000008.pt")]
    assert "records experiment EXP-001" in found[("foreign checkpoint", "checkpoints/EXP-002/step-000004.pt")]
    assert "kind overfit" in found[("foreign checkpoint", "checkpoints/EXP-001/step-000012.pt")]
    repaired = json_out(cli(home, "doctor", "--repair", "--json"))
    assert {p["kind"] for p in repaired["problems"] if not p["repaired"]} == {"foreign checkpoint"}
    assert layout.read_sidecar(eight) == real
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select sha256 from checkpoints where step = 4").fetchone()[0] == (
            layout.read_sidecar(four)
        )
        assert conn.execute("select count(*) from checkpoints where experiment_id = 'EXP-002'").fetchone()[0] == 0
        assert conn.execute("select count(*) from runs where experiment_id = 'EXP-002'").fetchone()[0] == 0
