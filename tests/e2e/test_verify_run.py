"""Issue 50 item 3: ``octlm verify-run ID``, the proof of the run itself. A run killed with SIGKILL and resumed passes
its own audit (every tensor of each checkpoint it keeps against a straight replay's); a checkpoint altered after the
run, its sidecar written again so that the file reads, fails it, naming the tensor; a history that cannot be replayed
here is one line, exit 3. Real processes, a real SIGKILL, real checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, default_signals, json_out, octlm, write_corpus, write_experiment
from test_ranks import one_line

from octlm.core import layout
from octlm.train import checkpoint

pytestmark = pytest.mark.slow

ID = "EXP-001"
STEPS = 120
RUN = {  # tiny, with dropout (so the random streams matter) and canonical pieces, as `octlm new` gives them
    "model": {"dropout": 0.1},
    "training": {"steps": STEPS, "eval_interval": 20, "batch_size": 4, "micro_batches": 2},
    "checkpoint": {"interval": 20, "keep": 3},
}


def made(root: Path, **sections: dict) -> Path:
    home = write_corpus(root)
    write_experiment(home, ID, **{name: {**RUN.get(name, {}), **sections.get(name, {})} for name in {*RUN, *sections}})
    return home


def steps_kept(home: Path, experiment_id: str = ID) -> list[int]:
    return [step for step, _ in layout.checkpoints(home / "checkpoints" / experiment_id)]


def killed_mid_run(home: Path) -> int:
    """``train`` in a process of its own, SIGKILLed once its first checkpoint is written; the newest step kept."""
    process = subprocess.Popen(
        [sys.executable, "-m", "octlm", "--home", str(home), "train", ID, "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1"},
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 120
    while not steps_kept(home) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    kept = steps_kept(home)
    assert kept and kept[-1] < STEPS
    return kept[-1]


def audit(
    home: Path, *args: str, experiment_id: str = ID, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return octlm(home, "verify-run", experiment_id, *args, timeout=600, env=env or {})


def test_a_run_killed_and_resumed_passes_its_own_audit_and_an_altered_checkpoint_fails_naming_the_tensor(
    tmp_path: Path,
) -> None:
    home = made(tmp_path / "home")
    stopped_at = killed_mid_run(home)
    assert json_out(cli(home, "show", ID, "--json"))["runs"][-1]["status"] == "crashed"
    resumed = octlm(home, "resume", ID, "-q")
    assert resumed.returncode == 0, resumed.stderr
    kept = steps_kept(home)
    assert kept == [80, 100, 120] and stopped_at < STEPS
    passed = audit(home, "--json")
    assert passed.returncode == 0, passed.stderr
    verdict = json.loads(passed.stdout)
    assert verdict["verdict"] == "pass" and verdict["steps"] == kept and verdict["nproc"] == 1, verdict["summary"]
    for check in verdict["checks"]:
        assert check["compared"] > 0 and check["differing"] == [], check
    assert {check["check"] for check in verdict["checks"]} >= {"model", "optimizer", "rng", "data order", "run file"}
    assert "verify-run EXP-001: its checkpoints at steps 80, 100, 120 against a straight replay" in passed.stderr
    path = layout.checkpoint_path(home / "checkpoints" / ID, 100)
    record = checkpoint.read(path)
    name = sorted(record.model)[-1]
    record.model[name].view(-1)[0] += 1e-3  # one number of one tensor, and the sidecar written again
    checkpoint.save(path, record)
    failed = audit(home)
    assert failed.returncode == 1, failed.stderr
    assert f"model.{name} at step 100" in failed.stdout and "DIFFERS" in failed.stdout, failed.stdout
    tensors = 3 * len(record.model)  # every tensor of the three checkpoints kept, one of them changed
    assert f"EXP-001: FAIL: DIFFERENT: model {tensors - 1}/{tensors}" in failed.stdout, failed.stdout
    verdicts = [(v["kind"], v["verdict"]) for v in json_out(cli(home, "show", ID, "--json"))["verifications"]]
    assert verdicts == [("verify-run", "pass"), ("verify-run", "fail")]
    shown = cli(home, "show", ID).stdout
    assert "verify-run" in shown and f"DIFFERENT: model {tensors - 1}/{tensors}" in shown


def test_what_cannot_be_replayed_here_is_one_line_exit_3_and_what_cannot_be_audited_exit_2(tmp_path: Path) -> None:
    home = made(tmp_path / "home", training={"steps": 8}, checkpoint={"interval": 4})
    assert one_line(audit(home).stderr).endswith("EXP-001 has no checkpoint to audit: train it first")
    kernels = octlm(home, "train", ID, "-q", env={"ATEN_CPU_CAPABILITY": "default"})  # another machine's kernels
    assert kernels.returncode == 0, kernels.stderr
    refused = audit(home, env={"ATEN_CPU_CAPABILITY": "avx2"})
    assert refused.returncode == 3, refused.stderr
    line = one_line(refused.stderr)
    assert "step-000004.pt was written on another machine than this one (kernels " in line
    assert "ATEN_CPU_CAPABILITY=default" in line and "ATEN_CPU_CAPABILITY=avx2" in line
    assert "and training.determinism local covers this machine only: its run cannot be replayed here" in line
    assert audit(home, env={"ATEN_CPU_CAPABILITY": "default"}).returncode == 0  # where it ran: it replays, and passes
    (home / "corpus" / "doc3.txt").write_text("a document written after the run\n")
    changed = audit(home, env={"ATEN_CPU_CAPABILITY": "default"})
    assert changed.returncode == 3, changed.stderr
    errors = [line for line in changed.stderr.splitlines() if line.startswith("octlm: error:")]  # after the phases
    assert len(errors) == 1 and "the corpus changed since the run (corpus fingerprint" in errors[0], changed.stderr
    assert errors[0].endswith("its run cannot be replayed") and changed.stderr.endswith(errors[0] + "\n")
    plain = made(tmp_path / "plain", training={"steps": 4, "micro_batches": 0}, checkpoint={"interval": 4})
    early = cli(plain, "train", ID, "--checkpoint-at", "9")  # train's own option, which the replay uses
    assert (
        early.exit_code == 2 and "--checkpoint-at 9: must be above 0 and at most the run's last step 4" in early.stderr
    )
    assert octlm(plain, "train", ID, "-q").returncode == 0
    other = audit(plain, "--nproc", "2")
    assert other.returncode == 2 and "has no canonical pieces and trained on 1 rank" in one_line(other.stderr)
    assert audit(home, "--nproc", "3").returncode == 2  # 3 does not divide 2 pieces


def test_a_fork_whose_parent_checkpoint_is_gone_cannot_be_replayed(tmp_path: Path) -> None:
    home = made(tmp_path / "home", training={"steps": 8}, checkpoint={"interval": 4})
    assert octlm(home, "train", ID, "-q").returncode == 0
    fork = octlm(home, "new", "EXP-002", "--init-from", f"{ID}@4")
    assert fork.returncode == 0, fork.stderr
    assert octlm(home, "train", "EXP-002", "-q").returncode == 0
    assert audit(home, experiment_id="EXP-002").returncode == 0  # its parent's checkpoint kept: replayed, passes
    for kept in (home / "checkpoints" / "forks").iterdir():
        kept.unlink()
    gone = audit(home, experiment_id="EXP-002")
    assert gone.returncode == 3 and "forks from EXP-001@4, whose checkpoint" in one_line(gone.stderr)
    assert "is gone: its run cannot be replayed" in gone.stderr


@pytest.mark.ranks
def test_a_run_of_pieces_is_audited_on_another_world_size_and_a_resharded_one_is_refused(tmp_path: Path) -> None:
    home = made(tmp_path / "home", training={"steps": 8}, checkpoint={"interval": 4})
    one = {"OMP_NUM_THREADS": "1"}
    assert octlm(home, "train", ID, "--nproc", "2", "--until", "4", "-q", env=one).returncode == 0
    assert octlm(home, "resume", ID, "-q", env=one).returncode == 0  # pieces: 2 ranks continued on 1, exactly
    passed = audit(home, "--nproc", "2", "--json", env=one)
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["nproc"] == 2 and "(replay)" in passed.stderr
    plain = made(tmp_path / "plain", training={"steps": 8, "micro_batches": 0}, checkpoint={"interval": 4})
    assert octlm(plain, "train", ID, "--nproc", "2", "--until", "4", "-q", env=one).returncode == 0
    assert octlm(plain, "resume", ID, "--reshard", "-q", env=one).returncode == 0
    refused = audit(plain, env=one)
    assert refused.returncode == 3, refused.stderr
    assert "continued on another world size by resume --reshard" in one_line(refused.stderr)
