"""Side-by-side comparison of experiments, listing filters, and terminal curves. Torch-free.

Run files are the source of the curves and of "best" and "at equal tokens" figures; the
registry supplies verdicts; configs supply the keys that differ.
"""

from __future__ import annotations

import json
import math
import operator
import re
from typing import Any, Callable

from . import runfile
from .config import flatten
from .errors import BadInput
from .home import Home
from .show import detail

METRICS = ("train_loss", "eval_loss", "perplexity", "bits_per_byte")
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "=": operator.eq, "<": operator.lt, ">": operator.gt,
}
WHERE = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*")


def _verdict(verifications: list[dict[str, Any]], kind: str) -> str | None:
    found = [v for v in verifications if v["kind"] == kind]
    return found[-1]["verdict"] if found else None


def _at_tokens(records: list[dict[str, Any]], tokens: int) -> dict[str, Any] | None:
    reached = [r for r in records if r.get("tokens", 0) <= tokens]
    return reached[-1] if reached else None


def compare(home: Home, ids: list[str], all_keys: bool = False) -> dict[str, Any]:
    details = [detail(home, experiment_id) for experiment_id in ids]
    records = {d["id"]: runfile.read(home.run_file(d["id"])) for d in details}
    common = min((max((r.get("tokens", 0) for r in recs), default=0) for recs in records.values()), default=0)
    experiments = []
    for item in details:
        recs = records[item["id"]]
        last = recs[-1] if recs else {}
        equal = _at_tokens(recs, common) if common else None
        experiments.append({
            "id": item["id"], "description": item["description"], "status": item["status"], "step": item["step"],
            "final": {k: last.get(k) for k in METRICS},
            "best": {k: min((r[k] for r in recs if r.get(k) is not None), default=None) for k in METRICS},
            "at_equal_tokens": {"tokens": equal.get("tokens") if equal else None,
                                **{k: (equal or {}).get(k) for k in METRICS}},
            "tokens": last.get("tokens"), "tokens_per_second": last.get("tokens_per_second"),
            "wall_seconds": last.get("elapsed_seconds"),
            "verify_resume": _verdict(item["verifications"], "verify-resume"),
            "overfit": _verdict(item["verifications"], "overfit"),
        })
    flat = [flatten(d["config"]) for d in details]
    keys = sorted(set().union(*flat)) if flat else []
    differing = {}
    for key in keys:
        values = [f.get(key) for f in flat]
        if key in ("id",):
            continue
        if all_keys or any(v != values[0] for v in values):
            section = key.split(".", 1)[0] if "." in key else "top"
            differing.setdefault(section, {})[key] = values
    return {"schema_version": 1, "ids": ids, "equal_tokens": common, "experiments": experiments,
            "config": differing, "all_keys": all_keys}


# ---------------------------------------------------------------------------- listing filters

def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def predicate(expression: str) -> Callable[[dict[str, Any]], bool]:
    """``eval_loss<2.5``, ``status=completed``, ``model.n_layers=4``: a Python predicate, never SQL."""
    match = WHERE.fullmatch(expression)
    if not match:
        raise BadInput(f"--where {expression!r}: expected KEY OP VALUE with OP one of <, <=, =, !=, >=, >")
    key, op, raw = match.groups()
    compare_with = OPERATORS[op]
    wanted_number = _number(raw)

    def test(row: dict[str, Any]) -> bool:
        value = row.get(key)
        if value is None:
            return False
        have = _number(value) if not isinstance(value, bool) else None
        if wanted_number is not None and have is not None:
            return compare_with(have, wanted_number)
        if op not in ("=", "!="):
            return False
        return compare_with(str(value).lower() if isinstance(value, bool) else str(value), raw)

    return test


