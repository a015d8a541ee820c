"""Line charts as inline SVG, from run-file records, for ``octlm report``: what each chart plots (``curves``)
and where it lies in pixels (``draw``, from the frame ``axes`` builds); the template ``charts.html.j2`` writes
the SVG. Torch-free.

Each point is a ``<circle>`` with a ``<title>`` (a browser shows it on hover: no JavaScript), every
coordinate is rounded to a tenth of a pixel and every number is formatted the same way, so the same
records give the same bytes. No external font, image or link; the template escapes every text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from octlm.core.records import RunRecord
from octlm.views.curves import axes

PALETTE = ("#1f6fb4", "#d1495b", "#2a9d4b", "#8d5fd3", "#e08a00", "#6d4c41", "#d43d9f", "#178ca4")
WIDTH, HEIGHT = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 72, 14, 12, 42  # the plot area's margins
Point = tuple[float, float, str]  # x, y, hover text
Records = Sequence[RunRecord]


def number(value: object) -> str:
    """A value as the report writes it: integers with thousands separators, floats to 5 significant
    digits, nothing as an en dash; text as it is (escaping is the template's)."""
    if value is None:
        return "\u2013"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.5g}" if math.isfinite(value) else str(value)
    return str(value)


@dataclass(frozen=True)
class Series:
    name: str  # the legend's label
    points: tuple[Point, ...]
    color: int  # an index into PALETTE
    dashed: bool = False  # evaluation curves: a dashed line and hollow points


@dataclass(frozen=True)
class Chart:
    title: str
    key: str  # its data-chart attribute, e.g. "loss-step"
    x_label: str  # also the record field on the x axis: "step" or "tokens"
    y_label: str
    series: tuple[Series, ...]
    hline: tuple[str, float] | None = None  # a labelled horizontal line, e.g. the clip threshold
    metrics: tuple[str, ...] = ()  # the record fields drawn (its data-metrics attribute)


@dataclass(frozen=True)
class Area:
    """The SVG's box and the plot area in it (pixels; y grows downwards), with the positions its labels take."""

    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right: int = WIDTH - RIGHT
    bottom: int = HEIGHT - BOTTOM

    @property
    def center(self) -> str:
        """The x axis label's position (across)."""
        return f"{(self.left + self.right) / 2:.1f}"

    @property
    def middle(self) -> str:
        """The y axis label's position (down)."""
        return f"{(self.top + self.bottom) / 2:.1f}"


AREA = Area()


@dataclass(frozen=True)
class Tick:
    at: str  # the position in pixels, to a tenth
    label: str


@dataclass(frozen=True)
class Mark:
    """One point of a drawn series, with its hover text."""

    x: str
    y: str
    title: str


@dataclass(frozen=True)
class Line:
    """A series as drawn: its colour, and each point in pixels."""

    name: str
    color: str
    dashed: bool
    marks: tuple[Mark, ...]

    @property
    def points(self) -> str:
        """The polyline's ``points`` attribute."""
        return " ".join(f"{mark.x},{mark.y}" for mark in self.marks)


@dataclass(frozen=True)
class Drawing:
    """A chart laid out for the template ``charts.html.j2``: no ``lines`` when no series has a point."""

    chart: Chart
    lines: tuple[Line, ...] = ()
    y_ticks: tuple[Tick, ...] = ()
    x_ticks: tuple[Tick, ...] = ()
    hline_at: str | None = None  # the threshold line's position (down)
    area: Area = AREA


def tick_label(value: float) -> str:
    if abs(value) >= 10_000 and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.4g}"


def coordinate(value: float) -> str:
    """A pixel position to a tenth, without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def draw(chart: Chart, area: Area = AREA) -> Drawing:
    """The chart's axes, ticks, threshold line and series in pixels of ``area``, from the frame ``axes`` builds
    of the series that have points."""
    drawn = [s for s in chart.series if s.points]
    if not drawn:
        return Drawing(chart, area=area)
    points = [(x, y) for s in drawn for x, y, _ in s.points]
    extra = [chart.hline[1]] if chart.hline else []
    frame = axes.frame(points, (area.left, area.right), (area.bottom, area.top), extra_y=extra, pad=0.06)
    lines = tuple(_line(s, frame) for s in drawn)
    y_ticks = tuple(Tick(f"{frame.y(value):.1f}", tick_label(value)) for value in frame.y.ticks(5))
    x_ticks = tuple(Tick(f"{frame.x(value):.1f}", tick_label(value)) for value in frame.x.ticks(8))
    hline_at = f"{frame.y(chart.hline[1]):.1f}" if chart.hline else None
    return Drawing(chart, lines, y_ticks, x_ticks, hline_at, area)


def _line(series: Series, frame: axes.Frame) -> Line:
    marks = tuple(Mark(coordinate(frame.x(x)), coordinate(frame.y(y)), text) for x, y, text in series.points)
    return Line(series.name, PALETTE[series.color % len(PALETTE)], series.dashed, marks)


# ---------------------------------------------------------------- the report's charts from run files


CURVES = (  # (key, title, y label, metrics, x field)
    ("loss-step", "Loss by step", "loss (nats)", ("train_loss", "eval_loss"), "step"),
    ("loss-tokens", "Loss by tokens", "loss (nats)", ("train_loss", "eval_loss"), "tokens"),
    ("lr", "Learning rate", "learning rate", ("lr",), "step"),
    ("gradient-norm", "Gradient norm before clipping", "gradient norm", ("gradient_norm",), "step"),
    ("bpb", "Bits per byte (evaluation)", "bits per byte", ("bits_per_byte",), "step"),
)
LABELS = {
    "train_loss": "train loss",
    "eval_loss": "eval loss",
    "lr": "learning rate",
    "gradient_norm": "gradient norm",
    "bits_per_byte": "bits per byte",
}


def points(records: Records, metric: str, x_field: str, prefix: str) -> tuple[Point, ...]:
    """One point per record that holds ``metric`` (and its x), with its hover text."""
    found = []
    for record in records:
        x, y = record.get(x_field), record.get(metric)  # any key: a record may hold more than RunRecord says
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            where = f"step {number(record.get('step'))}, {number(record.get('tokens'))} tokens"
            found.append((float(x), float(y), f"{prefix}{LABELS.get(metric, metric)} at {where} = {number(y)}"))
    return tuple(found)


def curves(runs: Mapping[str, Records], clip: float | None) -> list[Chart]:
    """The report's charts for the run files of one experiment (colours by metric) or several (overlaid,
    colours by experiment, evaluation dashed)."""
    several = len(runs) > 1
    charts = []
    for key, title, y_label, metrics, x_field in CURVES:
        series = []
        for index, (experiment_id, records) in enumerate(runs.items()):
            prefix = f"{experiment_id} " if several else ""
            for rank, metric in enumerate(metrics):
                color = index if several else rank
                found = points(records, metric, x_field, prefix)
                series.append(Series(prefix + LABELS[metric], found, color, dashed=metric == "eval_loss"))
        hline = ("clip threshold", clip) if key == "gradient-norm" and clip else None
        charts.append(Chart(title, key, x_field, y_label, tuple(series), hline, metrics))
    return charts
