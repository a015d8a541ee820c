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
from dataclasses import dataclass
from functools import partial

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


@dataclass(frozen=True)
class Schedule:
    """One member of the family: how it becomes a one-argument function of the step, and the config keys it reads
    beyond ``training.learning_rate``, ``warmup_steps`` and ``steps`` (what ``octlm config keys`` documents for it)."""

    build: Callable[[TrainingConfig], Callable[[int], float]]
    keys: tuple[str, ...] = ()


# The family's one table: a new schedule is a function above and a row here (its name also goes in
# ``config.section_classes.SCHEDULES``, the choices a config may name: config imports nothing of train). tests/train/
# test_schedules.py holds every row to the choices, the key's documentation and its own edges.
SCHEDULES: dict[str, Schedule] = {
    "cosine": Schedule(
        lambda t: partial(
            learning_rate,
            peak=t.learning_rate,
            floor=t.min_learning_rate,
            warmup_steps=t.warmup_steps,
            total_steps=t.steps,
        ),
        ("training.min_learning_rate",),
    ),
    "wsd": Schedule(
        lambda t: partial(
            wsd,
            peak=t.learning_rate,
            floor=t.min_learning_rate,
            warmup_steps=t.warmup_steps,
            total_steps=t.steps,
            decay_fraction=t.decay_fraction,
        ),
        ("training.min_learning_rate", "training.decay_fraction"),
    ),
    "constant": Schedule(lambda t: partial(constant, peak=t.learning_rate, warmup_steps=t.warmup_steps)),
    "linear": Schedule(
        lambda t: partial(
            linear, peak=t.learning_rate, floor=t.min_learning_rate, warmup_steps=t.warmup_steps, total_steps=t.steps
        ),
        ("training.min_learning_rate",),
    ),
}


def for_config(training: TrainingConfig) -> Callable[[int], float]:
    """The schedule of a ``TrainingConfig`` as a one-argument function (``SCHEDULES``)."""
    return SCHEDULES[training.schedule].build(training)
