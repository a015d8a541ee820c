"""Training curves from the run files (``octlm show ID... --plot``): plain-ASCII charts, or their data. Torch-free.

The charts are drawn on a grid of characters from the frame ``axes`` builds (the report's SVG charts use the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.views.curves import axes
from octlm.views.details import SCHEMA_VERSION, detail, run_records

MARKERS = "*o+x#@%&"
LABEL_WIDTH = 10
Metric = Literal["train_loss", "eval_loss", "lr", "gradient_norm"]
CURVES: tuple[tuple[Metric, str], ...] = (
    ("train_loss", "train loss"),
    ("eval_loss", "eval loss"),
    ("lr", "learning rate"),
    ("gradient_norm", "gradient norm (before clipping)"),
)
Series = dict[str, list[tuple[float, float | None]]]
Finite = dict[str, list[tuple[float, float]]]


class PlotData(TypedDict):
    """The ``octlm show ID... --plot --json`` document."""

    schema_version: int
    runs: dict[str, Sequence[RunRecord]]  # {ID: its run-file records}


def _records(home: Home, ids: list[str]) -> dict[str, Sequence[RunRecord]]:
    return {experiment_id: run_records(home, experiment_id) for experiment_id in ids}


def plot_data(home: Home, ids: list[str]) -> PlotData:
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
class Grid:
    """A chart's frame on a grid of ``height`` rows by ``columns`` columns (row 0 at the top)."""

    frame: axes.Frame
    columns: int
    height: int

    def cell(self, x: float, y: float) -> tuple[int, int]:
        return self.height - 1 - round(self.frame.y(y)), round(self.frame.x(x))


def _grid(points: list[tuple[float, float]], extra_y: list[float], width: int, height: int) -> Grid:
    columns = width - LABEL_WIDTH - 2
    return Grid(axes.frame(points, (0, columns - 1), (0, height - 1), extra_y=extra_y, flat=1.0), columns, height)


def _finite(series: Series) -> Finite:
    return {name: [(x, y) for x, y in values if y is not None and math.isfinite(y)] for name, values in series.items()}


def chart(title: str, series: Series, width: int = 80, height: int = 12, hline: tuple[str, float] | None = None) -> str:
    """A plain-ASCII line chart of several series over a shared x axis; fits ``width`` columns."""
    finite = _finite(series)
    points = [p for values in finite.values() for p in values]
    if not points:
        return f"{title}: no data\n"
    grid = _grid(points, [hline[1]] if hline else [], width, height)
    lines = [title, *_body(grid, finite, hline), *_axis(grid, list(series), hline)]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _body(grid: Grid, finite: Finite, hline: tuple[str, float] | None) -> list[str]:
    cells = [[" "] * grid.columns for _ in range(grid.height)]
    if hline:
        row, _ = grid.cell(grid.frame.x.low, hline[1])
        cells[row] = ["-"] * grid.columns
    for index, values in enumerate(finite.values()):
        for x, y in values:
            row, column = grid.cell(x, y)
            cells[row][column] = MARKERS[index % len(MARKERS)]
    lines = []
    for number, row_cells in enumerate(cells):
        value = grid.frame.y.level(number, grid.height - 1)
        label = f"{value:.3g}" if number in (0, grid.height // 2, grid.height - 1) else ""
        lines.append(f"{label:>{LABEL_WIDTH}} |" + "".join(row_cells))
    return lines


def _axis(grid: Grid, names: list[str], hline: tuple[str, float] | None) -> list[str]:
    margin = " " * (LABEL_WIDTH + 2)
    left, right = f"{grid.frame.x.low:,.0f}", f"{grid.frame.x.high:,.0f} tokens"
    legend = "   ".join(f"{MARKERS[i % len(MARKERS)]} {name}" for i, name in enumerate(names))
    if hline:
        legend += f"   - {hline[0]}"
    return [
        " " * LABEL_WIDTH + " +" + "-" * grid.columns,
        margin + left + " " * max(1, grid.columns - len(left) - len(right)) + right,
        margin + legend,
    ]
