"""Whether a difference is beyond noise, in words, one convention for every view (``show A B``, ``show SWEEP``, the
report): a difference is the later minus the first (``show A B``: B - A; a sweep's best against the next: the best
minus the next, negative when the best is lower), and it is beyond noise when it is more than ``NOISE`` times its
standard error, within it otherwise; every verdict names the noise and the test its error comes from.
Torch-free."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from octlm.core.reporting import counted

if TYPE_CHECKING:
    from octlm.views.paired import Paired

NOISE = 2.0  # a difference within twice its standard error is within the noise


@dataclass(frozen=True)
class Judged:
    """A difference judged: ``within`` the noise (None: nothing to judge it by) and that in words."""

    within: bool | None
    words: str


def judge(difference: float | None, error: float | None, noise: str, test: str, threshold: float = NOISE) -> Judged:
    """``+0.0123 ± 0.0045 (unpaired): beyond evaluation noise, 2.7x its standard error`` (``within`` alike): beyond
    when more than ``threshold`` standard errors (``NOISE``; over seeds, Student's t at the Welch degrees of
    freedom)."""
    if difference is None:
        return Judged(None, "no value to compare")
    if error is None or not math.isfinite(error):
        return Judged(None, f"{difference:+.4f}, with no standard error to judge it by ({test})")
    ratio = abs(difference) / error if error else (0.0 if difference == 0 else math.inf)  # 0 ± 0: identical
    side = "beyond" if ratio > threshold else "within"
    times = f"{ratio:.1f}x" if math.isfinite(ratio) else "infinitely many times"
    return Judged(
        ratio <= threshold, f"{difference:+.4f} ± {error:.4f} ({test}): {side} {noise}, {times} its standard error"
    )


def t_critical(df: float, level: float = 0.95) -> float:
    """The two-sided ``level`` critical value of Student's t with ``df`` degrees of freedom (``df`` need not be whole:
    Welch's): the ``t`` whose central probability is ``level``, found by bisection on the density integrated with
    Simpson's rule (to about 1e-6). From 200 degrees of freedom on, the normal's. At 4 (two groups of 3 seeds):
    2.776; a normal threshold of two errors there would call same-config groups different about 12% of the time."""
    if df >= 200:
        return statistics.NormalDist().inv_cdf(0.5 + level / 2)
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def central(t: float, steps: int = 400) -> float:  # P(|T| <= t)
        h = t / steps
        power = -(df + 1) / 2
        total = sum((4.0 if i % 2 else 2.0) * math.pow(1 + (i * h) ** 2 / df, power) for i in range(1, steps))
        return 2 * scale * h / 3 * (1 + total + math.pow(1 + t * t / df, power))

    low, high = 0.0, 1.0
    while central(high) < level:
        low, high = high, high * 2
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if central(middle) < level else (low, middle)
    return (low + high) / 2


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """The Welch-Satterthwaite degrees of freedom of a difference of two means (inf when both spreads are 0)."""
    a, b = sd_a**2 / n_a, sd_b**2 / n_b
    below = a * a / (n_a - 1) + b * b / (n_b - 1)
    return (a + b) ** 2 / below if below > 0 else math.inf


def over_seeds(
    difference: float | None,
    seed_error: float | None,
    eval_error: float | None,
    seeds_needed: int | None = None,
    df: float = math.inf,
) -> Judged:
    """A difference of means over seeds: judged by the seeds' spread (Welch's standard error), with the evaluations'
    own error beside it and which of the two noises dominates; within seed noise, how many seeds a configuration
    would resolve a difference this size (``seeds_needed``); a lead beyond seed noise that the evaluations' own error
    could still explain is called within evaluation noise, with the fix named."""
    test = "over the seeds" if math.isinf(df) else f"over the seeds, Welch, {df:.1f} df"
    seeds = judge(difference, seed_error, "seed noise", test, t_critical(df) if math.isfinite(df) else NOISE)
    more = (
        f"; about {counted(seeds_needed, 'seed')} a configuration would resolve a difference this size"
        if seeds_needed
        else ""
    )
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
    95% interval -0.0170 to -0.0076 (t, 5 df)`` (the lower eval loss is the better), or ``-0.0012 ± 0.0021 (paired,
    46 blocks): within evaluation noise, ...``; the interval is of the difference ``other - first``."""
    difference, error = paired["eval_loss_difference"], paired["eval_loss_se"]
    test = f"paired, {counted(paired['blocks'], 'block')}"
    judged = judge(difference, error, "evaluation noise", test)
    interval = f"95% interval {paired['low']:+.4f} to {paired['high']:+.4f} (t, {paired['df']:.0f} df)"
    if judged.within is not False or error is None:
        return Judged(judged.within, f"{judged.words}; {interval}")
    better = other_id if difference < 0 else first_id
    head = f"{better} is better by {abs(difference):.4f} ± {error:.4f} ({test})"
    return Judged(False, f"{head}: {judged.words.split(': ', 1)[1]}; {interval}")