def with_config(home: Home, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add flattened config keys to listing rows (for --where and --columns on config keys)."""
    from .registry import Registry

    registry = Registry(home.registry, create=False)
    try:
        configs = {r["id"]: json.loads(r["config_json"]) for r in registry.query("select id, config_json from experiments")}
    finally:
        registry.close()
    return [{**row, **{k: v for k, v in flatten(configs.get(row["id"], {})).items() if "." in k}} for row in rows]


def filter_rows(rows: list[dict[str, Any]], where: list[str], sort: str | None, limit: int | None) -> list[dict[str, Any]]:
    tests = [predicate(expression) for expression in where]
    rows = [row for row in rows if all(test(row) for test in tests)]
    if sort:
        key, reverse = (sort[1:], True) if sort.startswith("-") else (sort, False)
        if rows and not any(key in row for row in rows):
            raise BadInput(f"--sort {key}: unknown column; use a listing column or a config key such as training.learning_rate")
        present = [r for r in rows if r.get(key) is not None]
        missing = [r for r in rows if r.get(key) is None]
        present.sort(key=lambda r: (_number(r[key]) is None, _number(r[key]) or 0.0, str(r[key])), reverse=reverse)
        rows = present + missing
    if limit is not None:
        if limit < 0:
            raise BadInput(f"--limit {limit}: must not be negative")
        rows = rows[:limit]
    return rows


# ---------------------------------------------------------------------------- curves

MARKERS = "*o+x#@%&"


def chart(title: str, series: dict[str, list[tuple[float, float]]], width: int = 80, height: int = 12,
          hline: tuple[str, float] | None = None) -> str:
    """A plain-ASCII line chart of several series over a shared x axis; fits ``width`` columns."""
    points = [p for values in series.values() for p in values if p[1] is not None and math.isfinite(p[1])]
    if not points:
        return f"{title}: no data\n"
    ys = [y for _, y in points] + ([hline[1]] if hline else [])
    xs = [x for x, _ in points]
    low, high = min(ys), max(ys)
    if high == low:
        high = low + 1.0
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    label_width = 10
    plot_width = width - label_width - 2
    grid = [[" "] * plot_width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int]:
        column = round((x - x0) / (x1 - x0) * (plot_width - 1))
        row = height - 1 - round((y - low) / (high - low) * (height - 1))
        return row, column

    if hline:
        row, _ = cell(x0, hline[1])
        for column in range(plot_width):
            grid[row][column] = "-"
    for index, (name, values) in enumerate(series.items()):
        for x, y in values:
            if y is not None and math.isfinite(y):
                row, column = cell(x, y)
                grid[row][column] = MARKERS[index % len(MARKERS)]
    lines = [title]
    for number, row in enumerate(grid):
        value = high - (high - low) * number / (height - 1)
        label = f"{value:.3g}" if number in (0, height // 2, height - 1) else ""
        lines.append(f"{label:>{label_width}} |" + "".join(row))
    lines.append(" " * label_width + " +" + "-" * plot_width)
    left, right = f"{x0:,.0f}", f"{x1:,.0f} tokens"
    lines.append(" " * (label_width + 2) + left + " " * max(1, plot_width - len(left) - len(right)) + right)
    legend = "   ".join(f"{MARKERS[i % len(MARKERS)]} {name}" for i, name in enumerate(series))
    if hline:
        legend += f"   - {hline[0]}"
    lines.append(" " * (label_width + 2) + legend)
    return "\n".join(line.rstrip() for line in lines) + "\n"


def plots(home: Home, ids: list[str], width: int = 80) -> str:
    records = {experiment_id: runfile.read(home.run_file(experiment_id)) for experiment_id in ids}
    clip = None
    for experiment_id in ids:
        detail_config = detail(home, experiment_id)["config"]
        clip = clip or detail_config.get("training", {}).get("grad_clip")
    out = []
    for metric, title in (("train_loss", "train loss"), ("eval_loss", "eval loss"), ("lr", "learning rate"),
                          ("gradient_norm", "gradient norm (before clipping)")):
        series = {i: [(r.get("tokens", 0), r.get(metric)) for r in recs] for i, recs in records.items()}
        hline = ("clip threshold", clip) if metric == "gradient_norm" and clip else None
        out.append(chart(title, series, width=width, hline=hline))
    return "\n".join(out)
