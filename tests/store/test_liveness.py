"""Whether a run's process lives: its start time, a reused pid, another host's run."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

from conftest import cli, json_out

from octlm.core import liveness
from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry


def recorded_run(home: Path, experiment_id: str = "EXP-001", **fields) -> int:
    """A registered experiment with one run row written through the registry's own API."""
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))
        return registry.start_run(experiment_id, "train", start_step=0, **fields)


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
