"""Issue 45 items 14 and 18c (an attack on sweeps under concurrency and shipping), each tested by a variant of its
attack with real processes: two ``sweep extend`` at once add each missing trial once; ``extend`` racing ``sweep pack``
never erases the shipped mark nor ships a sweep that grew meanwhile; ``work`` at home leaves a shipped sweep's trials
alone, and a trial trained here as well merges back when its weights are the same; a SIGKILLed ``extend`` leaves
nothing ``doctor`` would register; ``extend --random -4`` and ``sweep pack -o`` inside the home are refused in one line.

The races are made deterministic by holding the registry's write lock (``BEGIN IMMEDIATE`` on a connection of the
test's own) while the processes start: each reads the sweep, writes its files and then waits for the lock, so both
have read the same sweep before either writes a row, whatever the scheduler does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, json_out, octlm, write_corpus, write_experiment

from octlm.core import layout
from octlm.train import checkpoint

TINY = {"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1}
GRID = ("--grid", "training.learning_rate=1e-3,3e-3")


def small_home(tmp_path: Path, name: str = "home") -> Path:
    home = write_corpus(tmp_path / name)
    write_experiment(home, training=TINY, checkpoint={"interval": 2, "keep": 5})
    return home


def rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql).fetchall()


def spec(home: Path, name: str) -> dict:
    return json.loads(rows(home, f"select spec from sweeps where name = '{name}'")[0][0])


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def written(home: Path) -> list[str]:
    """Every file and folder in the home, but the registry's and the sweep's records beside it (written as it is)."""
    return sorted(str(p) for p in home.rglob("*") if "sweeps" not in p.parts and "registry.db" not in p.name)


def files(home: Path) -> list[str]:
    return sorted(p.stem for p in (home / "experiments").glob("*.yaml"))


@contextlib.contextmanager
def registry_held(home: Path) -> Iterator[None]:
    """The registry's write lock, held by this test until the block ends: a writer waits for it (60 s at most)."""
    conn = sqlite3.connect(home / "registry.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("COMMIT")
        conn.close()


def launch(home: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "octlm", "--home", str(home), *args]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def until(predicate, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def ended(process: subprocess.Popen) -> tuple[int, str]:
    _, err = process.communicate(timeout=120)
    return process.returncode, err


# ---------------------------------------------------------------- two extends at once


def test_two_extends_at_once_add_each_missing_trial_once(home: Path) -> None:
    """The attack: two `extend --seeds` started together both added the same trials (200 rows for 100 pairs). Here
    both have read the sweep and written their files before either may write a row: one adds the trials, the other
    is refused (exit 3, one line), its files taken back; asked again, it has nothing to add."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    with registry_held(home):
        racers = [launch(home, "sweep", "extend", "lr", "--seeds", "3") for _ in range(2)]
        until(lambda: len(files(home)) == 1 + 2 + 2 * 4)  # each has read the sweep and written its 4 files
    outcomes = sorted(ended(racer) for racer in racers)
    assert [code for code, _ in outcomes] == [0, 3], outcomes
    assert "changed while it was being extended" in one_line(outcomes[1][1])
    pairs = rows(home, "select group_key, replicate from sweep_trials")
    assert len(pairs) == len(set(pairs)) == 6  # 2 configurations x 3 seeds, each once
    registered = sorted(r[0] for r in rows(home, "select id from experiments"))
    assert files(home) == ["EXP-001", *registered]  # the base, then no file without a row
    again = cli(home, "sweep", "extend", "lr", "--seeds", "3", "--json")
    assert again.exit_code == 0 and json_out(again)["trials"] == []


def test_extends_of_seeds_and_of_grid_at_once_keep_both_or_refuse_one(home: Path) -> None:
    """A variant: one adds seeds, the other grid values (no trial in common): the second must not write the spec the
    first grew from, or the sweep's spec would no longer say what its trials are."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    with registry_held(home):
        seeds = launch(home, "sweep", "extend", "lr", "--seeds", "2")
        grid = launch(home, "sweep", "extend", "lr", "--grid", "training.learning_rate=1e-2")
        until(lambda: len(files(home)) == 1 + 2 + 2 + 1)
    codes = sorted([ended(seeds)[0], ended(grid)[0]])
    assert codes == [0, 3]
    grown, trials = spec(home, "lr"), rows(home, "select params from sweep_trials")
    configurations = len(grown["grid"]["training.learning_rate"])
    assert len(trials) == configurations * grown["seeds"]  # the spec says what the trials are


# ---------------------------------------------------------------- extend racing sweep pack


def test_extend_racing_pack_never_erases_the_mark_nor_ships_a_sweep_that_grew(home: Path, tmp_path: Path) -> None:
    """The attack: `extend` read the sweep, `sweep pack` marked it shipped, `extend` wrote its grown spec over the
    mark. Here both have read the sweep before either writes: exactly one of them wins; a shipped sweep ships every
    trial it has, and an extended one is not marked."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    ship = tmp_path / "ship"
    with registry_held(home):
        extend = launch(home, "sweep", "extend", "lr", "--seeds", "3")
        until(lambda: len(files(home)) == 1 + 2 + 4)
        pack = launch(home, "sweep", "pack", "lr", "-o", str(ship))
        until(lambda: (ship / "sweep.json").exists())  # packed from the sweep as it was; only the mark is left
    (extended, extend_err), (packed, pack_err) = ended(extend), ended(pack)
    assert sorted([extended, packed]) == [0, 3], (extend_err, pack_err)
    trials = sorted(r[0] for r in rows(home, "select experiment_id from sweep_trials"))
    if packed == 0:
        assert spec(home, "lr")["shipped"]["trials"] == trials == ["EXP-002", "EXP-003"]
        assert "shipped to" in one_line(extend_err) or "try again" in one_line(extend_err)
    else:
        assert "shipped" not in spec(home, "lr") and len(trials) == 6
        assert "changed while it was being packed" in one_line(pack_err)


# ---------------------------------------------------------------- a SIGKILL mid-extend


def killed_extend(home: Path, seeds: str, placed: int, hold: bool) -> None:
    """``sweep extend --seeds`` SIGKILLed once ``placed`` of its files are in ``experiments/`` (with ``hold``, while
    the test holds the registry's lock: every file placed, not one row written)."""
    with registry_held(home) if hold else contextlib.nullcontext():
        extend = launch(home, "sweep", "extend", "lr", "--seeds", seeds)
        until(lambda: len(files(home)) >= 3 + placed)
        extend.send_signal(signal.SIGKILL)
        assert extend.wait(timeout=60) == -signal.SIGKILL


@pytest.mark.parametrize(("seeds", "placed", "hold"), [("3", 4, True), ("400", 40, False)])
def test_a_killed_extend_leaves_nothing_doctor_would_register(home: Path, seeds: str, placed: int, hold: bool) -> None:
    """The attack: SIGKILL during a large `extend` left thousands of experiment files without rows, which `doctor
    --repair` then registered as loose experiments. Killed with every file placed and no row in (the lock held), or
    somewhere in the middle of a larger extend: `doctor` names the staging left behind, not one experiment without a
    row; `--repair` removes it with the files; the sweep and the registry are as before, and extend runs again."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    before, registered = files(home), rows(home, "select id from experiments order by id")
    killed_extend(home, seeds, placed, hold)
    assert len(files(home)) > len(before)  # placed, never registered
    checked = json_out(cli(home, "doctor", "--json"))
    kinds = {p["kind"] for p in checked["problems"] if p["where"] != "EXP-001"}  # the base is registered by no sweep
    assert kinds == {"stale staging of new experiments"}, checked["problems"]
    assert cli(home, "doctor", "--repair").exit_code == 0  # (and registers the base, as ever)
    assert files(home) == before
    assert rows(home, "select id from experiments order by id") == [("EXP-001",), *registered]
    assert not [p for p in home.iterdir() if p.name.startswith(".new-")]
    assert len(rows(home, "select 1 from sweep_trials")) == 2
    grown = cli(home, "sweep", "extend", "lr", "--seeds", "3", "--json")
    assert grown.exit_code == 0 and json_out(grown)["trials"] == ["EXP-004", "EXP-005", "EXP-006", "EXP-007"]


def test_doctor_leaves_a_live_extends_files_alone(home: Path) -> None:
    """A variant: `doctor` while an extend has placed its files and waits for the registry: they are not experiments
    without rows (`--repair` would register them under the extend), and the extend then finishes as if alone."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    with registry_held(home):
        extend = launch(home, "sweep", "extend", "lr", "--seeds", "3")
        until(lambda: len(files(home)) == 3 + 4)
        checked = json_out(cli(home, "doctor", "--json"))
        assert [p["where"] for p in checked["problems"]] == ["EXP-001"], checked["problems"]
    assert ended(extend)[0] == 0 and len(rows(home, "select 1 from sweep_trials")) == 6


# ---------------------------------------------------------------- small refusals


def test_extend_refuses_a_negative_number_of_draws(home: Path) -> None:
    ranged = ("--range", "training.learning_rate=1e-4:1e-2:log", "--random", "3")
    assert cli(home, "sweep", "new", "r", "--from", "EXP-001", *ranged).exit_code == 0
    before = spec(home, "r")
    for draws in ("-4", "-1"):
        refused = cli(home, "sweep", "extend", "r", "--random", draws)
        assert refused.exit_code == 2 and f"--random {draws}" in one_line(refused.stderr)
    assert spec(home, "r") == before and len(rows(home, "select 1 from sweep_trials")) == 3


@pytest.mark.parametrize("inside", [".", "experiments", "runs", ".octlm", "checkpoints/EXP-002", "locks"])
def test_pack_refuses_a_folder_of_the_home_itself(home: Path, inside: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: `sweep pack -o .` in the home wrote the packs into it and marked the sweep shipped to itself."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    monkeypatch.chdir(home)
    before = written(home)
    refused = cli(home, "sweep", "pack", "lr", "-o", inside)
    assert refused.exit_code == 2 and "inside the home" in one_line(refused.stderr), refused.stderr
    assert "shipped" not in spec(home, "lr")
    assert written(home) == before  # nothing written


@pytest.mark.slow
def test_a_worker_here_racing_pack_trains_no_shipped_trial(home: Path, tmp_path: Path) -> None:
    """A variant: a worker here claims while `sweep pack` has packed the trials but not marked them yet. Either the
    worker claims first (the pack is not marked: the trial it trains is no longer the packed one) or the pack marks
    first (the worker takes no shipped trial); never a shipped trial trained here."""
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    ship = tmp_path / "ship"
    with registry_held(home):
        pack = launch(home, "sweep", "pack", "lr", "-o", str(ship))
        until(lambda: (ship / "sweep.json").exists())
        worker = launch(home, "work", "lr", "--until-empty", "-q")
        time.sleep(3)  # the worker started and waits for the lock to claim (either order is checked below)
    (packed, pack_err), (worked, work_err) = ended(pack), ended(worker)
    assert worked == 0, work_err
    trained = [r[0] for r in rows(home, "select experiment_id from sweep_claims")]
    if packed == 0:
        assert trained == [] and spec(home, "lr")["shipped"]["trials"] == ["EXP-002", "EXP-003"]
    else:
        assert packed == 3 and "was not marked shipped" in one_line(pack_err)
        assert "shipped" not in spec(home, "lr") and trained == ["EXP-002", "EXP-003"]


# ---------------------------------------------------------------- work at home on a shipped sweep


def final(home: Path, experiment_id: str) -> checkpoint.Record:
    return checkpoint.read(layout.checkpoints(home / "checkpoints" / experiment_id)[-1][1])


@pytest.mark.slow
def test_work_leaves_a_shipped_sweep_alone_and_a_trial_trained_here_too_merges_back(tmp_path: Path) -> None:
    """The attack: `work` at home trained a shipped sweep's trials, and its shards could never be merged back (each
    checkpoint here with other bytes). Now `work` leaves them alone and says so once; a trial trained here anyway
    (`octlm train`, outside the queue) merges back when its training state is the pack's, bit for bit, and one whose
    state differs is refused (exit 3, one line) before anything is unpacked."""
    home, ship = small_home(tmp_path), tmp_path / "ship"
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *GRID).exit_code == 0
    assert cli(home, "sweep", "pack", "lr", "-o", str(ship)).exit_code == 0
    idle = octlm(home, "work", "lr", "--until-empty")
    assert idle.returncode == 0 and idle.stderr.count(f"sweep lr is shipped to {ship}") == 1, idle.stderr
    assert "0 trials done" in idle.stderr and not (home / "checkpoints").exists()
    assert rows(home, "select status from sweep_trials") == [("queued",), ("queued",)]
    node = write_corpus(tmp_path / "node")
    assert octlm(node, "sweep", "unpack", str(ship)).returncode == 0
    assert octlm(node, "work", "lr", "--until-empty", "-q").returncode == 0
    assert octlm(node, "sweep", "pack", "lr", "-o", str(ship)).returncode == 0
    for trial in ("EXP-002", "EXP-003"):  # here too, outside the queue: the same bits, other files
        assert octlm(home, "train", trial, "-q").returncode == 0
    assert (home / "checkpoints/EXP-002/step-000004.pt").read_bytes() != (
        node / "checkpoints/EXP-002/step-000004.pt"
    ).read_bytes()
    path = home / "checkpoints" / "EXP-003" / "step-000004.pt"
    mine = {p: p.read_bytes() for p in (path, layout.sidecar(path))}
    changed = checkpoint.read(path)
    weight = next(iter(changed.model))
    changed.model[weight] = changed.model[weight] + 1e-3
    checkpoint.save(path, changed)  # another training state at that step
    refused = octlm(home, "sweep", "unpack", str(ship))
    assert refused.returncode == 3 and "another training state than the pack's" in one_line(refused.stderr)
    assert spec(home, "lr")["shipped"]["trials"] == ["EXP-002", "EXP-003"]  # nothing merged, not even EXP-002
    for file, data in mine.items():
        file.write_bytes(data)
    merged = octlm(home, "sweep", "unpack", str(ship), "--json")
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["trials"] == {"EXP-002": "further", "EXP-003": "further"}
    problems = json_out(cli(home, "doctor", "--json"))["problems"]
    assert "shipped" not in spec(home, "lr") and [p["where"] for p in problems] == ["EXP-001"]  # the base: unused
    for trial in ("EXP-002", "EXP-003"):
        assert_same_training_state(final(home, trial), final(node, trial))
