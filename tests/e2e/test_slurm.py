"""A sweep on a real one-node Slurm (issue 27): the README's job-array script, as printed there, run by
``sbatch`` on daemons this test starts (munge on a private socket, slurmctld and slurmd on free ports, every
file under tmp_path); one array task is requeued (``scontrol requeue``) in the middle of its trial, comes back,
resumes it from the checkpoint it left, and the trial merged back on the driver ends bit for bit as a straight
``train`` of the same config. Skipped where Debian's ``slurmctld slurmd slurm-client munge`` are not installed
(``.ci/run`` installs them) or without root (the daemons run as root here)."""

from __future__ import annotations

import os
import re
import shutil
import socket
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

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "sweeps.md"  # its job-array script, as written
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "munged", "mungekey")
missing = [name for name in PROGRAMS if shutil.which(name) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"no Slurm here ({', '.join(missing)} missing): see .ci/run"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the one-node Slurm runs its daemons as root"),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slurm_conf(root: Path, host: str) -> str:
    return f"""ClusterName=octlmtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
KillWait=30
NodeName={host} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def wait_for(what: str, check, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A one-node Slurm private to this test; the environment its clients need. Stopped by pid at the end."""
    root = tmp_path / "slurm"
    for folder in ("munge", "state", "spool"):
        (root / folder).mkdir(parents=True, mode=0o700)
    host = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(slurm_conf(root, host))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    subprocess.run(["mungekey", "-c", "-k", str(root / "munge/key")], check=True, capture_output=True)
    munge = [f"--socket={root}/munge/socket", f"--key-file={root}/munge/key", f"--pid-file={root}/munge/pid"]
    munge += [f"--log-file={root}/munge/log", f"--seed-file={root}/munge/seed"]
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for command in (["munged", "--foreground", "--force", *munge], ["slurmctld", "-D"], ["slurmd", "-D"]):
            if command[0] != "munged":
                command += ["-f", env["SLURM_CONF"]]
            out = open(root / f"{command[0]}.out", "wb")  # noqa: SIM115 - the daemon's, closed with the test
            daemons.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
            if command[0] == "munged":
                wait_for("munged", lambda: (root / "munge/socket").exists(), 20)

        def idle() -> bool:
            shown = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            return shown.stdout.strip() == "idle"

        wait_for("the node to be idle", idle, 60)
        yield env
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def readme_script(ship: Path, nodes: Path, data: Path) -> str:
    """The sweeps guide's job-array script, its shared and node-local paths pointed into this test's folders."""
    text = GUIDE.read_text()
    start = text.index("### A sweep on a Slurm job array")
    script = re.search(r"```bash\n(#!/bin/bash\n.*?)```", text[start:], re.S)
    assert script is not None, "the sweeps guide lost its job-array script"
    body = script.group(1)
    assert "/shared/sweeps/lr" in body and "/local/$USER" in body and "OCTLM_DATA_ROOT=/shared/data" in body
    body = body.replace("/shared/sweeps/lr", str(ship)).replace("/local/$USER", str(nodes))
    return body.replace("/shared/data", str(data))


def job_state(env: dict[str, str], job: str) -> str:
    shown = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True)
    return shown.stdout.strip()


@pytest.mark.parametrize("node", ["same", "another"])
def test_a_sweep_on_a_slurm_job_array_survives_a_requeue_mid_trial(
    slurm: dict[str, str], tmp_path: Path, node: str
) -> None:
    """``node``: the requeued task starts again on the same node (its local home still there) or, as far as
    octlm can tell, on another one (its local home gone: it starts from what the first start packed back)."""
    driver, shared_data = tmp_path / "driver", write_corpus(tmp_path / "data")
    steps = 160
    long = {"steps": steps, "eval_interval": 80, "log_interval": 20, "warmup_steps": 5}
    data = {"sources": [str(shared_data / "corpus" / "*.txt")]}  # a path every node reads, in no home
    write_experiment(driver, data=data, training=long, checkpoint={"interval": 20, "keep": 20})
    made = cli(driver, "sweep", "new", "lr", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,3e-3")
    assert made.exit_code == 0, made.stderr
    ship, nodes, bin_dir = tmp_path / "shared", tmp_path / "local", tmp_path / "bin"
    assert cli(driver, "sweep", "pack", "lr", "-o", str(ship), "--shards", "2").exit_code == 0
    bin_dir.mkdir()
    (bin_dir / "octlm").write_text(f'#!/bin/sh\nexec {sys.executable} -m octlm "$@"\n')
    (bin_dir / "octlm").chmod(0o755)
    (tmp_path / "job.sh").write_text(readme_script(ship, nodes, shared_data))
    env = {**slurm, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NO_COLOR": "1"}
    sbatch = ["sbatch", "--parsable", "--array=0-1", "--cpus-per-task=1", "--time=30", "--open-mode=append"]
    sbatch += [f"--output={tmp_path}/task-%a.out", "--chdir", str(tmp_path), str(tmp_path / "job.sh")]
    submitted = subprocess.run(sbatch, env=env, capture_output=True, text=True, check=True)
    job = submitted.stdout.strip().split(";")[0]
    task_home = nodes / f"octlm-{job}-0"

    def mid_trial() -> bool:
        found = layout.checkpoints(task_home / "checkpoints" / "EXP-002")
        return bool(found) and found[-1][0] >= 40

    wait_for("task 0's trial to checkpoint", mid_trial, 180)
    subprocess.run(["scontrol", "requeue", f"{job}_0"], env=env, check=True, capture_output=True)
    wait_for("task 0 to be pending again", lambda: job_state(env, f"{job}_0") == "PENDING", 120)
    if node == "another":
        shutil.rmtree(task_home)
    subprocess.run(["scontrol", "update", f"JobId={job}_0", "StartTime=now"], env=env, check=True)
    wait_for("the array to end", lambda: job_state(env, job) == "", 300)
    first = (tmp_path / "task-0.out").read_text()
    assert "DUE TO JOB REQUEUE" in first and "stopped by SIGTERM" in first and "queued again" in first, first
    with sqlite3.connect(task_home / "registry.db") as conn:
        claims = conn.execute("select outcome from sweep_claims order by id").fetchall()
        resumed = conn.execute("select start_step, end_step from runs order by id").fetchall()
    assert claims == ([("released",), ("done",)] if node == "same" else [("done",)]), first
    assert len(resumed) == 2 and 0 < resumed[1][0] == resumed[0][1] < steps  # the second start went on from the first
    for shard in ("shard-0", "shard-1"):
        assert cli(driver, "sweep", "unpack", str(ship / shard)).exit_code == 0
    status = json_out(cli(driver, "sweep", "status", "lr", "--json"))
    assert status["complete"] and [t["step"] for t in status["trials"]] == [steps, steps]
    twin = json_out(cli(driver, "new", "--from", "EXP-002", "--json"))["id"]
    root = {"OCTLM_DATA_ROOT": str(shared_data)}  # as the README's job exports it: documents named alike
    straight = octlm(driver, "train", twin, "-q", env={"OMP_NUM_THREADS": "1", **root})
    assert straight.returncode == 0, straight.stderr
    ends = [checkpoint.read(layout.checkpoints(driver / "checkpoints" / e)[-1][1]) for e in ("EXP-002", twin)]
    assert_same_training_state(*ends)
