"""Issue 47 item 5: a sweep's worker tells a trial another process is training (passed over as busy, queued again)
from any other refusal (the trial failed) by the error's type, ``BeingTrained``, never by the words of its message:
those quote paths the user chose, and a home whose folder says "already being trained" made every refusal a trial
met there busy, so that ``work --until-empty`` waited on it for ever instead of failing it. Real workers, a real
lock held by this process, a real registry; tiny configs of a few steps."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm
from test_sweeps import rows, start, sweep_home

from octlm.store.locking import ExperimentLock

pytestmark = pytest.mark.slow


def _one_trial(home: Path) -> str:
    made = cli(home, "sweep", "new", "one", "--from", "EXP-001", "--grid", "training.learning_rate=0.001", "--json")
    assert made.exit_code == 0, made.stderr
    (trial,) = (t["id"] for t in json_out(made)["trials"])
    return trial


def test_a_refusal_whose_message_says_already_being_trained_fails_its_trial(tmp_path: Path) -> None:
    home = sweep_home(tmp_path / "already being trained")  # every path said in a message carries the words
    trial = _one_trial(home)
    (home / "locks").mkdir(exist_ok=True)
    (home / "locks" / f"{trial}.lock").symlink_to(home / "elsewhere")  # refused: the lock file is a link
    try:
        done = octlm(home, "work", "one", "--until-empty", timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the refused trial was taken for one being trained: queued again, waited on for ever")
    assert done.returncode == 5, done.stderr  # a trial failed in this call
    status = {t["id"]: t for t in json_out(cli(home, "sweep", "status", "one", "--json"))["trials"]}
    assert status[trial]["status"] == "failed" and "symbolic link" in status[trial]["error"], status[trial]
    assert rows(home, "select outcome from sweep_claims") == [("failed",)]  # never busy


def test_a_trial_another_process_trains_is_passed_over_until_its_lock_is_free(tmp_path: Path) -> None:
    home = sweep_home(tmp_path)
    trial = _one_trial(home)
    with ExperimentLock(home / "locks" / f"{trial}.lock", trial):  # as `octlm resume` of it by hand holds it
        worker = start(home, "one", "--until-empty")
        deadline = time.monotonic() + 120
        while not rows(home, "select 1 from sweep_claims where outcome = 'busy'"):
            assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()
            time.sleep(0.1)
        assert rows(home, "select status from sweep_trials") == [("queued",)]  # passed over, not failed
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err  # the lock free, the worker trained it
    assert rows(home, "select status from sweep_trials") == [("done",)]
    outcomes = [outcome for (outcome,) in rows(home, "select outcome from sweep_claims order by id")]
    assert outcomes[0] == "busy" and outcomes[-1] == "done", outcomes
