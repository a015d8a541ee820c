"""The step guard: a non-finite step stops the run as diverged with the last good checkpoint intact; a spike-skipped
step resumes bit-identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import cli, json_out, octlm, write_experiment

from octlm.core import layout
from octlm.store.runs import runfile
from octlm.train import checkpoint


def final(home: Path, step: int, experiment: str = "EXP-001") -> checkpoint.Record:
    return checkpoint.read(layout.checkpoint_path(home / "checkpoints" / experiment, step))


@pytest.mark.slow
def test_a_non_finite_step_stops_as_diverged_keeping_the_last_good_checkpoint(home: Path) -> None:
    write_experiment(
        home,
        training={"learning_rate": 100.0, "min_learning_rate": 0.0, "steps": 40, "warmup_steps": 1},
        checkpoint={"interval": 2},
    )
    result = octlm(home, "train", "EXP-001", "-q")
    assert result.returncode == 4, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "diverged at step" in line and "last good checkpoint" in line
    stopped = int(line.split("diverged at step ")[1].split(":")[0])
    steps = [step for step, _ in layout.checkpoints(home / "checkpoints" / "EXP-001")]
    assert steps and max(steps) < stopped  # nothing written at or after the step that diverged
    newest = final(home, max(steps))
    assert all(torch.isfinite(t).all() for t in newest.model.values())
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    assert shown["runs"][-1]["status"] == "diverged"


@pytest.mark.slow
def test_a_spike_skipped_step_resumes_bit_identical(home: Path) -> None:
    write_experiment(
        home,
        model={"dropout": 0.1},
        training={"steps": 24, "spike_guard": "skip", "spike_sigma": 0.5, "spike_window": 4, "eval_interval": 6},
        checkpoint={"interval": 6},
    )
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "12", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["identical"]
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    skipped = [r.get("skipped_steps") for r in runfile.read(home / "runs" / "EXP-001.jsonl")]
    assert skipped[-1] and any(0 < (s or 0) < skipped[-1] for s in skipped)  # skips on both sides of step 12
    assert 0 < min(final(home, 24).guard["skipped"].tolist()) < 12 < max(final(home, 24).guard["skipped"].tolist())
