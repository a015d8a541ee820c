"""Training curves from the run files (``octlm show ID... --plot``): plain-ASCII charts, or their data. Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from octlm.core.home import Home
from octlm.views.details import SCHEMA_VERSION, detail, run_records

MARKERS = "*o+x#@%&"
LABEL_WIDTH = 10
CURVES = (
    ("train_loss", "train loss"),
    ("eval_loss", "eval loss"),
    ("lr", "learning rate"),
    ("gradient_norm", "gradient norm (before clipping)"),
)
Series = dict[str, list[tuple[float, float | None]]]


def _records(home: Home, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {experiment_id: run_records(home, experiment_id) for experiment_id in ids}


def plot_data(home: Home, ids: list[str]) -> dict[str, Any]:
    """The ``octlm show ID... --plot --json`` document: {ID: its run-file records}."""
    for experiment_id in ids:
        detail(home, experiment_id)  # an unknown ID is BadInput before anything is written
    return {"schema_version": SCHEMA_VERSION, "runs": _records(home, ids)}


def plots(home: Home, ids: list[str], width: int = 80) -> str:
    """The four charts (train and eval loss, learning rate, gradient norm with the clip threshold)."""
    configs = [detail(home, experiment_id)["config"] for experiment_id in ids]  # unknown IDs: BadInput first
    clip = next((c["training"]["grad_clip"] for c in configs if c.get("training", {}).get("grad_clip")), None)
    records = _records(home, ids)
    out = []
    for metric, title in CURVES:
        series: Series = {i: [(r.get("tokens") or 0, r.get(metric)) for r in recs] for i, recs in records.items()}
        hline = ("clip threshold", clip) if metric == "gradient_norm" and clip else None
        out.append(chart(title, series, width=width, hline=hline))
    return "\n".join(out)


@dataclass(frozen=True)
class Frame:
    """Data ranges mapped onto a grid of ``height`` rows by ``columns`` columns."""

    x0: float
    x1: float
    low: float
    high: float
    columns: int
    height: int

    def cell(self, x: float, y: float) -> tuple[int, int]:
        column = round((x - self.x0) / (self.x1 - self.x0) * (self.columns - 1))
        row = self.height - 1 - round((y - self.low) / (self.high - self.low) * (self.height - 1))
        return row, column


def _frame(points: list[tuple[float, float]], extra_y: list[float], width: int, height: int) -> Frame:
    ys = [y for _, y in points] + extra_y
    xs = [x for x, _ in points]
    low, high, x0, x1 = min(ys), max(ys), min(xs), max(xs)
    return Frame(
        x0, x1 if x1 != x0 else x0 + 1, low, high if high != low else low + 1.0, width - LABEL_WIDTH - 2, height
    )


def _finite(series: Series) -> dict[str, list[tuple[float, float]]]:
    return {name: [(x, y) for x, y in values if y is not None and math.isfinite(y)] for name, values in series.items()}


def chart(title: str, series: Series, width: int = 80, height: int = 12, hline: tuple[str, float] | None = None) -> str:
    """A plain-ASCII line chart of several series over a shared x axis; fits ``width`` columns."""
    finite = _finite(series)
    points = [p for values in finite.values() for p in values]
    if not points:
        return f"{title}: no data\n"
    frame = _frame(points, [hline[1]] if hline else [], width, height)
    lines = [title, *_body(frame, finite, hline), *_axis(frame, list(series), hline)]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _body(frame: Frame, finite: dict[str, list[tuple[float, float]]], hline: tuple[str, float] | None) -> list[str]:
    grid = [[" "] * frame.columns for _ in range(frame.height)]
    if hline:
        row, _ = frame.cell(frame.x0, hline[1])
        grid[row] = ["-"] * frame.columns
    for index, values in enumerate(finite.values()):
        for x, y in values:
            row, column = frame.cell(x, y)
            grid[row][column] = MARKERS[index % len(MARKERS)]
    lines = []
    for number, cells in enumerate(grid):
        value = frame.high - (frame.high - frame.low) * number / (frame.height - 1)
        label = f"{value:.3g}" if number in (0, frame.height // 2, frame.height - 1) else ""
        lines.append(f"{label:>{LABEL_WIDTH}} |" + "".join(cells))
    return lines


def _axis(frame: Frame, names: list[str], hline: tuple[str, float] | None) -> list[str]:
    margin = " " * (LABEL_WIDTH + 2)
    left, right = f"{frame.x0:,.0f}", f"{frame.x1:,.0f} tokens"
    legend = "   ".join(f"{MARKERS[i % len(MARKERS)]} {name}" for i, name in enumerate(names))
    if hline:
        legend += f"   - {hline[0]}"
    return [
        " " * LABEL_WIDTH + " +" + "-" * frame.columns,
        margin + left + " " * max(1, frame.columns - len(left) - len(right)) + right,
        margin + legend,
    ]
