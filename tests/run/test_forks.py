"""Forks (new --init-from): step 0 from the parent's checkpoint, refusals of another shape or a changed file, exact
resumes, verify-resume of a fork.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import assert_metrics_match_run_file, cli, records, write_experiment

from octlm.core import layout
from octlm.core.home import Home
from octlm.store.registry import Registry
from octlm.train import checkpoint


def fork(home: Path, experiment: str = "EXP-002", step: int = 8, optimizer: bool = False, **sections: Any) -> Path:
    parent = layout.checkpoint_path(home / "checkpoints" / "EXP-001", step)
    init = {
        "parent": f"EXP-001@{step}",
        "checkpoint": str(parent.relative_to(home)),
        "sha256": hashlib.sha256(parent.read_bytes()).hexdigest(),
        "optimizer": optimizer,
    }
    write_experiment(home, experiment, init=init, **sections)
    return parent


@pytest.fixture
def parent_home(home: Path) -> Path:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    return home


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", [False, True])
def test_fork_starts_from_the_parent_checkpoint(parent_home: Path, optimizer: bool) -> None:
    from octlm.core.reporting import QuietReporter
    from octlm.run.restore import init_from
    from octlm.store import experiments
    from octlm.train.checkpoint import Fingerprints
    from octlm.train.loop import TrainState

    parent_path = fork(parent_home, optimizer=optimizer, training={"weight_decay": 0.05})
    config = experiments.load(Home(parent_home), "EXP-002")
    parent = checkpoint.read(parent_path)
    state = TrainState.fresh(config, torch.device("cpu"), 50)
    fresh_sampler = state.sampler.state_dict().clone()
    prints = Fingerprints("c", "d", parent.fingerprints.tokenizer)
    assert init_from(state, Home(parent_home), prints, QuietReporter()) == parent_path
    assert state.step == 0
    for key, tensor in parent.model.items():
        assert torch.equal(state.model.state_dict()[key], tensor), key
    moments = state.optimizer.state_dict()["state"]
    assert bool(moments) == optimizer
    for index, values in moments.items():
        for name, tensor in values.items():
            assert torch.equal(tensor, parent.optimizer["state"][index][name]), (index, name)
    assert torch.equal(state.sampler.state_dict(), parent.sampler if optimizer else fresh_sampler)
    assert state.optimizer.param_groups[0]["weight_decay"] == 0.05  # the child's own setting


@pytest.mark.slow
def test_fork_refuses_another_shape_a_changed_file_and_a_missing_one(parent_home: Path) -> None:
    fork(parent_home, "EXP-002", model={"d_model": 64})
    shape = cli(parent_home, "train", "EXP-002", "-q")
    assert shape.exit_code == 3 and "does not fit EXP-002's config" in shape.stderr
    assert len(shape.stderr.strip().splitlines()) == 1
    parent = fork(parent_home, "EXP-003", step=12)
    tampered = parent_home / "checkpoints" / "EXP-001" / "step-000008.pt"
    write_experiment(
        parent_home, "EXP-004", init={"checkpoint": str(tampered.relative_to(parent_home)), "sha256": "0" * 64}
    )
    changed = cli(parent_home, "train", "EXP-004", "-q")
    assert changed.exit_code == 3 and "checksum mismatch" in changed.stderr
    parent.unlink()
    missing = cli(parent_home, "train", "EXP-003", "-q")
    assert missing.exit_code == 3 and "is missing" in missing.stderr
    assert not (parent_home / "checkpoints" / "EXP-004" / "step-000004.pt").exists()


@pytest.mark.slow
def test_fork_resumes_exactly(tmp_path: Path, parent_home: Path) -> None:
    parent = fork(parent_home, optimizer=True, training={"learning_rate": 1e-3, "log_interval": 3})
    split = tmp_path / "split"
    shutil.copytree(parent_home, split)
    assert cli(parent_home, "train", "EXP-002", "-q").exit_code == 0
    assert cli(split, "train", "EXP-002", "--until", "5", "-q").exit_code == 0
    assert cli(split, "resume", "EXP-002", "-q").exit_code == 0
    whole_final = checkpoint.read(layout.checkpoint_path(parent_home / "checkpoints" / "EXP-002", 12))
    split_final = checkpoint.read(layout.checkpoint_path(split / "checkpoints" / "EXP-002", 12))
    for key, tensor in whole_final.model.items():
        assert torch.equal(split_final.model[key], tensor), key
    assert torch.equal(whole_final.sampler, split_final.sampler)
    assert records(split, "EXP-002") == records(parent_home, "EXP-002")
    assert_metrics_match_run_file(split, "EXP-002")
    with Registry(parent_home / "registry.db") as registry:
        origin = registry.runs("EXP-002")[0]["resumed_from"]
    assert str(parent.relative_to(parent_home)) in origin
    assert hashlib.sha256(parent.read_bytes()).hexdigest() in origin


@pytest.mark.slow
def test_verify_resume_of_a_fork_passes(home: Path) -> None:
    """The scratch homes of verify-resume carry the fork's parent checkpoint along."""
    import json

    from conftest import octlm

    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    created = cli(
        home, "new", "--init-from", "EXP-001@12", "--set", "training.steps=8", "--set", "training.warmup_steps=1"
    )
    assert created.exit_code == 0, created.stderr
    fork = created.stdout.strip()
    result = octlm(home, "verify-resume", fork, "--split-at", "4", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "pass"
