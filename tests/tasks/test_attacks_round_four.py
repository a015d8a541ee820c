"""Issue 33 items 16-23, the defects an attack on the sweeps and the registry found, each tested by a variant of its
attack: sweeps rebuilt after the registry's loss, sweep specs refused before any work, TPE building from the base it
was made from, kernel settings recorded and compared, imports and registry files that are not what they seem,
shipped sweeps validated and unpacked whole, a linked cache refused, and the smaller ones."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_corpus, write_experiment

from octlm.core.home import Home

TINY = {"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1}


def small_home(tmp_path: Path, name: str = "home", **training: object) -> Path:
    home = write_corpus(tmp_path / name)
    write_experiment(home, training={**TINY, **training}, checkpoint={"interval": 2, "keep": 5})
    return home


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql).fetchall()


# ---------------------------------------------------------------- 16: the registry's loss takes no sweep


@pytest.mark.slow
def test_a_sweep_survives_the_registry_s_loss(tmp_path: Path) -> None:
    home = small_home(tmp_path)
    made = cli(
        home,
        "sweep",
        "new",
        "sh",
        "--from",
        "EXP-001",
        "--grid",
        "training.learning_rate=1e-3,3e-3",
        "--halving",
        "2,4",
        "--keep",
        "0.5",
    )
    assert made.exit_code == 0, made.stderr
    done = octlm(home, "work", "sh", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    before = json_out(cli(home, "sweep", "status", "sh", "--json"))
    assert (home / ".octlm" / "sweeps" / "sh.json").is_file()
    for path in home.glob("registry.db*"):
        path.unlink()
    assert cli(home, "doctor", "--repair").exit_code == 0
    after = json_out(cli(home, "sweep", "status", "sh", "--json"))
    strip = lambda s: [(t["id"], t["status"], t["rung"], t["value"]) for t in s["trials"]]  # noqa: E731
    assert strip(after) == strip(before) and len(after["decisions"]) == len(before["decisions"]) == 1
    tags = json_out(cli(home, "show", "--where", "tags~sweep:sh", "--json"))["experiments"]
    assert sorted(e["id"] for e in tags) == ["EXP-002", "EXP-003"]
    assert json_out(cli(home, "doctor", "--json"))["healthy"]


# ---------------------------------------------------------------- 17: a sweep's spec checked before any work


@pytest.mark.parametrize(
    "args, said",
    [
        (["--grid", "training.learning_rate=1e-3,3e-3", "--metric", "eval_los"], "--metric 'eval_los'"),
        (["--grid", "training.learning_rate=1e-3,3e-3", "--metric", "experiment_id"], "--metric 'experiment_id'"),
        (
            [
                "--grid",
                "training.learning_rate=" + ",".join(f"{i}e-3" for i in range(1, 101)),
                "--grid",
                "training.weight_decay=" + ",".join(f"0.{i:03d}" for i in range(1, 101)),
                "--grid",
                "training.beta2=" + ",".join(f"0.9{i:02d}" for i in range(1, 100)),
            ],
            "990,000 trials",
        ),
        (["--random", "1000000000", "--range", "training.learning_rate=1e-4:1e-2"], "1,000,000,000 trials"),
        (["--sampler", "tpe", "--trials", "1000000000", "--range", "training.learning_rate=1e-4:1e-2"], "trials"),
        (
            ["--sampler", "tpe", "--trials", "4", "--parallel", "20000", "--range", "training.learning_rate=1e-4:1e-2"],
            "--parallel 20000",
        ),
        (["--grid", "id=EXP-1,EXP-2"], "does not change what a trial trains"),
        (["--grid", "description=a,b"], "does not change what a trial trains"),
        (["--grid", "training.eval_interval=2,4"], "does not change what a trial trains"),
        (["--grid", "training.learning_rate=1e-3,0.001"], "given twice"),
    ],
)
def test_a_sweep_spec_is_refused_at_once_before_anything_is_written(home: Path, args: list[str], said: str) -> None:
    result = cli(home, "sweep", "new", "bad", "--from", "EXP-001", *args)
    assert result.exit_code == 2, (args, result.stderr)
    assert said in one_line(result)
    assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]
    assert not (home / ".octlm" / "sweeps").exists()


# ---------------------------------------------------------------- 18: TPE builds from the base it was made from


def test_later_tpe_trials_are_made_from_the_base_kept_with_the_sweep(home: Path) -> None:
    from octlm.store.registry import Registry
    from octlm.tasks.sweeps.planning import plan

    made = cli(
        home,
        "sweep",
        "new",
        "tpe",
        "--from",
        "EXP-001",
        "--sampler",
        "tpe",
        "--trials",
        "4",
        "--parallel",
        "1",
        "--range",
        "training.learning_rate=1e-4:1e-2:log",
    )
    assert made.exit_code == 0, made.stderr
    write_experiment(home, training={"batch_size": 8})  # the base's YAML edited mid-sweep
    with Registry(home / "registry.db") as registry:
        sweep = registry.sweep("tpe")
        assert sweep is not None
        trial = registry.trials(sweep["id"])[0]
        registry.settle_claim(registry.claim([sweep["id"]], {"host": "h", "pid": 1})["claim_id"], "done", value=5.0)
        assert trial["experiment_id"] == "EXP-002"
    added = plan.top_up(Home(home), sweep)
    assert added, "TPE asked for another trial"
    config = json_out(cli(home, "show", added[0], "--json"))["config"]
    assert config["training"]["batch_size"] == 4  # the base as it was, not its edited YAML
    (home / "experiments" / "EXP-001.yaml").unlink()  # and a deleted base kills nothing
    assert plan.top_up(Home(home), {**sweep, "spec": {**sweep["spec"], "parallel": 2}}) is not None


# ---------------------------------------------------------------- 19: the user's own kernel settings


@pytest.mark.slow
def test_a_resume_under_other_kernel_settings_is_warned_under_local_and_refused_under_vendor(tmp_path: Path) -> None:
    home = small_home(tmp_path)
    assert octlm(home, "train", "EXP-001", "--until", "2", "-q").returncode == 0
    resumed = octlm(home, "resume", "EXP-001", "-q", env={"MKL_CBWR": "COMPATIBLE"})
    assert resumed.returncode == 0, resumed.stderr
    assert "other kernel settings (MKL_CBWR unset -> COMPATIBLE)" in resumed.stderr
    write_experiment(home, "EXP-002", training={**TINY, "determinism": "vendor"}, checkpoint={"interval": 2})
    assert octlm(home, "train", "EXP-002", "--until", "2", "-q").returncode == 0
    refused = octlm(home, "resume", "EXP-002", "-q", env={"MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    assert refused.returncode == 3 and "MKL_ENABLE_INSTRUCTIONS unset -> AVX2" in refused.stderr, refused.stderr


# ---------------------------------------------------------------- 20: imports and registry files


@pytest.mark.slow
def test_an_import_of_a_copy_retrained_on_changed_data_is_refused(tmp_path: Path) -> None:
    here = small_home(tmp_path)
    assert cli(here, "train", "EXP-001", "-q").exit_code == 0
    there = tmp_path / "copy"
    shutil.copytree(here, there)
    (there / "corpus" / "doc0.txt").write_text("changed text " * 200)
    assert cli(there, "train", "EXP-001", "--restart", "--yes", "-q").exit_code == 0
    assert cli(there, "registry", "export", "-o", str(tmp_path / "copy.jsonl")).exit_code == 0
    before = rows(here, "select count(*) from runs")
    result = cli(here, "registry", "import", str(tmp_path / "copy.jsonl"))
    assert result.exit_code == 3 and "trained on other data" in one_line(result)
    assert rows(here, "select count(*) from runs") == before


def test_a_linked_registry_is_never_written_and_a_fifo_never_hangs(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-home"
    elsewhere.mkdir()
    assert cli(elsewhere, "new").exit_code == 0
    (home / "registry.db").symlink_to(elsewhere / "registry.db")
    before = (elsewhere / "registry.db").read_bytes()
    result = cli(home, "tag", "EXP-001", "+linked")
    assert result.exit_code == 3 and "symbolic link" in one_line(result)
    assert (elsewhere / "registry.db").read_bytes() == before
    (home / "registry.db").unlink()
    (home / "registry.db").symlink_to(tmp_path / "nowhere.db")  # a dangling link: no database made outside
    assert cli(home, "new").exit_code == 3 and not (tmp_path / "nowhere.db").exists()
    (home / "registry.db").unlink()
    os.mkfifo(home / "registry.db")
    shown = octlm(home, "show", timeout=30)
    assert shown.returncode == 3 and "FIFO" in shown.stderr and "move it aside" in shown.stderr


def test_a_garbage_registry_says_to_move_it_aside(home: Path) -> None:
    (home / "registry.db").write_bytes(b"not sqlite at all" * 100)
    result = cli(home, "doctor", "--repair")
    assert result.exit_code == 3 and "move it aside" in one_line(result) and "doctor --repair" in one_line(result)


# ---------------------------------------------------------------- 21: sweep unpack validates and is one whole


def _shipped(tmp_path: Path) -> tuple[Path, Path]:
    home = small_home(tmp_path)
    assert cli(home, "sweep", "new", "ship", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    folder = tmp_path / "shipped"
    assert cli(home, "sweep", "pack", "ship", "-o", str(folder)).exit_code == 0
    return home, folder


def _edit(folder: Path, change) -> None:
    manifest = json.loads((folder / "sweep.json").read_text())
    change(manifest)
    (folder / "sweep.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda m: m["sweep"].update(name="../../etc/passwd"), "sweep: name"),
        (lambda m: m["trials"][0].update(target_step="4"), "trial 1: target_step"),
        (lambda m: m["trials"][1].update(status="hacked"), "trial 2: status"),
        (lambda m: m["trials"][0].update(value="nan"), "trial 1: value"),
        (lambda m: m["sweep"].update(uuid="not-a-uuid"), "sweep: uuid"),
    ],
)
def test_a_shipped_sweep_is_validated_as_an_import_is(tmp_path: Path, change, said: str) -> None:
    _, folder = _shipped(tmp_path)
    _edit(folder, change)
    target = small_home(tmp_path, "target")
    (target / "experiments" / "EXP-001.yaml").unlink()
    result = cli(target, "sweep", "unpack", str(folder))
    assert result.exit_code == 2 and said in one_line(result), result.stderr
    assert not (target / "registry.db").exists() or rows(target, "select count(*) from experiments") == [(0,)]


def test_a_shipped_sweep_unpacks_whole_or_not_at_all(tmp_path: Path) -> None:
    _, folder = _shipped(tmp_path)
    target = small_home(tmp_path, "target")
    (target / "experiments" / "EXP-001.yaml").unlink()
    write_experiment(target, "EXP-003", training={"learning_rate": 1e-3})  # another experiment, here first
    assert cli(target, "doctor", "--repair").exit_code == 0  # registered: EXP-003 is taken here by another UUID
    result = cli(target, "sweep", "unpack", str(folder))
    line = one_line(result)
    assert result.exit_code == 3 and "EXP-003" in line and "--as" not in line and "keeps the trials' IDs" in line
    assert rows(target, "select id from experiments order by id") == [("EXP-003",)]  # EXP-002 was not added first
    assert not (target / "checkpoints" / "EXP-002").exists()


def test_a_pack_of_junk_members_is_refused_before_it_is_read_whole(tmp_path: Path, home: Path) -> None:
    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as tar:
        for index in range(30_000):
            info = tarfile.TarInfo(f"octlm-pack/checkpoints/step-{index:06d}.sha256")
            tar.addfile(info)
    result = cli(home, "unpack", str(junk))
    assert result.exit_code == 3 and "more than 20,003 members" in one_line(result)


# ---------------------------------------------------------------- 22: a linked cache


def test_a_cache_folder_linked_out_of_the_home_is_refused(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-cache"
    outside.mkdir()
    (home / "cache").symlink_to(outside)
    result = cli(home, "train", "EXP-001")
    assert result.exit_code == 3 and "cache" in one_line(result) and "symbolic link" in one_line(result)
    assert list(outside.iterdir()) == []


# ---------------------------------------------------------------- 23: the smaller ones


def test_json_never_holds_a_bare_infinity() -> None:
    code = "from octlm.cli import render; render.emit_json({'a': float('inf'), 'b': [float('nan')], 'c': 1.5})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"a": None, "b": [None], "c": 1.5} and "Infinity" not in done.stdout


@pytest.mark.slow
def test_a_fork_that_could_not_train_is_refused_at_new(tmp_path: Path) -> None:
    home = small_home(tmp_path, steps=8)
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    for args, said in (
        (["--with-optimizer", "--set", "training.steps=6"], "training.steps must be above it"),
        (["--set", "model.d_model=48"], "model.d_model is 32 there and 48 here"),
        (["--set", "tokenizer.vocab_size=400"], "tokenizer.vocab_size"),
        (["--with-optimizer", "--set", "data.sampling=epochs", "--set", "training.steps=12"], "data.sampling"),
    ):
        result = cli(home, "new", "--init-from", "EXP-001@8", *args)
        assert result.exit_code == 2 and said in one_line(result), (args, result.stderr)
    assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]


def test_small_refusals(home: Path) -> None:
    assert cli(home, "sweep", "new", "s", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    result = cli(home, "sweep", "pack", "s", "-o", "")
    assert result.exit_code == 2 and "-o ''" in one_line(result)
    result = cli(home, "canary", "--determinism", "")
    assert result.exit_code == 2 and "--determinism ''" in one_line(result)


@pytest.mark.slow
def test_a_split_without_validation_documents_says_what_its_eval_loss_is(tmp_path: Path) -> None:
    home = write_corpus(tmp_path / "home")
    write_experiment(home, training=TINY, data={"sources": ["corpus/*.txt"], "validation_fraction": 0})
    result = cli(home, "train", "EXP-001", "--json")
    assert result.exit_code == 0 and json_out(result)["eval_split"] == "training", result.stderr
    text = cli(home, "resume", "EXP-001").stderr
    assert "on training blocks" in text or "already complete" in text


@pytest.mark.slow
def test_on_a_read_only_home_eval_works_and_writers_say_read_only(tmp_path: Path) -> None:
    home = small_home(tmp_path)
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv")
    for path in [home, *home.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        base = [*drop, sys.executable, "-m", "octlm", "--home", str(home)]
        env = {**os.environ, "NO_COLOR": "1"}
        evaluated = subprocess.run([*base, "eval", "EXP-001", "--json"], capture_output=True, text=True, env=env)
        assert evaluated.returncode == 0, evaluated.stderr
        assert json.loads(evaluated.stdout)["step"] == 4 and "not recorded" in evaluated.stderr
        tagged = subprocess.run([*base, "tag", "EXP-001", "+x"], capture_output=True, text=True, env=env)
        assert tagged.returncode == 3 and "read-only" in tagged.stderr and "cannot be opened" not in tagged.stderr
        shown = subprocess.run([*base, "show"], capture_output=True, text=True, env=env)
        assert shown.returncode == 0, shown.stderr
    finally:
        for path in [home, *home.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
