"""The learning rate as a pure function of the step: linear warmup, cosine decay, then a floor."""

from __future__ import annotations

import math
from collections.abc import Callable

from octlm.config import TrainingConfig


def learning_rate(step: int, *, peak: float, floor: float, warmup_steps: int, total_steps: int) -> float:
    """Rate for the 0-based ``step``; past ``total_steps`` it stays at ``floor``."""
    if step < warmup_steps:
        return peak * (step + 1) / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return floor + cosine * (peak - floor)


def for_config(training: TrainingConfig) -> Callable[[int], float]:
    """The schedule of a ``TrainingConfig`` as a one-argument function."""
    return lambda step: learning_rate(
        step,
        peak=training.learning_rate,
        floor=training.min_learning_rate,
        warmup_steps=training.warmup_steps,
        total_steps=training.steps,
    )
