"""The experiment list of ``octlm show``: its rows, ``--where`` filters, ``--sort``, ``--limit`` and ``--columns``.

Torch-free. Filters are Python predicates over the rows, never SQL.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from . import experiments
from .config import flatten
from .errors import BadInput
from .home import Home
from .registry import Registry

LIST_COLUMNS = (
    "id", "description", "status", "step", "steps", "train_loss", "eval_loss",
    "perplexity", "bits_per_byte", "tokens", "last_verdict", "updated",
)  # fmt: skip
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "=": operator.eq, "<": operator.lt, ">": operator.gt,
}  # fmt: skip
WHERE = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*")
Row = dict[str, Any]


def rows(home: Home) -> list[Row]:
    """One row per experiment (registered or only a file), by ID, with every listing column."""
    with Registry(home.registry, create=False) as registry:
        summaries = registry.summary_rows()
        running = {row["experiment_id"]: row["status"] for row in registry.running_runs()}
    out = [
        {key: row.get(key) for key in LIST_COLUMNS} | {"status": running.get(row["id"], row["status"] or "new")}
        for row in summaries
    ]
    for missing in experiments.unregistered_files(home, {row["id"] for row in summaries}):
        out.append({key: None for key in LIST_COLUMNS} | {"id": missing, "status": "new"})
    out.sort(key=lambda row: str(row["id"]))
    return out


def select(
    home: Home, *, where: list[str], sort: str | None, limit: int | None, columns: list[str] | None
) -> list[Row]:
    """The rows ``octlm show`` lists: filtered, sorted, cut to ``limit`` and to ``columns`` (default LIST_COLUMNS)."""
    found = rows(home)
    if any("." in text for text in [*where, sort or "", *(columns or [])]):
        found = with_config(home, found)
    found = filter_rows(found, where, sort, limit)
    return project(found, columns)


def parse_columns(text: str | None) -> list[str] | None:
    """``--columns eval_loss,model.n_layers`` as a list (None: the default columns)."""
    return [column.strip() for column in text.split(",")] if text else None


def header(columns: list[str] | None) -> list[str]:
    """The columns a listing shows: ``id`` first, then the chosen ones (default: LIST_COLUMNS)."""
    if not columns:
        return list(LIST_COLUMNS)
    unknown = [c for c in columns if c not in LIST_COLUMNS and "." not in c]
    if unknown:
        raise BadInput(f"--columns {unknown[0]}: unknown column; choose from {', '.join(LIST_COLUMNS)} or a config key")
    return ["id", *[c for c in columns if c != "id"]]


def project(found: list[Row], columns: list[str] | None) -> list[Row]:
    chosen = header(columns)
    return [{c: row.get(c) for c in chosen} for row in found]


def with_config(home: Home, found: list[Row]) -> list[Row]:
    """Add flattened config keys to listing rows (for --where and --columns on config keys)."""
    with Registry(home.registry, create=False) as registry:
        configs = registry.configs()
    return [{**row, **{k: v for k, v in flatten(configs.get(row["id"], {})).items() if "." in k}} for row in found]


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def predicate(expression: str) -> Callable[[Row], bool]:
    """``eval_loss<2.5``, ``status=completed``, ``model.n_layers=4``: a Python predicate, never SQL."""
    match = WHERE.fullmatch(expression)
    if not match:
        raise BadInput(f"--where {expression!r}: expected KEY OP VALUE with OP one of <, <=, =, !=, >=, >")
    key, op, raw = match.groups()
    compare_with = OPERATORS[op]
    wanted_number = _number(raw)

    def test(row: Row) -> bool:
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


def filter_rows(found: list[Row], where: list[str], sort: str | None, limit: int | None) -> list[Row]:
    tests = [predicate(expression) for expression in where]
    found = [row for row in found if all(test(row) for test in tests)]
    if sort:
        found = sort_rows(found, sort)
    if limit is not None:
        if limit < 0:
            raise BadInput(f"--limit {limit}: must not be negative")
        found = found[:limit]
    return found


def sort_rows(found: list[Row], sort: str) -> list[Row]:
    """Sort by a column or config key (``-key``: descending); rows without the key go last."""
    key, reverse = (sort[1:], True) if sort.startswith("-") else (sort, False)
    if found and not any(key in row for row in found):
        raise BadInput(
            f"--sort {key}: unknown column; use a listing column or a config key such as training.learning_rate"
        )
    present = [r for r in found if r.get(key) is not None]
    missing = [r for r in found if r.get(key) is None]
    present.sort(key=lambda r: (_number(r[key]) is None, _number(r[key]) or 0.0, str(r[key])), reverse=reverse)
    return present + missing
