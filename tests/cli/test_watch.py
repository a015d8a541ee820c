"""``octlm watch`` (issue 27): a rich Live screen in tmux that Ctrl-C leaves cleanly (exit 0), one line per change
off a terminal, and reads that never wait for a trainer's lock or a writer's transaction. Rows and run files are
written as octlm writes them (the "running" run's pid is this test's own, alive), nothing is trained."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, octlm

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.locking import ExperimentLock
from octlm.store.registry import Registry

pytestmark = pytest.mark.slow  # each starts octlm processes


def busy_home(home: Path) -> Path:
    """EXP-001 running (its run file at step 6 of 12), and a sweep of two trials, one done."""
    records = [
        {"step": s, "tokens": s * 64, "train_loss": 6 - s / 4, "eval_loss": 6.1 - s / 4, "tokens_per_second": 640.0}
        for s in (2, 4, 6)
    ]
    (home / "runs").mkdir(exist_ok=True)
    (home / "runs" / "EXP-001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), "EXP-001"))
        run = registry.start_run("EXP-001", "train", start_step=0)  # this process: alive
        registry.update_run(run, latest_metrics=records[-1], end_step=6)
    assert cli(home, "sweep", "new", "pair", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    with Registry(home / "registry.db") as registry:
        sweep = registry.sweep("pair")
        assert sweep is not None
        claim = registry.claim([sweep["id"]], {"host": "box", "pid": 1, "threads": 1, "device": "cpu"})
        assert claim is not None
        registry.settle_claim(claim["claim_id"], "done", value=4.5)
    return home


def test_watch_off_a_terminal_prints_a_line_per_experiment_and_sweep(home: Path) -> None:
    idle = octlm(home, "watch", "--once")
    assert idle.returncode == 0 and "nothing to watch: no experiment is training" in idle.stdout
    busy_home(home)
    shown = octlm(home, "watch", "EXP-001", "pair", "--once")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any("EXP-001 running, step 6/12, loss 4.5000, eval 4.6000, 640 tokens/s, ETA" in line for line in lines)
    assert any("sweep pair: queued 1, running 0, done 1, failed 0, stopped 0" in line for line in lines)
    assert "▁" in shown.stdout and "█" in shown.stdout  # the sparkline of the training loss
    assert octlm(home, "watch", "nosuch", "--once").returncode == 2


def test_watch_never_waits_for_a_trainers_lock_or_a_writers_transaction(home: Path) -> None:
    busy_home(home)
    with ExperimentLock(home / "locks" / "EXP-001.lock", "EXP-001"), sqlite3.connect(home / "registry.db") as writer:
        writer.execute("BEGIN IMMEDIATE")  # a writer holds the registry's write lock
        writer.execute("update experiments set description = 'changing' where id = 'EXP-001'")
        began = time.monotonic()
        shown = octlm(home, "watch", "--once", timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert time.monotonic() - began < 30 and "EXP-001 running" in shown.stdout
        writer.execute("ROLLBACK")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_draws_a_live_screen_in_tmux_and_leaves_on_ctrl_c(home: Path, tmp_path: Path) -> None:
    busy_home(home)
    done, session = tmp_path / "exit", "watch"
    command = f"{sys.executable} -m octlm --home {home} watch --interval 0.3; echo $? > {done}; sleep 30"
    env = {**os.environ, "TERM": "xterm-256color"}
    for variable in ("NO_COLOR", "COLUMNS", "LINES"):  # the pane's own size decides (a runner may set COLUMNS)
        env.pop(variable, None)
    tmux = ["tmux", "-L", f"octlm-test-{os.getpid()}"]  # a server of its own, started with this environment
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True, env=env)
    try:
        screen, deadline = "", time.monotonic() + 60
        while "EXP-001" not in screen and time.monotonic() < deadline:
            time.sleep(0.3)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        assert "octlm watch" in screen and "Ctrl-C to leave" in screen
        assert "EXP-001" in screen and "running" in screen and "6/12" in screen and "█" in screen
        assert "pair" in screen and "sweeps" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=True)
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
