"""A sweep's trials on a real Ray (issue 49): ``octlm work NAME --ray ADDRESS``, the driver the only process that
opens the registry, each trial a Ray task in a scratch home of its own, its checkpoints shipped back as it trains.
First a local Ray of two CPUs (``--ray local``): its registry rows and checkpoints equal a ``work`` run's; then
Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``, two 1-CPU nodes), the node training a trial
removed once its first checkpoint reached the driver: the trial is submitted again, resumes from that checkpoint on
the other node, is recorded once and ends bit for bit as a straight run. Skipped where Ray is not installed
(``octlm[ray]``; ``.ci/run`` installs it); Ray's usage stats off."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, holds, json_out, octlm, write_corpus, write_experiment

from octlm.core import layout
from octlm.store.runs import runfile
from octlm.train import checkpoint

pytestmark = pytest.mark.slow
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="no Ray here: pip install 'octlm[ray]'")
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
# What differs between two homes that trained the same trials: ids, times, hosts and processes, the argv, timings.
VOLATILE = {
    "id", "run_id", "trial_id", "created", "updated", "started", "ended", "claimed", "released", "host", "pid",
    "pid_start", "argv", "device", "sha256", "size", "load_average", "peak_rss", "uuid", "latest_metrics",
    "final_metrics", "metrics", "elapsed_seconds", "tokens_per_second", "eval_seconds",
}  # fmt: skip
TABLES = ("experiments", "runs", "checkpoints", "metrics", "sweeps", "sweep_trials", "sweep_claims", "sweep_decisions")


def sweep_home(root: Path, training: dict, every: int) -> Path:
    home = write_corpus(root)
    write_experiment(home, training=training, checkpoint={"interval": every, "keep": 3})
    made = cli(home, "sweep", "new", "lr", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,3e-3")
    assert made.exit_code == 0, made.stderr
    return home


def table_rows(home: Path) -> dict[str, list[dict]]:
    """Every table a sweep's work writes, without what differs between two homes, in a fixed order."""
    found: dict[str, list[dict]] = {}
    with sqlite3.connect(home / "registry.db") as conn:
        conn.row_factory = sqlite3.Row
        for table in TABLES:
            rows = [
                {k: row[k] for k in row.keys() if k not in VOLATILE} for row in conn.execute(f"select * from {table}")
            ]
            found[table] = sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))
    return found


def steps_of(home: Path, experiment_id: str) -> list[int]:
    return [step for step, _ in layout.checkpoints(home / "checkpoints" / experiment_id)]


@needs_ray
def test_a_sweep_on_a_local_ray_records_what_work_records(tmp_path: Path) -> None:
    training = {"steps": 8, "eval_interval": 4, "log_interval": 2, "warmup_steps": 1}
    ray_home, work_home = (sweep_home(tmp_path / name, training, every=2) for name in ("ray", "work"))
    began = time.monotonic()
    on_ray = octlm(ray_home, "work", "lr", "--until-empty", "--ray", "local", "--json", env=QUIET, timeout=240)
    assert on_ray.returncode == 0, on_ray.stderr
    said = json_out(on_ray)
    assert (sorted(said["done"]), said["failed"], said["status"]) == (["EXP-002", "EXP-003"], [], "empty")
    holds(said, "octlm work --json")
    assert said["events"] == [] and said["workers"] == 2  # nothing lost, dropped or stopped; the rest as work's
    assert "work: 8 checkpoints shipped to the driver" in on_ray.stderr, on_ray.stderr
    held = r"^\d\d:\d\d:\d\d EXP-002: step 2 on node \S+, its checkpoint held by the driver$"  # stamped in a pipe
    assert re.search(held, on_ray.stderr, re.MULTILINE), on_ray.stderr
    ray_s = time.monotonic() - began
    here = octlm(work_home, "work", "lr", "--until-empty", "--threads", "1", "-q", env=QUIET)
    assert here.returncode == 0, here.stderr
    assert table_rows(ray_home) == table_rows(work_home)
    with sqlite3.connect(ray_home / "registry.db") as conn:
        claims = conn.execute("select device, outcome from sweep_claims").fetchall()
        runs = conn.execute("select status from runs").fetchall()
    assert claims == [("ray", "done")] * 2 and runs == [("completed",)] * 2  # each run brought up to date once ended
    for experiment_id in ("EXP-002", "EXP-003"):
        assert steps_of(ray_home, experiment_id) == steps_of(work_home, experiment_id) == [4, 6, 8]  # keep: 3
        for step, path in layout.checkpoints(ray_home / "checkpoints" / experiment_id):
            twin = layout.checkpoint_path(work_home / "checkpoints" / experiment_id, step)
            assert_same_training_state(checkpoint.read(path), checkpoint.read(twin))
        records = [
            runfile.without_timings(runfile.read(h / "runs" / f"{experiment_id}.jsonl")) for h in (ray_home, work_home)
        ]
        assert records[0] == records[1] and records[0]
    assert ray_s < 120, ray_s


