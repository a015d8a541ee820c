"""An eager training process never loads torch's compiler (``runtime.lean``): about 1.2 s of imports saved at every
start. The bits it trains are the same: the golden digests of ``test_determinism`` were measured before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import write_experiment

TRAIN_THEN_SAY = (
    "import sys, runpy\n"
    "sys.argv = ['octlm', '--home', sys.argv[1], 'train', sys.argv[2], '-q']\n"
    "try:\n    runpy.run_module('octlm', run_name='__main__')\n"
    "except SystemExit as stop:\n    assert not stop.code, stop.code\n"
    "print('compiler loaded' if 'torch._dynamo' in sys.modules else 'compiler not loaded')\n"
)


def _train(home: Path, experiment_id: str) -> str:
    command = [sys.executable, "-c", TRAIN_THEN_SAY, str(home), experiment_id]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two training processes
def test_an_eager_run_never_imports_the_compiler(home: Path) -> None:
    assert _train(home, "EXP-001") == "compiler not loaded"
    write_experiment(home, "EXP-002", training={"grad_clip": 0.0, "spike_guard": "skip"})
    assert _train(home, "EXP-002") == "compiler not loaded"


def _two_steps(fill: bool) -> list[torch.Tensor]:
    import torch.utils.deterministic

    from octlm import config as cfg
    from octlm.tasks.bench.measure import synthetic_blocks
    from octlm.train.loop import train_step
    from octlm.train.state import TrainState

    torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
    config = cfg.from_dict(
        {"tokenizer": {"vocab_size": 300}, "model": {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2}}
    )
    blocks = synthetic_blocks(config)
    state = TrainState.fresh(config, torch.device("cpu"), len(blocks))
    for _ in range(2):
        train_step(state, blocks, 1e-3)
    return [p.detach().clone() for p in state.model.parameters()]


def test_a_cpu_process_leaves_new_memory_unfilled_and_trains_the_same_bits() -> None:
    """Deterministic mode fills every new tensor (NaN) before a kernel writes it: a pass over memory per allocation,
    145 of the 188 fills of a day1 step. ATen's CPU kernels write all they allocate, so a CPU process goes without
    the fill (issue 50 item 5): the same weights either way."""
    import torch.utils.deterministic

    from octlm.runtime import machine

    machine.configure_determinism(torch.device("cpu"))
    assert not torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    try:
        filled = _two_steps(fill=True)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    assert all(torch.equal(a, b) for a, b in zip(filled, _two_steps(fill=False), strict=True))
