"""Line charts as inline SVG, drawn from run-file records for ``octlm report``, on the frame ``axes`` builds
(the ASCII charts of ``show --plot`` use the same). Torch-free.

Each point is a ``<circle>`` with a ``<title>`` (a browser shows it on hover: no JavaScript), every
coordinate is rounded to a tenth of a pixel and every number is formatted the same way, so the same
records give the same bytes. No external font, image or link; every text is HTML-escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

from octlm.views import axes

PALETTE = ("#1f6fb4", "#d1495b", "#2a9d4b", "#8d5fd3", "#e08a00", "#6d4c41", "#d43d9f", "#178ca4")
WIDTH, HEIGHT = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 72, 14, 12, 42  # the plot area's margins
Point = tuple[float, float, str]  # x, y, hover text
Records = list[dict[str, Any]]


def number(value: Any) -> str:
    """A value as the report writes it: integers with thousands separators, floats to 5 significant
    digits, nothing as an en dash; text as it is (escaping is the caller's)."""
    if value is None:
        return "\u2013"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.5g}" if math.isfinite(value) else str(value)
    return str(value)


def esc(value: Any) -> str:
    """Any value as HTML text: formatted by ``number``, then escaped (quotes included)."""
    return escape(number(value), quote=True)


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


def tick_label(value: float) -> str:
    if abs(value) >= 10_000 and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _axes(chart: Chart, frame: axes.Frame) -> list[str]:
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    out = [f'<rect class="area" x="{LEFT}" y="{TOP}" width="{right - LEFT}" height="{bottom - TOP}"/>']
    for value in frame.y.ticks(5):
        y = f"{frame.y(value):.1f}"
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y}" x2="{right}" y2="{y}"/>')
        out.append(f'<text class="tick" x="{LEFT - 5}" y="{y}" text-anchor="end" dy="3">{tick_label(value)}</text>')
    for value in frame.x.ticks(8):
        x = f"{frame.x(value):.1f}"
        out.append(f'<line class="grid" x1="{x}" y1="{TOP}" x2="{x}" y2="{bottom}"/>')
        out.append(f'<text class="tick" x="{x}" y="{bottom + 14}" text-anchor="middle">{tick_label(value)}</text>')
    out.append(
        f'<text class="label" x="{(LEFT + right) / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
        f"{escape(chart.x_label)}</text>"
    )
    middle = (TOP + bottom) / 2
    out.append(
        f'<text class="label" x="13" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 13 {middle:.1f})">{escape(chart.y_label)}</text>'
    )
    return out


def _hline(chart: Chart, frame: axes.Frame) -> list[str]:
    if chart.hline is None:
        return []
    label, value = chart.hline
    y = f"{frame.y(value):.1f}"
    text = escape(f"{label} {number(value)}", quote=True)
    return [
        f'<line class="hline" x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}"><title>{text}</title></line>',
        f'<text class="tick halo" x="{LEFT + 6}" y="{y}" dy="-4">{text}</text>',
    ]


def coordinate(value: float) -> str:
    """A pixel position to a tenth, without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _series(series: Series, frame: axes.Frame) -> list[str]:
    color = PALETTE[series.color % len(PALETTE)]
    coords = [(coordinate(frame.x(x)), coordinate(frame.y(y)), text) for x, y, text in series.points]
    kind, dash = ("series eval", ' stroke-dasharray="5 3"') if series.dashed else ("series", "")
    out = [f'<g class="{kind}" data-series="{escape(series.name, quote=True)}" fill="{color}" stroke="{color}">']
    if len(coords) > 1:
        out.append(f'<polyline fill="none"{dash} points="{" ".join(f"{x},{y}" for x, y, _ in coords)}"/>')
    out += [f'<circle cx="{x}" cy="{y}" r="2.6"><title>{escape(t, quote=True)}</title></circle>' for x, y, t in coords]
    out.append("</g>")
    return out


def svg(chart: Chart) -> str:
    """One chart as a ``<figure>``: its title, the SVG (scales with the page) and an HTML legend."""
    drawn = [s for s in chart.series if s.points]
    head = f'<figure class="chart"><figcaption>{escape(chart.title)}</figcaption>'
    if not drawn:
        return head + '<p class="empty">no data in the run file</p></figure>'
    points = [(x, y) for s in drawn for x, y, _ in s.points]
    extra = [chart.hline[1]] if chart.hline else []
    frame = axes.frame(points, (LEFT, WIDTH - RIGHT), (HEIGHT - BOTTOM, TOP), extra_y=extra, pad=0.06)
    body = _axes(chart, frame) + _hline(chart, frame)
    for series in drawn:
        body += _series(series, frame)
    label = escape(f"{chart.title} ({chart.x_label})", quote=True)
    return "\n".join(
        [
            head,
            f'<svg class="chart" data-chart="{escape(chart.key, quote=True)}" '
            f'data-metrics="{escape(" ".join(chart.metrics), quote=True)}" '
            f'data-x="{escape(chart.x_label, quote=True)}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{label}">',
            *body,
            "</svg>",
            legend(drawn, chart.hline),
            "</figure>",
        ]
    )


def legend(series: list[Series], hline: tuple[str, float] | None) -> str:
    items = []
    for s in series:
        style = f"border-top-color:{PALETTE[s.color % len(PALETTE)]}" + (";border-top-style:dashed" if s.dashed else "")
        items.append(f'<span class="key"><span class="swatch" style="{style}"></span>{escape(s.name)}</span>')
    if hline:
        items.append(f'<span class="key"><span class="swatch clip"></span>{escape(hline[0])}</span>')
    return f'<div class="legend">{"".join(items)}</div>'


# ---------------------------------------------------------------- the report's charts from run files


CURVES = (  # (key, title, y label, metrics, x field)
    ("loss-step", "Loss by step", "loss (nats)", ("train_loss", "eval_loss"), "step"),
    ("loss-tokens", "Loss by tokens", "loss (nats)", ("train_loss", "eval_loss"), "tokens"),
    ("lr", "Learning rate", "learning rate", ("lr",), "step"),
    ("gradient-norm", "Gradient norm before clipping", "gradient norm", ("gradient_norm",), "step"),
    ("bpb", "Bits per byte (evaluation)", "bits per byte", ("bits_per_byte",), "step"),
)
NAMES = {
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
        x, y = record.get(x_field), record.get(metric)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            where = f"step {number(record.get('step'))}, {number(record.get('tokens'))} tokens"
            found.append((float(x), float(y), f"{prefix}{NAMES.get(metric, metric)} at {where} = {number(y)}"))
    return tuple(found)


def curves(runs: dict[str, Records], clip: float | None) -> list[Chart]:
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
                series.append(Series(prefix + NAMES[metric], found, color, dashed=metric == "eval_loss"))
        hline = ("clip threshold", clip) if key == "gradient-norm" and clip else None
        charts.append(Chart(title, key, x_field, y_label, tuple(series), hline, metrics))
    return charts
