"""Issue 36 items 1-2: evaluations kept block by block, and two evaluations of the same blocks paired. The figures
are checked against their definitions computed another way (a direct delta-method sum, a jackknife), on synthetic
blocks whose difficulty is shared by both runs, as it is when two models read the same validation blocks."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from octlm.store.runs import evalblocks
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views.paired import RESAMPLES, pair


def correlated(blocks: int, shift: float, seed: int = 1) -> tuple[BlockEvaluation, BlockEvaluation]:
    """Two evaluations of the same blocks: each block's difficulty shared, a small own noise, B's loss ``shift``
    nats a token away from A's."""
    draw = random.Random(seed)
    targets = [draw.randint(100, 128) for _ in range(blocks)]
    difficulty = [draw.uniform(3.0, 7.0) for _ in range(blocks)]
    a = [t * (d + draw.gauss(0, 0.05)) for t, d in zip(targets, difficulty, strict=True)]
    b = [t * (d + shift + draw.gauss(0, 0.05)) for t, d in zip(targets, difficulty, strict=True)]
    sizes = [t * 3 for t in targets]
    return BlockEvaluation(100, "same", a, targets, sizes), BlockEvaluation(200, "same", b, targets, sizes)


def test_the_paired_error_is_the_spread_of_the_block_differences() -> None:
    first, other = correlated(200, -0.02)
    found = pair(first, other)
    assert found is not None and found["blocks"] == 200 and found["steps"] == [100, 200]
    a, c, b = np.array(first.nats), np.array(other.nats), np.array(first.targets, dtype=float)
    difference = c.sum() / b.sum() - a.sum() / b.sum()
    assert found["eval_loss_difference"] == pytest.approx(difference, rel=1e-12)
    # a jackknife over blocks estimates the same error (leave one block out, 200 times)
    leave_one = np.array(
        [(c.sum() - c[i]) / (b.sum() - b[i]) - (a.sum() - a[i]) / (b.sum() - b[i]) for i in range(200)]
    )
    jackknife = math.sqrt((199 / 200) * ((leave_one - leave_one.mean()) ** 2).sum())
    assert found["eval_loss_se"] == pytest.approx(jackknife, rel=0.05)
    # shared difficulty: the paired error is a small fraction of the errors combined as if independent
    assert found["unpaired_se"] is not None and found["eval_loss_se"] < 0.1 * found["unpaired_se"]
    # bits per byte: the same difference over bytes, in bits
    bytes_total = float(np.sum(first.target_bytes))
    assert found["bits_per_byte_difference"] == pytest.approx((c.sum() - a.sum()) / bytes_total / math.log(2))
    assert found["perplexity_difference"] == pytest.approx(math.exp(c.sum() / b.sum()) - math.exp(a.sum() / b.sum()))


def test_the_bootstrap_is_seeded_and_brackets_the_difference() -> None:
    first, other = correlated(300, -0.02)
    once, again = pair(first, other), pair(first, other)
    assert once == again and once is not None and once["resamples"] == RESAMPLES
    assert once["bootstrap_low"] < once["eval_loss_difference"] < once["bootstrap_high"] < 0
    width = once["bootstrap_high"] - once["bootstrap_low"]
    assert width == pytest.approx(2 * 1.96 * once["eval_loss_se"], rel=0.15)  # normal enough at 300 blocks


def test_only_the_same_blocks_are_paired() -> None:
    first, other = correlated(50, 0.0)
    assert pair(first, BlockEvaluation(1, "another digest", other.nats, other.targets, other.target_bytes)) is None
    assert pair(first, None) is None and pair(None, other) is None
    shorter = BlockEvaluation(1, "same", other.nats[:-1], other.targets[:-1], other.target_bytes[:-1])
    assert pair(first, shorter) is None


def test_a_blocks_file_keeps_each_evaluation_and_is_cut_back(tmp_path: Path) -> None:
    path = evalblocks.path_for(tmp_path / "runs" / "EXP-001.jsonl")
    assert path.name == "EXP-001-blocks.jsonl"
    path.parent.mkdir()
    first, other = correlated(20, 0.1)
    evalblocks.append(path, first)  # step 100
    evalblocks.append(path, other)  # step 200
    assert evalblocks.read(path) == [first, other]
    assert evalblocks.at_step(path, 100) == first and evalblocks.at_step(path, None) == other
    evalblocks.cut(path, 150)  # a resume from step 150
    assert evalblocks.read(path) == [first]
    with path.open("a") as handle:  # a line cut short by a crash, and one that is not octlm's
        handle.write('{"format": "octlm-eval-blocks-v1", "step": 300, "blocks": 2, "nats": "AAAA"}\n{"step": 3')
    assert evalblocks.read(path) == [first]
