"""Issue 37 item 6: a config asking for bf16 where bf16 products are slower than fp32's (a CPU without bf16
instructions, or a tier that keeps oneDNN from them) is told so in one line at start, measured, not guessed."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from conftest import octlm, write_corpus, write_experiment

from octlm import config as cfg
from octlm.runtime import machine


def test_the_probe_measures_a_rate_and_draws_from_no_stream_of_the_run() -> None:
    torch.manual_seed(7)
    random.seed(7)
    before = torch.get_rng_state(), random.getstate()
    ratio = machine.bf16_over_fp32(size=64, repeats=2)
    assert math.isfinite(ratio) and ratio > 0
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]


def test_the_warning_says_what_is_slower_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    local = cfg.Config().with_keys({"training.precision": "bf16"})
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert machine.bf16_warning(cfg.Config(), cpu, ratio=0.1) is None  # fp32 asked: nothing to say
    assert machine.bf16_warning(local, torch.device("cuda"), ratio=0.1) is None  # a GPU's bf16 is another story
    assert machine.bf16_warning(local, cpu, ratio=1.3) is None  # faster here (native bf16 products)
    said = machine.bf16_warning(local, cpu, ratio=0.52)
    assert said is not None and "0.52x" in said and "on this CPU" in said and "fp32 trains faster" in said
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    said = machine.bf16_warning(local, cpu, ratio=0.02)
    assert said is not None and "with ONEDNN_MAX_CPU_ISA=AVX2 in the environment" in said
    assert "\n" not in said


@pytest.mark.slow
def test_training_in_bf16_where_it_is_emulated_says_so(tmp_path: Path) -> None:
    """oneDNN kept to AVX2 (as on a CPU without bf16 instructions) emulates bf16 products, some 0.01-0.03x fp32's
    here: a real run says so on stderr, one line (said at start and again after the summary), and the same run in
    fp32 says nothing of it."""
    home = write_corpus(tmp_path / "home")
    write_experiment(home, training={"precision": "bf16", "steps": 2, "warmup_steps": 1})
    write_experiment(home, "EXP-002", training={"steps": 2, "warmup_steps": 1})
    avx2 = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    emulated = octlm(home, "train", "EXP-001", env=avx2)
    assert emulated.returncode == 0, emulated.stderr
    lines = [line for line in emulated.stderr.splitlines() if "bf16 matrix products run at" in line]
    assert lines and all("with ONEDNN_MAX_CPU_ISA=AVX2 in the environment" in line for line in lines), lines
    plain = octlm(home, "train", "EXP-002", env=avx2)
    assert plain.returncode == 0, plain.stderr
    assert "bf16 matrix products" not in plain.stderr
