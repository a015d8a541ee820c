"""Two evaluations of the same blocks, paired: the difference in eval loss, perplexity and bits per byte (the later
minus the first, as ``views.noise`` says it) with its paired standard error and a paired bootstrap interval.

When two runs read the same validation blocks, most of each block's difficulty is shared by both, so the error of
their difference is the spread of the per-block differences, not the two errors combined as if independent (Miller,
"Adding Error Bars to Evals", 2024; Dror et al., ACL 2018). Each figure is a ratio over blocks (nats over target
tokens, nats over bytes), so its error is the ratio estimator's, linearized: block i's influence on ``L = sum a /
sum b`` is ``(a_i - L b_i) / sum b``, a difference's influence is the difference of influences, perplexity's is
``exp(L)`` times its loss influence, and ``se^2 = k/(k-1) * sum_i influence_i^2`` over ``k`` blocks (the same
estimator ``train.evaluation`` gives each run). Blocks are taken as the units: adjacent blocks of one document are
not clustered. The bootstrap resamples the blocks with replacement (``RESAMPLES`` times, seeded, so the interval is
the same at every call) and reads the 2.5th and 97.5th percentiles of the loss difference. Torch-free; numpy is
imported when a pair is computed.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from octlm.store.runs.evalblocks import BlockEvaluation

RESAMPLES = 10_000
SEED = 0
CHUNK = 500  # resamples drawn at once: CHUNK x blocks indices in memory


class Paired(TypedDict):
    """The ``paired`` figures of ``show A B --json``'s ``versus``: other - first on the same blocks."""

    blocks: int
    tokens: int
    digest: str  # sha256 of the blocks' tokens, the same for both evaluations
    steps: list[int]  # the evaluated step of the first and of the other
    eval_loss_difference: float
    eval_loss_se: float | None
    perplexity_difference: float
    perplexity_se: float | None
    bits_per_byte_difference: float
    bits_per_byte_se: float | None
    unpaired_se: float | None  # the two evaluations' errors combined as if independent, for comparison
    bootstrap_low: float  # the 2.5th percentile of the resampled loss differences
    bootstrap_high: float  # the 97.5th
    resamples: int


def pair(first: BlockEvaluation | None, other: BlockEvaluation | None) -> Paired | None:
    """The paired difference ``other - first``; None unless both exist and read the same blocks (same digest)."""
    if first is None or other is None or first.digest != other.digest or first.blocks != other.blocks:
        return None
    if first.targets != other.targets or first.blocks < 2:
        return None
    import numpy as np

    a, c = np.asarray(first.nats, dtype=np.float64), np.asarray(other.nats, dtype=np.float64)
    b, y = np.asarray(first.targets, dtype=np.float64), np.asarray(first.target_bytes, dtype=np.float64)
    if b.sum() <= 0 or y.sum() <= 0:
        return None
    loss_a, loss_c = a.sum() / b.sum(), c.sum() / b.sum()
    influence_a, influence_c = (a - loss_a * b) / b.sum(), (c - loss_c * b) / b.sum()
    per_byte = (c - a) / y.sum() / math.log(2)
    bytes_influence = ((c - a) - (c.sum() - a.sum()) / y.sum() * y) / y.sum() / math.log(2)
    ppl_a, ppl_c = math.exp(min(loss_a, 700.0)), math.exp(min(loss_c, 700.0))
    low, high = _bootstrap(c - a, b)
    return {
        "blocks": len(a),
        "tokens": int(b.sum()),
        "digest": first.digest,
        "steps": [first.step, other.step],
        "eval_loss_difference": float(loss_c - loss_a),
        "eval_loss_se": _se(influence_c - influence_a),
        "perplexity_difference": ppl_c - ppl_a,
        "perplexity_se": _se(ppl_c * influence_c - ppl_a * influence_a),
        "bits_per_byte_difference": float(per_byte.sum()),
        "bits_per_byte_se": _se(bytes_influence),
        "unpaired_se": _combined(_se(influence_a), _se(influence_c)),
        "bootstrap_low": low,
        "bootstrap_high": high,
        "resamples": RESAMPLES,
    }


def _se(influence: Any) -> float | None:
    """``sqrt(k/(k-1) * sum influence^2)``: the linearized standard error over ``k`` units."""
    k = len(influence)
    return math.sqrt(k / (k - 1) * float((influence**2).sum())) if k >= 2 else None


def _combined(se_a: float | None, se_b: float | None) -> float | None:
    return None if se_a is None or se_b is None else math.hypot(se_a, se_b)


def _bootstrap(differences: Any, targets: Any) -> tuple[float, float]:
    """The 95% percentile interval of ``sum(d) / sum(b)`` over blocks resampled with replacement, seeded."""
    import numpy as np

    generator = np.random.default_rng(SEED)
    k, found = len(differences), []
    for start in range(0, RESAMPLES, CHUNK):
        rows = generator.integers(0, k, size=(min(CHUNK, RESAMPLES - start), k))
        found.append(differences[rows].sum(axis=1) / targets[rows].sum(axis=1))
    draws = np.concatenate(found)
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)
