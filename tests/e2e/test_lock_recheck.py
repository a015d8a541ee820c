"""Issue 25 item 4: ``rm -rf locks`` during a run let a second writer in, because the holder never looked at its
lock again. The holder re-checks its lock's inode at each evaluation and checkpoint and stops: one line, exit 3,
the run ``failed`` with that message, its last checkpoint intact."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, write_experiment

from octlm.core import layout


@pytest.mark.slow
def test_a_removed_lock_folder_stops_the_holder_with_exit_3(home: Path) -> None:
    write_experiment(home, training={"steps": 20000, "eval_interval": 4}, checkpoint={"interval": 8, "keep": 2})
    command = [sys.executable, "-m", "octlm", "--home", str(home), "train", "EXP-001", "-q"]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    folder = home / "checkpoints" / "EXP-001"
    deadline = time.monotonic() + 120
    while not layout.checkpoints(folder):
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
        time.sleep(0.05)
    shutil.rmtree(home / "locks")
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 3, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "lock file" in lines[0] and "removed" in lines[0], stderr
    with sqlite3.connect(home / "registry.db") as conn:
        status, error = conn.execute("select status, error from runs order by id desc limit 1").fetchone()
    assert status == "failed" and "lock file" in error and "removed" in error
    step, newest = layout.checkpoints(folder)[-1]
    assert step < 20000 and layout.read_sidecar(newest) == hashlib.sha256(newest.read_bytes()).hexdigest()
    assert cli(home, "resume", "EXP-001", "--until", str(step + 4), "-q").exit_code == 0  # it continues from there
