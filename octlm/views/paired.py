"""Two evaluations of the same blocks, paired: the difference in eval loss, perplexity and bits per byte (the later
minus the first, as ``views.compare.noise`` says it) with its paired standard error over clusters of blocks and its
Student's t interval; and two groups of seed replicates, each averaged block by block, paired the same way
(``group_pair``).

When two runs read the same validation blocks, most of each block's difficulty is shared by both, so the error of
their difference is the spread of the per-block differences, not the two errors combined as if independent (Miller,
"Adding Error Bars to Evals", 2024; Dror et al., ACL 2018). Each figure is a ratio over blocks (nats over target
tokens, nats over bytes), so its error is the ratio estimator's, linearized: block i's influence on ``L = sum a /
sum b`` is ``(a_i - L b_i) / sum b``, a difference's influence is the difference of influences, perplexity's is
``exp(L)`` times its loss influence. Adjacent blocks of one document are not independent draws (issue 46: the
calibration config's 46 blocks are 4 documents, and an error over blocks was 1.3-1.9x too small), so the influences
are summed over each cluster of blocks and ``se^2 = G/(G-1) * sum_g influence_g^2`` over the ``G`` clusters: the
clusters each evaluation recorded (``store.runs.evalblocks``: the blocks' documents, or chunks of 8 consecutive
blocks, as ``data.blocks`` decides), or each block alone for a file of the first format (``cluster_unit``
``blocks``: the error then may understate, and the words say so). The same estimator ``train.evaluation`` gives
each run. The interval is Student's t at ``G - 1`` degrees of freedom: ``low, high = difference -/+ critical * se``
with ``critical`` two-sided 95% (``views.compare.student.t_critical``); a percentile bootstrap of blocks was dropped (it
covered 79-81% at 4 blocks and only repeated the error at 46). Torch-free; numpy is imported when a pair is computed.

The interface the verdicts rest on: ``Paired`` (below; ``show A B --json``'s ``versus[].paired``), ``pair(first,
other)`` (two runs' evaluations) and ``group_pair(firsts, others)`` (the difference of two groups' mean per-block
losses, each group's replicates averaged block by block on the same blocks: the evaluation-noise part of a
seed-level verdict), both None where the evaluations are missing, unchecked (``checked`` False) or read other
blocks; and ``Unused``, what ``side_by_side.final_blocks`` gives for a blocks file that must not carry a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views.compare.student import t_critical

LEVEL = 0.95  # of the t interval


class Paired(TypedDict):
    """The ``paired`` figures of ``show A B --json``'s ``versus``: other - first on the same blocks, with the
    clusters the error is over and the t interval of the loss difference."""

    blocks: int
    tokens: int
    digest: str  # sha256 of the blocks' tokens, the same for both evaluations
    steps: list[int]  # the evaluated step of the first and of the other (of a group: its first member's)
    clusters: int  # G: the clusters of blocks the errors are over
    cluster_unit: str  # documents | chunks (of 8 consecutive blocks) | blocks (a file of the first format)
    eval_loss_difference: float
    eval_loss_se: float | None
    perplexity_difference: float
    perplexity_se: float | None
    bits_per_byte_difference: float
    bits_per_byte_se: float | None
    unpaired_se: float | None  # the two evaluations' errors combined as if independent, for comparison
    df: float  # G - 1: the degrees of freedom of the error
    critical: float  # two-sided 95% Student's t at df
    low: float  # the loss difference - critical x eval_loss_se
    high: float  # ... + critical x eval_loss_se


@dataclass(frozen=True)
class Unused:
    """A run's evaluation block by block that is kept but must not carry a verdict, and why (its checksum, or its
    sums against the run file: ``store.runs.evalblocks.disagreement``)."""

    step: int
    reason: str  # "its checksum does not match its arrays: ..."
    file: str  # runs/<ID>-blocks.jsonl


def pair(first: BlockEvaluation | None, other: BlockEvaluation | None) -> Paired | None:
    """The paired difference ``other - first``; None unless both exist, are not known damaged, read the same blocks
    (same digest, same targets) and make two clusters or more."""
    if first is None or other is None or first.digest != other.digest or first.blocks != other.blocks:
        return None
    if first.targets != other.targets or first.blocks < 2 or False in (first.checked, other.checked):
        return None
    import numpy as np

    a, c = np.asarray(first.nats, dtype=np.float64), np.asarray(other.nats, dtype=np.float64)
    b, y = np.asarray(first.targets, dtype=np.float64), np.asarray(first.target_bytes, dtype=np.float64)
    units, unit = _coarsest([first, other])
    ids = np.unique(np.asarray(units), return_inverse=True)[1]
    if b.sum() <= 0 or y.sum() <= 0 or ids.max() < 1:
        return None
    loss_a, loss_c = a.sum() / b.sum(), c.sum() / b.sum()
    influence_a, influence_c = (a - loss_a * b) / b.sum(), (c - loss_c * b) / b.sum()
    bytes_influence = ((c - a) - (c.sum() - a.sum()) / y.sum() * y) / y.sum() / math.log(2)
    ppl_a, ppl_c = math.exp(min(loss_a, 700.0)), math.exp(min(loss_c, 700.0))
    difference, se = float(loss_c - loss_a), _se(influence_c - influence_a, ids)
    clusters = int(ids.max()) + 1
    critical = t_critical(clusters - 1, LEVEL)
    return {
        "blocks": len(a),
        "tokens": int(b.sum()),
        "digest": first.digest,
        "steps": [first.step, other.step],
        "clusters": clusters,
        "cluster_unit": unit,
        "eval_loss_difference": difference,
        "eval_loss_se": se,
        "perplexity_difference": ppl_c - ppl_a,
        "perplexity_se": _se(ppl_c * influence_c - ppl_a * influence_a, ids),
        "bits_per_byte_difference": float((c - a).sum() / y.sum() / math.log(2)),
        "bits_per_byte_se": _se(bytes_influence, ids),
        "unpaired_se": _combined(_se(influence_a, ids), _se(influence_c, ids)),
        "df": float(clusters - 1),
        "critical": critical,
        "low": difference - critical * (se or 0.0),
        "high": difference + critical * (se or 0.0),
    }


def group_pair(firsts: Sequence[BlockEvaluation], others: Sequence[BlockEvaluation]) -> Paired | None:
    """The difference of two groups' mean per-block losses, ``others - firsts``: each group's replicates averaged
    block by block (its mean loss is then the mean of its members' losses), paired over clusters as ``pair`` pairs
    two runs: the evaluation-noise part of a seed-level verdict. None unless both groups have members and every
    member read the same blocks (one digest, the same targets) and none is known damaged."""
    if not firsts or not others:
        return None
    return pair(_averaged(firsts), _averaged(others))


def _averaged(group: Sequence[BlockEvaluation]) -> BlockEvaluation | None:
    """One evaluation whose nats are the group's, block by block, averaged (None: its members read other blocks)."""
    head = group[0]
    if any(e.digest != head.digest or e.targets != head.targets or e.checked is False for e in group):
        return None
    nats = [math.fsum(values) / len(group) for values in zip(*(e.nats for e in group), strict=True)]
    units, unit = _coarsest(group)
    clusters = None if unit == "blocks" else units
    return BlockEvaluation(head.step, head.digest, nats, head.targets, head.target_bytes, clusters, unit)


def _coarsest(evaluations: Sequence[BlockEvaluation]) -> tuple[list[int], str]:
    """The clusters a pair's error is over: those the evaluations recorded (the same blocks make the same clusters;
    a file of the first format recorded none, and takes the other's), the fewest where they differ; else the
    blocks."""
    recorded = [e for e in evaluations if e.clusters is not None]
    if not recorded:
        return evaluations[0].units, "blocks"
    chosen = min(recorded, key=lambda e: len(set(e.units)))
    return chosen.units, chosen.cluster_unit


def _se(influence: Any, ids: Any) -> float | None:
    """``sqrt(G/(G-1) * sum_g influence_g^2)``: the linearized standard error over ``G`` clusters (block i's
    cluster ``ids[i]``, numbered from 0)."""
    import numpy as np

    sums = np.bincount(ids, weights=influence)
    g = len(sums)
    return math.sqrt(g / (g - 1) * float((sums**2).sum())) if g >= 2 else None


def _combined(se_a: float | None, se_b: float | None) -> float | None:
    return None if se_a is None or se_b is None else math.hypot(se_a, se_b)