@needs_ray
def test_work_ray_says_in_one_line_when_nothing_answers_at_the_address(tmp_path: Path) -> None:
    home = sweep_home(tmp_path / "home", {"steps": 4}, every=2)
    refused = octlm(home, "work", "lr", "--until-empty", "--ray", "127.0.0.1:9", env=QUIET, timeout=60)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octlm: error: --ray 127.0.0.1:9: nothing answers there"), lines
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select count(*) from sweep_claims").fetchone() == (0,)  # nothing was claimed


def test_work_ray_says_in_one_line_when_ray_is_not_installed(tmp_path: Path) -> None:
    home = sweep_home(tmp_path / "home", {"steps": 4}, every=2)
    shadow = tmp_path / "shadow"  # a `ray` that cannot be imported, first on the path: as where it is not installed
    shadow.mkdir()
    (shadow / "ray.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    path = os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])
    refused = octlm(home, "work", "lr", "--until-empty", "--ray", "local", env={**QUIET, "PYTHONPATH": path})
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "octlm: error: --ray: Ray is not installed here: pip install 'octlm[ray]' (on every machine of the cluster)"
    ]


@needs_ray
def test_a_trial_whose_node_is_lost_resumes_on_another_and_ends_as_a_straight_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.cluster_utils import Cluster

    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    training = {"steps": 240, "eval_interval": 120, "log_interval": 40, "warmup_steps": 5}
    home = sweep_home(tmp_path / "home", training, every=20)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        command = [sys.executable, "-m", "octlm", "--home", str(home), "work", "lr", "--until-empty"]
        driver = subprocess.Popen(
            [*command, "--ray", cluster.address, "--json"],
            env={**os.environ, "NO_COLOR": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(driver.stderr.readline, "")), daemon=True)
        reader.start()
        held = re.compile(r"EXP-002: step (\d+) on node \S+/([0-9a-f]{8}), its checkpoint held by the driver")
        deadline = time.monotonic() + 150
        while not (found := [m for line in list(lines) if (m := held.search(line))]):
            assert driver.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.02)
        first_step, node_id = int(found[0].group(1)), found[0].group(2)
        (doomed,) = [node for node in nodes if node.node_id.startswith(node_id)]
        cluster.remove_node(doomed, allow_graceful=False)
        driver.wait(timeout=240)
        reader.join(timeout=10)
    finally:
        cluster.shutdown()
    said, document = "".join(lines), json.loads(driver.stdout.read())
    assert driver.returncode == 0, said
    holds(document, "octlm work --json")
    assert re.search(r"EXP-002: its task on node \S+ was lost \(.+\): submitted again, resuming at step \d+", said), (
        said
    )
    resumed = int(re.search(r"EXP-002: its task .* resuming at step (\d+)", said).group(1))
    assert first_step <= resumed < 240, said
    events = [(e["event"], e["trial"], e["attempt"], e["step"]) for e in document["events"]]  # --json says it too
    assert events == [("lost", "EXP-002", 1, resumed), ("resubmitted", "EXP-002", 2, resumed)], document
    assert document["events"][0]["node"].endswith(node_id) and document["events"][0]["reason"], document
    with sqlite3.connect(home / "registry.db") as conn:
        claims = conn.execute("select experiment_id, outcome from sweep_claims order by experiment_id").fetchall()
        runs = conn.execute("select start_step, end_step, status from runs where experiment_id = 'EXP-002'").fetchall()
        trials = conn.execute("select experiment_id, status, target_step from sweep_trials").fetchall()
    assert claims == [("EXP-002", "done"), ("EXP-003", "done")]  # recorded once
    assert sorted(trials) == [("EXP-002", "done", 240), ("EXP-003", "done", 240)]
    assert len(runs) == 2 and runs[1][:2] == (resumed, 240) and runs[1][2] == "completed", runs  # the lost try's, then
    twin = json_out(cli(home, "new", "--from", "EXP-002", "--json"))["id"]
    straight = octlm(home, "train", twin, "-q", env=QUIET)
    assert straight.returncode == 0, straight.stderr
    ends = [checkpoint.read(layout.checkpoints(home / "checkpoints" / e)[-1][1]) for e in ("EXP-002", twin)]
    assert ends[0].step == ends[1].step == 240
    assert_same_training_state(*ends)


