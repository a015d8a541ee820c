"""An eager training process never loads torch's compiler (``runtime.lean``): about 1.2 s of imports saved at every
start. The bits it trains are the same: the golden digests of ``test_determinism`` were measured before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
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
