"""The learning-rate schedules (``training.schedule``): one ``Schedule`` row each, in one table, ``SCHEDULES``.

A schedule is pure arithmetic, the rate as a function of the 0-based step (torch-free, so the config reads its
table): a linear warmup, then one of the shapes below down to a floor. ``cosine`` is the seed notebook's: half a
cosine from the peak to the floor over the steps after the warmup. ``wsd`` (warmup, stable, decay) stays at the
peak and decays linearly to the floor over the last ``decay_fraction`` of the steps: until its decay begins, the
rate does not depend on ``steps``, so a run forked in its stable phase with a longer budget continues exactly as a
run started with that budget. ``constant`` stays at the peak; ``linear`` decays linearly from the peak at the
warmup's end to the floor at the last step. Past ``steps`` every shape stays at its last value.

Everything octlm does per schedule reads its row: the config's choices and the key's documentation
(``training_section``, hence ``octlm config keys`` and docs/reference/config.md: ``documentation``), the rule its
keys must keep together, checked whenever a config is built (``Schedule.problem``), and the rate of each step,
which the loop asks (``rate_of``: the function called with the training keys its row names, and no other).
Adding a schedule: its function and its row here (a schedule that reads a key the training section lacks also
adds the key there); tests/train/test_schedules.py holds every row to its own ``edges`` (docs/modules.md,
"Families").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from octlm.config.training_section import TrainingConfig


def warmup(step: int, learning_rate: float, warmup_steps: int) -> float:
    """The family's linear warmup: ``learning_rate`` / ``warmup_steps`` at step 0, the peak at the warmup's last."""
    return learning_rate * (step + 1) / max(1, warmup_steps)


def cosine(step: int, *, learning_rate: float, min_learning_rate: float, warmup_steps: int, steps: int) -> float:
    """The seed's: after the warmup, half a cosine from ``learning_rate`` down to ``min_learning_rate`` at ``steps``."""
    if step < warmup_steps:
        return warmup(step, learning_rate, warmup_steps)
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    half_cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return min_learning_rate + half_cosine * (learning_rate - min_learning_rate)


def wsd(
    step: int, *, learning_rate: float, min_learning_rate: float, warmup_steps: int, steps: int, decay_fraction: float
) -> float:
    """Warmup, stable at the peak, then a linear decay to the floor over the last ``decay_fraction`` of the steps."""
    if step < warmup_steps:
        return warmup(step, learning_rate, warmup_steps)
    decay_steps = max(1, round(decay_fraction * steps))
    progress = (step - (steps - decay_steps)) / decay_steps
    return learning_rate - (learning_rate - min_learning_rate) * min(max(progress, 0.0), 1.0)


def wsd_problem(*, steps: int, warmup_steps: int, decay_fraction: float, **_: float) -> tuple[str, str] | None:
    """wsd's decay must be longer than nothing and begin after the warmup."""
    if decay_fraction and steps - round(decay_fraction * steps) >= warmup_steps:
        return None
    return "decay_fraction", (
        f"wsd decays over the last {decay_fraction} of {steps} steps, which must be above 0 and begin after the "
        f"{warmup_steps} warmup steps"
    )


def linear(step: int, *, learning_rate: float, min_learning_rate: float, warmup_steps: int, steps: int) -> float:
    """After the warmup, a straight line from ``learning_rate`` down to ``min_learning_rate`` at ``steps``."""
    if step < warmup_steps:
        return warmup(step, learning_rate, warmup_steps)
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return learning_rate - (learning_rate - min_learning_rate) * min(progress, 1.0)


def constant(step: int, *, learning_rate: float, warmup_steps: int) -> float:
    """After the warmup, ``learning_rate`` to the end."""
    return warmup(step, learning_rate, warmup_steps) if step < warmup_steps else learning_rate


def no_problem(**_: float) -> tuple[str, str] | None:
    return None


@dataclass(frozen=True)
class Schedule:
    """One member of the family."""

    rate: Callable[..., float]  # (step, **keys) -> the learning rate at that 0-based step
    keys: tuple[str, ...]  # the training keys it reads, by name: ``rate`` and ``check`` are called with these alone
    help: str  # what it does after the warmup, in ``training.schedule``'s documentation
    edges: tuple[tuple[int, float], ...]  # (step, its rate) under ``EXAMPLE``: what the family test holds it to
    check: Callable[..., tuple[str, str] | None] = no_problem  # (**keys) -> (key, what is wrong), or None

    def keys_of(self, training: TrainingConfig) -> dict[str, float]:
        return {key: getattr(training, key) for key in self.keys}

    def at(self, training: TrainingConfig) -> Callable[[int], float]:
        """The schedule of ``training`` as a function of the step alone."""
        return partial(self.rate, **self.keys_of(training))

    def problem(self, training: TrainingConfig) -> tuple[str, str] | None:
        """The key of ``training`` that breaks the schedule's rule, with what is wrong; None when none does."""
        return self.check(**self.keys_of(training))


# The training keys of the worked example each row's ``edges`` are given for: 100 steps, 10 of warmup to a peak of
# 1.0, a floor of 0.1 (and wsd's last fifth decaying).
EXAMPLE = {"steps": 100, "warmup_steps": 10, "learning_rate": 1.0, "min_learning_rate": 0.1, "decay_fraction": 0.2}
_TO_FLOOR = ("learning_rate", "min_learning_rate", "warmup_steps", "steps")

# The family's one table: a new schedule is a function above and a row here.
SCHEDULES: dict[str, Schedule] = {
    "cosine": Schedule(
        cosine,
        _TO_FLOOR,
        "decays to the floor over the rest of the run (the seed's)",
        ((0, 0.1), (9, 1.0), (10, 1.0), (40, 0.775), (100, 0.1), (150, 0.1)),
    ),
    "wsd": Schedule(
        wsd,
        (*_TO_FLOOR, "decay_fraction"),
        "stays at the peak, then decays linearly to the floor over the last training.decay_fraction of the steps, "
        "so a run given more steps in its stable phase continues exactly",
        ((0, 0.1), (9, 1.0), (40, 1.0), (80, 1.0), (90, 0.55), (100, 0.1), (150, 0.1)),
        wsd_problem,
    ),
    "constant": Schedule(
        constant, ("learning_rate", "warmup_steps"), "stays at the peak", ((0, 0.1), (9, 1.0), (40, 1.0), (150, 1.0))
    ),
    "linear": Schedule(
        linear,
        _TO_FLOOR,
        "decays linearly to the floor",
        ((0, 0.1), (9, 1.0), (10, 1.0), (40, 0.7), (100, 0.1), (150, 0.1)),
    ),
}


def rate_of(training: TrainingConfig) -> Callable[[int], float]:
    """The learning rate of ``training``'s schedule as a function of the 0-based step (what the loop asks)."""
    return SCHEDULES[training.schedule].at(training)


def documentation() -> str:
    """``training.schedule``'s help text: its choices, then each row's ``help``."""
    return "{choices}: after the linear warmup, " + "; ".join(f"{name} {row.help}" for name, row in SCHEDULES.items())
