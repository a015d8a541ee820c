"""Issue 36 items 1-2: evaluations kept block by block, and two evaluations of the same blocks paired. The figures
are checked against their definitions computed another way (a direct delta-method sum, a jackknife), on synthetic
blocks whose difficulty is shared by both runs, as it is when two models read the same validation blocks. Issue 46
items 1 and 3: the paired error is over clusters of blocks (documents, chunks) with Student's t at G-1 degrees of
freedom, the percentile bootstrap gone; two groups of replicates paired block by block (``group_pair``)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from octlm.store.runs import evalblocks
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views.compare import student
from octlm.views.paired import group_pair, pair


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
    assert (found["clusters"], found["cluster_unit"]) == (200, "blocks")  # no clusters recorded: the blocks
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


def clustered(first: BlockEvaluation, other: BlockEvaluation, clusters: list[int]) -> float:
    """The paired loss error over clusters, by hand: each block's influence ``(c_i - L_c b_i) - (a_i - L_a b_i)``
    over ``B``, summed per cluster, ``sqrt(G/(G-1) * sum_g s_g^2)``."""
    a, c, b = (np.array(v, dtype=float) for v in (first.nats, other.nats, first.targets))
    influence = ((c - c.sum() / b.sum() * b) - (a - a.sum() / b.sum() * b)) / b.sum()
    sums = {g: 0.0 for g in clusters}
    for g, value in zip(clusters, influence, strict=True):
        sums[g] += value
    g = len(sums)
    return math.sqrt(g / (g - 1) * sum(v * v for v in sums.values()))


def in_documents(evaluation: BlockEvaluation, clusters: list[int]) -> BlockEvaluation:
    return BlockEvaluation(
        evaluation.step,
        evaluation.digest,
        evaluation.nats,
        evaluation.targets,
        evaluation.target_bytes,
        clusters,
        "documents",
    )


def test_the_paired_error_is_over_clusters_with_t_at_g_minus_one() -> None:
    """Issue 46 items 1 and 3: 120 blocks in 10 documents whose difference shifts by document: the error is over
    the 10 documents (a hand computation), judged at t(9) = 2.262, the interval difference -/+ t x se; no bootstrap."""
    first, other = correlated(120, -0.02)
    documents = [i // 12 for i in range(120)]
    shift = [0.02 * ((i // 12) % 3 - 1) * t for i, t in enumerate(other.targets)]  # a document-level effect
    other = BlockEvaluation(
        200, "same", [n + s for n, s in zip(other.nats, shift, strict=True)], other.targets, other.target_bytes
    )
    found = pair(in_documents(first, documents), in_documents(other, documents))
    assert found is not None and (found["clusters"], found["cluster_unit"], found["df"]) == (10, "documents", 9.0)
    assert found["eval_loss_se"] == pytest.approx(clustered(first, other, documents), rel=1e-12)
    over_blocks = pair(first, other)  # the same blocks taken as units: a smaller, wrong error
    assert over_blocks is not None and (over_blocks["clusters"], over_blocks["cluster_unit"]) == (120, "blocks")
    assert over_blocks["eval_loss_se"] == pytest.approx(clustered(first, other, list(range(120))), rel=1e-12)
    assert found["eval_loss_se"] > 1.5 * over_blocks["eval_loss_se"]
    assert found["critical"] == pytest.approx(2.2622, abs=1e-4) == student.t_critical(9)
    difference, se, t = found["eval_loss_difference"], found["eval_loss_se"], found["critical"]
    assert (found["low"], found["high"]) == pytest.approx((difference - t * se, difference + t * se), rel=1e-12)
    assert not {"bootstrap_low", "bootstrap_high", "resamples"} & set(found)
    # a file of the first format (no clusters) paired with one that has them: the blocks are the same, so are the
    # clusters; the first's are taken
    mixed = pair(first, in_documents(other, documents))
    assert mixed is not None and mixed["clusters"] == 10 and mixed["eval_loss_se"] == found["eval_loss_se"]


def test_two_groups_are_paired_block_by_block() -> None:
    """Issue 46: the evaluation-noise part of a seed-level verdict: each group's replicates averaged block by block,
    the difference of the group means with its clustered paired error."""
    draw = random.Random(5)
    targets = [draw.randint(100, 128) for _ in range(40)]
    difficulty = [draw.uniform(3.0, 7.0) for _ in range(40)]
    documents = [i // 4 for i in range(40)]

    def replicate(step: int, shift: float) -> BlockEvaluation:
        nats = [t * (d + shift + draw.gauss(0, 0.05)) for t, d in zip(targets, difficulty, strict=True)]
        return BlockEvaluation(step, "same", nats, targets, [3 * t for t in targets], documents, "documents")

    firsts, others = [replicate(10, 0.0) for _ in range(3)], [replicate(10, -0.03) for _ in range(2)]
    found = group_pair(firsts, others)
    assert found is not None and found["clusters"] == 10 and found["df"] == 9.0
    losses = [sum(e.nats) / sum(targets) for e in (*firsts, *others)]
    assert found["eval_loss_difference"] == pytest.approx(sum(losses[3:]) / 2 - sum(losses[:3]) / 3, rel=1e-12)
    mean_a = BlockEvaluation(
        10, "same", [sum(v) / 3 for v in zip(*(e.nats for e in firsts), strict=True)], targets, targets
    )
    mean_b = BlockEvaluation(
        10, "same", [sum(v) / 2 for v in zip(*(e.nats for e in others), strict=True)], targets, targets
    )
    assert found["eval_loss_se"] == pytest.approx(clustered(mean_a, mean_b, documents), rel=1e-9)
    elsewhere = BlockEvaluation(10, "other", firsts[0].nats, targets, targets)
    assert group_pair([*firsts, elsewhere], others) is None and group_pair([], others) is None


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
