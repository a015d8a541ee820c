"""``octlm report SWEEP``: a sweep's page. Its metric against each swept key (one point per configuration at the
mean of its replicates, an error bar of ± one standard deviation over the seeds, each replicate a small dot; one
colour per step, so halving's rungs stay apart; a log axis for a key drawn log-uniformly or spanning 10x or more;
a key of words on evenly spaced places), the best so far in the order trials finished, the ranking, halving's
decisions and the queue. Torch-free; the template ``sweep.html.j2`` writes the SVG and escapes every text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from octlm.core.home import Home
from octlm.store.sweeps.records import SweepSpec
from octlm.views.curves import axes
from octlm.views.curves.charts import AREA, PALETTE, Area, Tick, coordinate, number, tick_label
from octlm.views.sweeps import replicates, status
from octlm.views.sweeps.status import SweepRanking, SweepStatus


@dataclass(frozen=True)
class Bar:
    """A configuration's point: its mean, its error bar (± sd) and its replicates, in pixels."""

    x: str
    y: str
    low: str
    high: str
    dots: tuple[str, ...]  # each replicate's y
    color: str
    title: str


@dataclass(frozen=True)
class Plot:
    title: str
    key: str  # data-chart
    x_label: str
    y_label: str
    bars: tuple[Bar, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    legend: tuple[tuple[str, str], ...]  # (colour, label)
    line: str = ""  # a polyline's points (the best so far)
    area: Area = AREA


@dataclass(frozen=True)
class SweepPage:
    title: str
    ranking: SweepRanking
    status: SweepStatus
    plots: list[Plot]


def page(home: Home, name: str) -> SweepPage:
    ranking, found = status.ranking(home, name), status.status(home, name)
    spec = found["spec"]
    plots = [against(ranking, key, _logarithmic(spec, key)) for key in ranking["keys"]]
    plots.append(best_so_far(ranking))
    return SweepPage(f"sweep {name}: {found['description']}", ranking, found, plots)


def against(ranking: SweepRanking, key: str, log: bool) -> Plot:
    """The metric against one swept key, a colour per step."""
    measured = [c for c in ranking["configurations"] if c["value"]["mean"] is not None]
    values: list[Any] = [c["params"].get(key) for c in measured]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and bool(values)
    places = {v: float(i) for i, v in enumerate(dict.fromkeys(map(str, values)))}
    log = numeric and (log or _spans(values)) and min(values) > 0
    xs = [math.log10(v) if log else float(v) if numeric else places[str(v)] for v in values]
    ys = [y for c in measured for y in _extent(c["value"])]
    if not measured:
        return Plot(f"{ranking['metric']} against {key}", f"against-{key}", key, ranking["metric"], (), (), (), ())
    corners = [(min(xs), min(ys)), (max(xs), max(ys))]
    frame = axes.frame(corners, (AREA.left + 12, AREA.right - 12), (AREA.bottom, AREA.top), pad=0.08)
    steps = sorted({c["step"] for c in measured})
    bars = tuple(
        _bar(c, frame, x, PALETTE[steps.index(c["step"]) % len(PALETTE)], key)
        for c, x in zip(measured, xs, strict=True)
    )
    x_ticks = _x_ticks(frame, log, numeric, places)
    legend = tuple((PALETTE[i % len(PALETTE)], f"at step {step:,}") for i, step in enumerate(steps))
    return Plot(
        f"{ranking['metric']} against {key}",
        f"against-{key}",
        key + (" (log)" if log else ""),
        ranking["metric"],
        bars,
        x_ticks,
        _y_ticks(frame),
        legend,
    )


def _logarithmic(spec: SweepSpec, key: str) -> bool:
    """A key drawn log-uniformly, or whose swept values (all of them, not only those measured so far) span 10x or
    more, is drawn on a log axis."""
    ranges, grid = spec.get("ranges") or {}, spec.get("grid") or {}
    if key in ranges:
        bounds = ranges[key]
        return bounds["log"] or _spans([bounds["low"], bounds["high"]])
    swept = grid.get(key) or []
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in swept) and bool(swept) and _spans(swept)


def _spans(values: Sequence[Any]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and max(positive) >= 10 * min(positive)


def _extent(value: replicates.Spread) -> list[float]:
    mean, sd = value["mean"] or 0.0, value["sd"] or 0.0
    return [mean - sd, mean + sd, *value["values"]]


def _bar(configuration: status.Configuration, frame: axes.Frame, x: float, color: str, key: str) -> Bar:
    value = configuration["value"]
    mean, sd = value["mean"] or 0.0, value["sd"] or 0.0
    shown = ", ".join(f"{k}={number(v)}" for k, v in configuration["params"].items())
    title = f"{shown}: {replicates.shown(value)} at step {configuration['step']:,}"
    dots = tuple(coordinate(frame.y(v)) for v in value["values"])
    return Bar(
        coordinate(frame.x(x)),
        coordinate(frame.y(mean)),
        coordinate(frame.y(mean - sd)),
        coordinate(frame.y(mean + sd)),
        dots,
        color,
        title,
    )


def _x_ticks(frame: axes.Frame, log: bool, numeric: bool, places: dict[str, float]) -> tuple[Tick, ...]:
    if not numeric:
        return tuple(Tick(coordinate(frame.x(at)), label) for label, at in places.items())
    if log:
        return tuple(
            Tick(coordinate(frame.x(v)), tick_label(10**v))
            for v in frame.x.ticks(6)
            if float(v).is_integer() or len(frame.x.ticks(6)) < 4
        )
    return tuple(Tick(coordinate(frame.x(v)), tick_label(v)) for v in frame.x.ticks(6))


def _y_ticks(frame: axes.Frame) -> tuple[Tick, ...]:
    return tuple(Tick(coordinate(frame.y(v)), tick_label(v)) for v in frame.y.ticks(5))


def best_so_far(ranking: SweepRanking) -> Plot:
    """Each finished trial's metric in the order they finished, and the best so far as a line."""
    found = ranking["best_so_far"]
    title, metric = "Best so far", ranking["metric"]
    if not found:
        return Plot(title, "best-so-far", "trials finished", metric, (), (), (), ())
    points = [(float(i), float(row["value"])) for i, row in enumerate(found, 1)]
    frame = axes.frame(points, (AREA.left + 12, AREA.right - 12), (AREA.bottom, AREA.top), pad=0.08, flat=1.0)
    bars = tuple(
        Bar(
            coordinate(frame.x(x)),
            coordinate(frame.y(y)),
            coordinate(frame.y(y)),
            coordinate(frame.y(y)),
            (),
            PALETTE[0],
            f"{row['id']}: {number(row['value'])}",
        )
        for (x, y), row in zip(points, found, strict=True)
    )
    line = " ".join(
        f"{coordinate(frame.x(x))},{coordinate(frame.y(row['best']))}"
        for (x, _), row in zip(points, found, strict=True)
    )
    x_ticks = tuple(Tick(coordinate(frame.x(v)), tick_label(v)) for v in frame.x.ticks(6) if float(v).is_integer())
    legend = ((PALETTE[0], "a trial"), (PALETTE[1], "best so far"))
    return Plot(title, "best-so-far", "trials finished", metric, bars, x_ticks, _y_ticks(frame), legend, line)
