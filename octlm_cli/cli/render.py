"""Rendering for humans (rich, on stderr or a stdout table) and for scripts (JSON on stdout).

Torch-free. Data goes to stdout; progress, logs and warnings go to stderr. rich drops
colour when the output is not a terminal or ``NO_COLOR`` is set.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

err = Console(stderr=True, highlight=False)


def out_console() -> Console:
    # Piped output is for grep and less, not an 80-column screen: let tables keep their width.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "200"))
    return Console(highlight=False, soft_wrap=False, width=width)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def error(message: str) -> None:
    err.print(f"octlm: error: {message}", markup=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"octlm: warning: {message}", markup=False, soft_wrap=True, style="yellow")


def info(message: str) -> None:
    err.print(message, markup=False, soft_wrap=True)


def fmt(value: Any, digits: int = 4) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        if value != 0 and not 0.01 <= abs(value) < 1e5:
            return f"{value:.{digits}g}"
        return f"{value:.{digits}f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    result = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        result.add_column(column, overflow="fold")
    for row in rows:
        result.add_row(*(fmt(cell) for cell in row))
    return result


def plain_table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """Fixed-width text for pipes and files: fast for thousands of rows, easy to grep and cut."""
    header = list(columns)
    body = [[fmt(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines) + "\n"


def print_table(columns: Iterable[str], rows: Iterable[Iterable[Any]], *, title: str | None = None) -> None:
    """A rich table on a terminal; plain fixed-width text otherwise."""
    if sys.stdout.isatty():
        out_console().print(table(title, columns, rows))
    else:
        if title:
            sys.stdout.write(title + "\n")
        sys.stdout.write(plain_table(columns, rows))


def key_values(title: str, pairs: Iterable[tuple[str, Any]]) -> Table:
    result = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    result.add_column("key", style="bold")
    result.add_column("value", overflow="fold")
    for key, value in pairs:
        result.add_row(key, fmt(value))
    return result