@needs_ray
def test_sigterm_to_the_driver_checkpoints_the_tasks_and_leaves_the_queue_as_work_does(tmp_path: Path) -> None:
    training = {"steps": 400, "eval_interval": 200, "log_interval": 40, "warmup_steps": 5}
    home = sweep_home(tmp_path / "home", training, every=20)
    command = [sys.executable, "-m", "octlm", "--home", str(home), "work", "lr", "--ray", "local", "--json"]
    document = tmp_path / "work.json"  # stdout to a file: stderr has one reader, the thread below
    with open(document, "w") as out:
        environment = {**os.environ, **QUIET, "NO_COLOR": "1"}
        driver = subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(driver.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 150
    while not any("its checkpoint held by the driver" in line for line in list(lines)):
        assert driver.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.02)
    driver.send_signal(signal.SIGTERM)
    driver.wait(timeout=180)
    reader.join(timeout=10)
    said = "".join(lines)
    assert driver.returncode == 143, said
    written = json.loads(document.read_text())
    assert written["status"] == "interrupted" and "work: stopped by SIGTERM" in said, said
    assert [e["event"] for e in written["events"]] == ["halted", "stopped", "stopped"], written
    assert written["events"][0]["reason"] == "SIGTERM"
    assert said.strip().splitlines()[-1].startswith("octlm: stopped by SIGTERM"), said
    with sqlite3.connect(home / "registry.db") as conn:
        claims = conn.execute("select outcome from sweep_claims").fetchall()
        trials = conn.execute("select status from sweep_trials").fetchall()
        runs = conn.execute("select experiment_id, status, end_step from runs order by experiment_id").fetchall()
    assert claims == [("released",)] * 2 and trials == [("queued",)] * 2, said  # as `work` leaves them
    for experiment_id, status, end_step in runs:  # each task checkpointed where it stopped, and the driver holds it
        assert status == "interrupted" and end_step == steps_of(home, experiment_id)[-1] > 0, runs
    assert [run[0] for run in runs] == ["EXP-002", "EXP-003"], runs
    assert sorted((e["trial"], e["step"]) for e in written["events"][1:]) == [(run[0], run[2]) for run in runs]


