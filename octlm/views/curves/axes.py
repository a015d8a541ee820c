"""Data ranges onto a drawing surface, for both renderers of curves: the SVG charts of ``octlm report``
(``charts``, in pixels) and the ASCII charts of ``octlm show --plot`` (``plots``, in columns and rows).
Torch-free.

A ``Scale`` maps a data range linearly onto positions; a ``Frame`` is a chart's two scales, built by
``frame`` from its points; ``extent`` chooses the data range of some values and ``nice_ticks`` the round
values an axis marks. The renderers only say where their surface lies and how they write a position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """The data range [low, high] mapped linearly onto the positions [start, end] (end < start: flipped, as the
    y axis of an SVG, which grows downwards)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)

    def ticks(self, count: int = 5) -> list[float]:
        """Round values within the range, about ``count`` of them (``nice_ticks``)."""
        return nice_ticks(self.low, self.high, count)

    def level(self, index: int, steps: int) -> float:
        """The value ``index`` of ``steps`` equal steps down from ``high`` (a text chart's row labels)."""
        return self.high - (self.high - self.low) * index / steps


@dataclass(frozen=True)
class Frame:
    """A chart's x and y scales."""

    x: Scale
    y: Scale


def extent(values: Iterable[float], pad: float = 0.0, flat: float | None = None) -> tuple[float, float]:
    """The range of ``values``, widened each side by ``pad`` times its width. A flat range (every value equal)
    is given a width: ``flat`` above the value, or (None) a tenth of the value each side, 1 at 0."""
    found = list(values)
    low, high = min(found), max(found)
    if high == low:
        if flat is not None:
            return low, low + flat
        spread = abs(low) * 0.1 or 1.0
        return low - spread, high + spread
    if pad:
        margin = (high - low) * pad
        return low - margin, high + margin
    return low, high


def frame(
    points: Sequence[tuple[float, float]],
    x_to: tuple[float, float],
    y_to: tuple[float, float],
    *,
    extra_y: Sequence[float] = (),
    pad: float = 0.0,
    flat: float | None = None,
) -> Frame:
    """The frame of ``points`` (and of the levels ``extra_y``, e.g. a threshold line) drawn from ``x_to[0]`` to
    ``x_to[1]`` across and ``y_to[0]`` to ``y_to[1]`` up; ``pad`` widens the y range only (``extent``)."""
    x0, x1 = extent((x for x, _ in points), flat=flat)
    y0, y1 = extent([*(y for _, y in points), *extra_y], pad, flat)
    return Frame(Scale(x0, x1, *x_to), Scale(y0, y1, *y_to))


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values within [low, high]: steps of 1, 2 or 5 times a power of ten."""
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]
