"""The learning rate as a pure function of the step: a linear warmup, then one of four shapes down to a floor.

``cosine`` is the seed notebook's: half a cosine from the peak to the floor over the steps after the warmup.
``wsd`` (warmup, stable, decay) stays at the peak and decays linearly to the floor over the last
``decay_fraction`` of the steps: until its decay begins, the rate does not depend on ``total_steps``, so a run
forked in its stable phase with a longer budget continues exactly as a run started with that budget.
``constant`` stays at the peak; ``linear`` decays linearly from the peak at the warmup's end to the floor at the
last step. Past ``total_steps`` every shape stays at its last value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from octlm.config import TrainingConfig


def learning_rate(step: int, *, peak: float, floor: float, warmup_steps: int, total_steps: int) -> float:
    """The seed's cosine: rate for the 0-based ``step``; past ``total_steps`` it stays at ``floor``."""
    if step < warmup_steps:
        return peak * (step + 1) / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return floor + cosine * (peak - floor)


def wsd(step: int, *, peak: float, floor: float, warmup_steps: int, total_steps: int, decay_fraction: float) -> float:
    """Warmup, stable at ``peak``, then a linear decay to ``floor`` over the last ``decay_fraction`` of the steps."""
    if step < warmup_steps:
        return peak * (step + 1) / max(1, warmup_steps)
    decay_steps = max(1, round(decay_fraction * total_steps))
    progress = (step - (total_steps - decay_steps)) / decay_steps
    return peak - (peak - floor) * min(max(progress, 0.0), 1.0)


def linear(step: int, *, peak: float, floor: float, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return peak * (step + 1) / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak - (peak - floor) * min(progress, 1.0)


def constant(step: int, *, peak: float, warmup_steps: int) -> float:
    return peak * (step + 1) / max(1, warmup_steps) if step < warmup_steps else peak


def for_config(training: TrainingConfig) -> Callable[[int], float]:
    """The schedule of a ``TrainingConfig`` as a one-argument function."""
    peak, floor, warmup, total = (
        training.learning_rate,
        training.min_learning_rate,
        training.warmup_steps,
        training.steps,
    )
    if training.schedule == "wsd":
        fraction = training.decay_fraction
        return lambda s: wsd(s, peak=peak, floor=floor, warmup_steps=warmup, total_steps=total, decay_fraction=fraction)
    if training.schedule == "linear":
        return lambda s: linear(s, peak=peak, floor=floor, warmup_steps=warmup, total_steps=total)
    if training.schedule == "constant":
        return lambda s: constant(s, peak=peak, warmup_steps=warmup)
    return lambda s: learning_rate(s, peak=peak, floor=floor, warmup_steps=warmup, total_steps=total)
