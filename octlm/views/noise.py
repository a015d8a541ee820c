"""Whether a difference is beyond noise, in words, one convention for every view (``show A B``, ``show SWEEP``, the
report): a difference is the later minus the first (``show A B``: B - A; a sweep's best against the next: the best
minus the next, negative when the best is lower), and it is beyond noise when it is more than ``NOISE`` times its
standard error, within it otherwise; every verdict names the noise and the test its error comes from.
Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from octlm.views.paired import Paired

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
    ratio = abs(difference) / error if error else (0.0 if difference == 0 else math.inf)  # 0 ± 0: identical
    side = "beyond" if ratio > NOISE else "within"
    times = f"{ratio:.1f}x" if math.isfinite(ratio) else "infinitely many times"
    return Judged(
        ratio <= NOISE, f"{difference:+.4f} ± {error:.4f} ({test}): {side} {noise}, {times} its standard error"
    )


def over_seeds(
    difference: float | None, seed_error: float | None, eval_error: float | None, seeds_needed: int | None = None
) -> Judged:
    """A difference of means over seeds: judged by the seeds' spread (Welch's standard error), with the evaluations'
    own error beside it and which of the two noises dominates; within seed noise, how many seeds a configuration
    would resolve a difference this size (``seeds_needed``); a lead beyond seed noise that the evaluations' own error
    could still explain is called within evaluation noise, with the fix named."""
    seeds = judge(difference, seed_error, "seed noise", "over the seeds")
    more = f"; about {seeds_needed} seeds a configuration would resolve a difference this size" if seeds_needed else ""
    if eval_error is None or difference is None:
        return Judged(seeds.within, seeds.words + (more if seeds.within else ""))
    if seeds.within is not False or abs(difference) > NOISE * eval_error:
        dominant = "seed noise" if seed_error is None or seed_error >= eval_error else "evaluation noise"
        words = f"{seeds.words}; the evaluations' own standard error is {eval_error:.4f} ({dominant} dominates)"
        return Judged(seeds.within, words + (more if seeds.within and dominant == "seed noise" else ""))
    return Judged(
        True,
        f"{difference:+.4f}: beyond seed noise (± {seed_error:.4f} over the seeds) but within evaluation noise "
        f"(± {eval_error:.4f}, the evaluations' own standard error): more evaluation tokens (training.eval_tokens) "
        "or more seeds would resolve it",
    )


def paired_words(first_id: str, other_id: str, paired: Paired) -> Judged:
    """``EXP-009 is better by 0.0123 ± 0.0021 (paired, 46 blocks): beyond evaluation noise, 5.9x its standard error;
    bootstrap 95% interval -0.0164 to -0.0081`` (the lower eval loss is the better), or ``-0.0012 ± 0.0021 (paired,
    46 blocks): within evaluation noise, ...``; the interval is of the difference ``other - first``."""
    difference, error = paired["eval_loss_difference"], paired["eval_loss_se"]
    test = f"paired, {paired['blocks']:,} blocks"
    judged = judge(difference, error, "evaluation noise", test)
    interval = f"bootstrap 95% interval {paired['bootstrap_low']:+.4f} to {paired['bootstrap_high']:+.4f}"
    if judged.within is not False or error is None:
        return Judged(judged.within, f"{judged.words}; {interval}")
    better = other_id if difference < 0 else first_id
    head = f"{better} is better by {abs(difference):.4f} ± {error:.4f} ({test})"
    return Judged(False, f"{head}: {judged.words.split(': ', 1)[1]}; {interval}")
