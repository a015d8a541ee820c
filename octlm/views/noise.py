"""Whether a difference is beyond noise, in words, one convention for every view (``show A B``, ``show SWEEP``, the
report): a difference is the later minus the first (``show A B``: B - A; a sweep's best against the next: the best
minus the next, negative when the best is lower), and it is beyond noise when it is more than ``NOISE`` times its
standard error, within it otherwise; every verdict names the noise and the test its error comes from.
Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

NOISE = 2.0  # a difference within twice its standard error is within the noise


@dataclass(frozen=True)
class Judged:
    """A difference judged: ``within`` the noise (None: nothing to judge it by) and that in words."""

    within: bool | None
    words: str


def judge(difference: float | None, error: float | None, noise: str, test: str) -> Judged:
    """``+0.0123 ± 0.0045 (unpaired): beyond evaluation noise, 2.7x its standard error`` (``within`` alike)."""
    if difference is None:
        return Judged(None, "no value to compare")
    if error is None or not math.isfinite(error):
        return Judged(None, f"{difference:+.4f}, with no standard error to judge it by ({test})")
    ratio = abs(difference) / error if error else math.inf
    side = "beyond" if ratio > NOISE else "within"
    times = f"{ratio:.1f}x" if math.isfinite(ratio) else "infinitely many times"
    return Judged(
        ratio <= NOISE, f"{difference:+.4f} ± {error:.4f} ({test}): {side} {noise}, {times} its standard error"
    )


def over_seeds(difference: float | None, seed_error: float | None, eval_error: float | None) -> Judged:
    """A difference of means over seeds: judged by the seeds' spread; but a lead beyond seed noise that the
    evaluations' own error could still explain is called within evaluation noise, with the fix named."""
    seeds = judge(difference, seed_error, "seed noise", "over the seeds")
    if eval_error is None or difference is None:
        return seeds
    if seeds.within is not False or abs(difference) > NOISE * eval_error:
        return Judged(seeds.within, f"{seeds.words}; the evaluations' own standard error is {eval_error:.4f}")
    return Judged(
        True,
        f"{difference:+.4f}: beyond seed noise (± {seed_error:.4f} over the seeds) but within evaluation noise "
        f"(± {eval_error:.4f}, the evaluations' own standard error): more evaluation tokens (training.eval_tokens) "
        "or more seeds would resolve it",
    )
