"""What ``--where``, ``--sort``, ``--limit`` and ``--columns`` make of the list's rows (torch-free), over the keys of
the column spec (``columns``), the fields of a run's newest record, and the config's keys. Filters are Python
predicates over the rows, never SQL; a key none of them names is BadInput before anything is read.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from octlm.config import describe_keys
from octlm.core.errors import BadInput
from octlm.core.records.freeform import TableRow
from octlm.views.listing import columns as column_spec
from octlm.views.listing.columns import ListedRow

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "!=": operator.ne,
    "==": operator.eq,
    "=": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
    "~": operator.contains,
}
WHERE = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(==|!=|<=|>=|=|<|>|~)\s*(.*?)\s*")
WHERE_HELP = (
    "KEY OP VALUE, KEY a listing column, a field of the run's newest record or a config key, "
    "OP one of == (or =), !=, <, <=, >, >=, ~ (contains)"
)
KNOWN = (
    f"a listing column ({', '.join(column_spec.KEYS)}), a field of the run's newest record "
    f"({', '.join(column_spec.FIGURES)}) or a config key (`octlm config keys`)"
)


def parse_columns(text: str | None) -> list[str] | None:
    """``--columns eval_loss,model.n_layers`` as a list (None: the default columns)."""
    return [column.strip() for column in text.split(",")] if text else None


def known(key: str) -> bool:
    """A column of the spec, a field of a run's newest record, or a config key."""
    return key in column_spec.BY_KEY or key in column_spec.FIGURES or key in config_keys()


def header(columns: list[str] | None) -> list[str]:
    """The columns a listing shows: ``id`` first, then the chosen ones (default: the spec's, in its order)."""
    if not columns:
        return list(column_spec.KEYS)
    unknown = [c for c in columns if not known(c)]
    if unknown:
        raise BadInput(f"--columns {unknown[0]}: unknown column; choose {KNOWN}")
    return ["id", *[c for c in columns if c != "id"]]


def project(found: list[TableRow], columns: list[str] | None) -> list[TableRow]:
    chosen = header(columns)
    return [{c: row.get(c) for c in chosen} for row in found]


def _as_float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def config_keys() -> dict[str, str]:
    """{config key: its type} (``training.steps``: ``int``)."""
    return {item["key"]: str(item["type"]) for item in describe_keys()}


def parse_where(expression: str) -> tuple[str, str, str]:
    """``(key, op, value)`` of a ``--where`` expression; BadInput naming what is wrong with it."""
    match = WHERE.fullmatch(expression)
    if not match:
        raise BadInput(f"--where {expression!r}: expected {WHERE_HELP}")
    key, op, raw = match.groups()
    if raw == "" or raw[0] in "<>=!~":
        raise BadInput(f"--where {expression!r}: malformed value {raw!r} after {op!r}; expected {WHERE_HELP}")
    if not known(key):
        raise BadInput(f"--where {key}: unknown key; use {KNOWN}")
    numeric = column_spec.numeric(key) or config_keys().get(key) in ("int", "float")
    if numeric and op not in ("~",) and _as_float(raw) is None:
        raise BadInput(f"--where {expression!r}: {key} is a number; {raw!r} is not")
    return key, "==" if op == "=" else op, raw


def predicate(expression: str) -> Callable[[ListedRow], bool]:
    """``eval_loss<2.5``, ``status=completed``, ``model.n_layers==4``, ``description~lr``: a Python predicate,
    never SQL. A number given with decimals matches at that precision (``eval_loss==4.39`` matches 4.3912)."""
    key, op, raw = parse_where(expression)
    wanted = _as_float(raw)

    def test(row: ListedRow) -> bool:
        value = row.get(key)
        if value is None:
            return op == "!="
        if isinstance(value, list):
            return _any_item(op, raw, value)
        have = _as_float(value) if not isinstance(value, bool) else None
        if op == "~":
            return raw.lower() in _compared_text(value).lower()
        if wanted is not None and have is not None:
            return _compare_numbers(op, have, wanted, raw)
        return bool(OPERATORS[op](_compared_text(value), raw))  # text: equal, or in order (an ID, a date)

    return test


def _compared_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _any_item(op: str, raw: str, items: list[Any]) -> bool:
    """A list (tags): ``==`` one item is ``raw``, ``!=`` none is, ``~`` one contains it."""
    texts = [_compared_text(item) for item in items]
    if op == "~":
        return any(raw.lower() in t.lower() for t in texts)
    return (raw in texts) if op != "!=" else raw not in texts


def _compare_numbers(op: str, have: float, wanted: float, raw: str) -> bool:
    if op in ("==", "!=") and "." in raw and "e" not in raw.lower():
        decimals = len(raw.split(".", 1)[1])
        same = abs(have - wanted) <= 0.5 * 10**-decimals + 1e-12
        return same if op == "==" else not same
    return bool(OPERATORS[op](have, wanted))


def filter_rows(found: list[TableRow], where: list[str], sort: str | None, limit: int | None) -> list[TableRow]:
    tests = [predicate(expression) for expression in where]
    found = [row for row in found if all(test(row) for test in tests)]
    if sort:
        found = sort_rows(found, sort)
    if limit is not None:
        if limit < 0:
            raise BadInput(f"--limit {limit}: must not be negative")
        found = found[:limit]
    return found


def sort_rows(found: list[TableRow], sort: str) -> list[TableRow]:
    """Sort by a column, a record field or a config key (``-key``: descending); rows without the key go last."""
    key, reverse = (sort[1:], True) if sort.startswith("-") else (sort, False)
    if not known(key):
        raise BadInput(f"--sort {key}: unknown column; use {KNOWN}")
    present = [r for r in found if r.get(key) is not None]
    missing = [r for r in found if r.get(key) is None]
    present.sort(key=lambda r: (_as_float(r[key]) is None, _as_float(r[key]) or 0.0, str(r[key])), reverse=reverse)
    return present + missing
