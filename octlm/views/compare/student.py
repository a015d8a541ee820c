"""Student's t distribution and what the verdicts build on it, in plain Python (torch-free, numpy-free).

``p_value`` is the two-sided tail of Student's t, ``P(|T| >= |t|) = I_x(df/2, 1/2)`` with ``x = df / (df + t^2)``:
the regularized incomplete beta function, by its continued fraction (Lentz's method, as in Numerical Recipes'
``betai``; exact to about 1e-14, checked against the closed forms at 1 and 2 degrees of freedom: ``1 - 2 atan(t)/pi``
and ``1 - t / sqrt(2 + t^2)``). ``t_critical`` inverts it by bisection, so a critical value and a p-value are never at
odds: ``|t| > t_critical(df)`` exactly when ``p_value(t, df) < 0.05``. Degrees of freedom need not be whole (Welch's,
Satterthwaite's); infinitely many are the normal's.

``seeds_for_power`` gives the seeds a configuration needs for 80% power at a stated effect: the least ``n`` with
``effect >= (t_{0.975, df} + t_{0.80, df}) se(n)``, the usual approximation of the noncentral t (Cohen 1988; it
errs by under a seed from 5 seeds on). ``expected_maximum`` is the mean of the largest of ``k`` independent standard
normal draws, ``integral x k phi(x) Phi(x)^(k-1) dx`` by Simpson's rule: 0.56 for 2, 1.27 for 6, 1.82 for 18 (any
table of normal order statistics). ``holm`` is Holm's step-down adjustment of several p-values (Holm 1979).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

LEVEL = 0.95  # of every interval and verdict: a difference is beyond noise when p < 1 - LEVEL
POWER = 0.80  # of ``seeds_for_power``
NORMAL = statistics.NormalDist()
NORMAL_FROM = 1e7  # degrees of freedom from which the normal's tail is taken (they agree to 1e-7 there)


def p_value(t: float, df: float) -> float:
    """The two-sided p of Student's t: ``P(|T| >= |t|)`` at ``df`` degrees of freedom (1 for t = 0, 0 for an
    infinite t)."""
    t = abs(t)
    if math.isinf(t):
        return 0.0
    if df >= NORMAL_FROM:
        return math.erfc(t / math.sqrt(2))
    return _incomplete_beta(df / 2, 0.5, df / (df + t * t))


def t_critical(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` critical value of Student's t with ``df`` degrees of freedom (``df`` need not be
    whole: Welch's), by bisection on ``p_value``: 12.706 at 1, 2.776 at 4 (two groups of 3 seeds; a normal threshold
    of two errors there would call same-config groups different about 12% of the time), 1.960 far out."""
    if df >= NORMAL_FROM:
        return NORMAL.inv_cdf(0.5 + level / 2)
    tail, low, high = 1 - level, 0.0, 1.0
    while p_value(high, df) > tail:
        low, high = high, high * 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if p_value(middle, df) > tail else (low, middle)
    return (low + high) / 2


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``: its continued fraction where it converges fast, else
    by the symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _fraction(a, b, x) / a
    return 1.0 - front * _fraction(b, a, 1 - x) / b


def _fraction(a: float, b: float, x: float, tiny: float = 1e-300) -> float:
    """The continued fraction of the incomplete beta function, by Lentz's method (its even and odd steps)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return result


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """The Welch-Satterthwaite degrees of freedom of a difference of two means (inf when both spreads are 0)."""
    return satterthwaite([(sd_a / math.sqrt(n_a), n_a - 1), (sd_b / math.sqrt(n_b), n_b - 1)])


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """The degrees of freedom of a standard error whose square is the sum of independent parts' (each ``(se, df)``):
    ``(sum se^2)^2 / sum (se^4 / df)`` (Satterthwaite 1946); a part of infinite ``df`` adds nothing below; inf when
    nothing is below."""
    below = sum(se**4 / df for se, df in parts if math.isfinite(df) and df > 0)
    total = sum(se**2 for se, _ in parts)
    return total**2 / below if below > 0 else math.inf


def holm(values: Sequence[float | None], family: int = 0) -> list[float | None]:
    """Holm's step-down adjustment of the p-values given (None: no test, left out of the count): the i-th smallest of
    ``m`` is multiplied by ``m - i + 1``, never below the one before it, never above 1. ``family``: ``m`` where the
    tests given are some of a larger family whose other members were looked at (a sweep's best against the others:
    every pair of configurations the best was chosen from), so the given ones take the family's largest multipliers;
    Holm's over the whole family would reject all these reject, so the family-wise rate holds."""
    present = sorted((p, index) for index, p in enumerate(values) if p is not None)
    adjusted: list[float | None] = [None] * len(values)
    running, m = 0.0, max(len(present), family)
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted


def expected_maximum(k: int, steps: int = 2000, bound: float = 12.0) -> float:
    """The mean of the largest of ``k`` independent standard normal draws (0 for one): the expected optimism of the
    best of ``k`` alike estimates, in their standard error."""
    if k <= 1:
        return 0.0
    h = 2 * bound / steps

    def density(x: float) -> float:
        return x * k * NORMAL.pdf(x) * NORMAL.cdf(x) ** (k - 1)

    inner = sum((4 if i % 2 else 2) * density(-bound + i * h) for i in range(1, steps))
    return h / 3 * (density(-bound) + inner + density(bound))


def seeds_for_power(effect: float, error: Callable[[int], tuple[float, float]], most: int = 1000) -> int | None:
    """The least number of seeds ``n`` (2 to ``most``) at which a true difference of ``effect`` is found beyond noise
    80% of the time: ``effect >= (t_{0.975,df} + t_{0.80,df}) se`` with ``(se, df) = error(n)``; None when even
    ``most`` seeds would not (an error part that seeds do not lower, the evaluation's, may be too large)."""

    def enough(n: int) -> bool:
        se, df = error(n)
        return abs(effect) >= (t_critical(df) + t_critical(df, 2 * POWER - 1)) * se

    if effect == 0 or not enough(most):
        return None
    low, high = 1, most  # enough(high); low is below the least
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return max(2, high)