def test_a_checkpoint_of_an_earlier_try_or_a_step_held_is_dropped_with_a_line(tmp_path: Path) -> None:
    """The driver's side of what comes back (``inflight.arrived``), no Ray needed: a checkpoint from the try of a
    trial that was lost and submitted again, or of a step the driver holds already, is dropped with a line and
    changes nothing; the current try's newer one is merged into the home."""
    from octlm.core.home import Home
    from octlm.tasks.sweeps.working import inflight, remote
    from octlm.tasks.sweeps.working.trial_log import Tally

    source = write_corpus(tmp_path / "node")
    write_experiment(source, training={"steps": 8}, checkpoint={"interval": 4, "keep": 3})
    assert cli(source, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    pack = tmp_path / "EXP-001.tar"
    assert cli(source, "pack", "EXP-001", "-o", str(pack)).exit_code == 0
    home, said = write_corpus(tmp_path / "driver"), []
    job = remote.Job("EXP-001", 7, 2, 8, "eval_loss", 1, str(home), b"")
    flight = inflight.Flight({}, job, None, 0.0)  # no claim row: merging needs none
    traffic, tally = inflight.Traffic(), Tally(events=[])

    def shipment(attempt: int) -> remote.Shipment:
        return remote.Shipment("EXP-001", 7, attempt, "vm/0123abcd", 4, pack.read_bytes(), 0.01)

    assert inflight.arrived(Home(home), {7: flight}, shipment(1), traffic, said.append, tally) == 0.0
    assert (
        said[-1] == "EXP-001: a checkpoint of step 4 from vm/0123abcd came late (an earlier try of the trial): dropped"
    )
    assert not (home / "checkpoints").exists() and traffic.count == 0
    assert [(e["event"], e["trial"], e["node"], e["attempt"], e["step"]) for e in tally.events] == [
        ("dropped", "EXP-001", "vm/0123abcd", 1, 4)
    ]
    assert inflight.arrived(Home(home), {7: flight}, shipment(2), traffic, said.append, tally) > 0
    assert steps_of(home, "EXP-001") == [4] and (flight.step, traffic.count) == (4, 1)
    assert said[-1] == "EXP-001: step 4 on node vm/0123abcd, its checkpoint held by the driver"
    assert inflight.arrived(Home(home), {7: flight}, shipment(2), traffic, said.append, tally) == 0.0  # the same again
    assert said[-1].endswith("came late (a step held): dropped") and traffic.count == 1
    assert [e["reason"] for e in tally.events] == ["an earlier try of the trial", "a step held"]


@needs_ray
def test_a_driver_killed_while_a_trial_trains_leaves_claims_that_doctor_and_work_take_back(tmp_path: Path) -> None:
    """A ``--ray`` driver on a terminal (tmux) draws watch's table of its trial (its node, step and ETA); SIGKILL to
    it mid-trial (no handler runs): its claim stays open under its pid, as a killed worker's (``test_sweeps``: a
    killed worker's trial taken over); ``doctor --repair`` settles it lost, and a plain ``work`` resumes the trial from
    the newest checkpoint the driver had merged into the home and finishes the sweep, bit for bit a straight run."""
    home = write_corpus(tmp_path / "home")
    training = {"steps": 300, "eval_interval": 150, "log_interval": 5, "warmup_steps": 2}
    write_experiment(home, training=training, checkpoint={"interval": 5, "keep": 3})
    made = cli(home, "sweep", "new", "one", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3")
    assert made.exit_code == 0, made.stderr
    command = f"{sys.executable} -m octlm --home {home} work one --ray local; sleep 60"
    environment = {**os.environ, **QUIET, "TERM": "xterm-256color"}
    for variable in ("NO_COLOR", "COLUMNS", "LINES"):  # the pane's own size decides
        environment.pop(variable, None)
    tmux = ["tmux", "-L", f"octlm-ray-{os.getpid()}"]  # a server of its own, started with this environment
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "ray", "-x", "160", "-y", "40", command], check=True, env=environment
    )
    try:
        screen, deadline = "", time.monotonic() + 120
        row = re.compile(r"EXP-002 +running +(\d+)/300 .* (\d+ s)\b")  # watch's row: the step and ETA heard
        while not (row.search(screen) and "EXP-002: step 5 on node" in screen and "EXP-002 on node " in screen):
            assert time.monotonic() < deadline, screen
            time.sleep(0.1)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "ray"], capture_output=True, text=True).stdout
        assert "octlm work --ray" in screen and "sweeps" in screen, screen
        with sqlite3.connect(home / "registry.db") as conn:
            (pid,) = conn.execute("select pid from sweep_claims").fetchone()  # the driver's (the one claim)
        os.kill(pid, signal.SIGKILL)  # the driver: no handler runs, nothing is released
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    with sqlite3.connect(home / "registry.db") as conn:
        held = conn.execute("select experiment_id, pid, device from sweep_claims where released is null").fetchall()
    assert held == [("EXP-002", pid, "ray")], screen
    held_steps = steps_of(home, "EXP-002")
    assert held_steps and held_steps[-1] < 300, held_steps  # what the driver held when it died: the trial resumes there
    repaired = octlm(home, "doctor", "--repair", env=QUIET)
    assert "claim" in repaired.stdout, repaired.stdout + repaired.stderr
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select outcome from sweep_claims").fetchall() == [("lost",)]
    finished = octlm(home, "work", "one", "--until-empty", "--threads", "1", "-q", env=QUIET)
    assert finished.returncode == 0, finished.stderr
    with sqlite3.connect(home / "registry.db") as conn:
        claims = conn.execute("select experiment_id, outcome from sweep_claims order by id").fetchall()
        trials = conn.execute("select experiment_id, status from sweep_trials").fetchall()
        resumed = conn.execute("select resumed_from from runs where experiment_id = 'EXP-002' order by id").fetchall()
    assert claims == [("EXP-002", "lost"), ("EXP-002", "done")] and trials == [("EXP-002", "done")]
    assert resumed[-1][0] is not None  # the plain worker continued from the checkpoint the driver held
    twin = json_out(cli(home, "new", "--from", "EXP-002", "--json"))["id"]
    assert octlm(home, "train", twin, "-q", env=QUIET).returncode == 0
    ends = [checkpoint.read(layout.checkpoints(home / "checkpoints" / e)[-1][1]) for e in ("EXP-002", twin)]
    assert ends[0].step == ends[1].step == 300
    assert_same_training_state(*ends)
