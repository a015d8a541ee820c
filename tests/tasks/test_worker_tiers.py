"""Issue 45 item 16: a worker that pinned a tier for one trial (its variables, and ``cross-vendor``'s library, which
cannot be unloaded) trained the next ``local`` trial under them. It now leaves that trial queued and starts afresh
for it, as for any other tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out, octlm
from test_sweeps import rows, sweep_home

from octlm.runtime.native import mkl
from octlm.train import checkpoint

pytestmark = pytest.mark.slow
INTERPOSED = "Intel (interposed)"  # the record's MKL path when a library tells MKL the processor is Intel


@pytest.mark.skipif(mkl.compiler() is None, reason="no C compiler here (.ci/run has one)")
def test_a_local_trial_after_a_cross_vendor_one_runs_in_a_fresh_process(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, steps=4, threads=1)
    made = cli(home, "sweep", "new", "tiers", "--from", "EXP-001", "--grid", "training.determinism=cross-vendor,local")
    assert made.exit_code == 0, made.stderr
    done = octlm(home, "work", "tiers", "--until-empty", "--json")
    assert done.returncode == 0, done.stderr
    assert rows(home, "select status from sweep_trials order by position") == [("done",), ("done",)], done.stderr
    assert "1 queued trial needs another determinism tier than this process holds: starting afresh" in done.stderr
    assert sorted(json_out(done)["done"]) == ["EXP-002", "EXP-003"]
    crossed, local = (
        checkpoint.read(home / "checkpoints" / name / "step-000004.pt").environment for name in ("EXP-002", "EXP-003")
    )
    assert crossed["mkl"] == INTERPOSED and "MKL_CBWR=AVX2,STRICT" in crossed["kernels"]
    assert local["mkl"] != INTERPOSED and local["kernels"] == "", local  # none of the other tier's pins
