"""Rendering for humans (rich, on stderr or a stdout table) and for scripts (JSON on stdout).

Torch-free. Data goes to stdout; progress, logs and warnings go to stderr. rich drops
colour when the output is not a terminal or ``NO_COLOR`` is set.

Text from users and files (descriptions, paths, configs, error messages) is never markup: every
console here is a ``PlainConsole``, which reads no markup and no emoji codes and passes every string
through ``plain`` (control characters out, lone surrogates replaced), and table cells and titles are
``rich.text.Text`` built by ``plain``. octlm's own styling goes through ``style=``, never markup.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 and C1 controls (ESC, BEL, CR, backspace, DEL ...) but tab and newline, and the bidirectional
# overrides that make a terminal show text in another order than it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile("[\t\n\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # undecodable bytes of argv or a file: unprintable as UTF-8


def plain(value: Any, multiline: bool = False) -> str:
    """``value`` as text safe to show as it is: control characters removed, lone surrogates as U+FFFD,
    and (unless ``multiline``) tabs and line breaks as spaces, so one value stays one line."""
    text = _SURROGATE.sub("\ufffd", value if isinstance(value, str) else str(value))
    return _CONTROL.sub("", text if multiline else _BREAKS.sub(" ", text))


class PlainConsole(Console):
    """A rich console for which every string is plain text: no markup, no emoji codes, no controls.
    A closed pipe raises ``BrokenPipeError`` for the caller (rich's own answer is exit 1)."""

    def __init__(self, **options: Any):
        super().__init__(**{"highlight": False, **options, "markup": False, "emoji": False})

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(plain(text, multiline=True), **{**options, "markup": False, "emoji": False})

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


err = PlainConsole(stderr=True)


def out_console() -> Console:
    # Piped output is for grep and less, not an 80-column screen: let tables keep their width.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "200"))
    return PlainConsole(soft_wrap=False, width=width)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def _say(text: str, style: str | None = None) -> None:
    """One message on stderr; a stderr the reader closed (a pipe, a hung-up terminal) is not an error."""
    try:
        err.print(text, soft_wrap=True, style=style)
    except OSError:
        pass


def error(message: str) -> None:
    _say(f"octlm: error: {plain(message)}")


def warn(message: str) -> None:
    _say(f"octlm: warning: {plain(message)}", style="yellow")


def info(message: str) -> None:
    _say(plain(message, multiline=True))


def fmt(value: Any, digits: int = 4) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        if value != 0 and not 0.01 <= abs(value) < 1e5:
            return f"{value:.{digits}g}"
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.{digits}f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


TEXT_COLUMNS = ("description", "detail", "command", "path", "summary", "verdict", "where", "help", "")


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """Numbers and IDs never wrap; on a narrow terminal the text columns give way, with an ellipsis."""
    shown = Text(plain(title)) if title is not None else None
    result = Table(title=shown, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for column in columns:
        text = column in TEXT_COLUMNS
        result.add_column(column, no_wrap=not text, overflow="ellipsis" if text else "fold", ratio=1 if text else None)
    for row in rows:
        result.add_row(*(Text(plain(fmt(cell))) for cell in row))
    return result


def plain_table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """Fixed-width text for pipes and files: fast for thousands of rows, easy to grep and cut."""
    header = list(columns)
    body = [[plain(fmt(cell)) for cell in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in body]
    return "\n".join(lines) + "\n"


def _fit(
    columns: list[str], rows: list[list[Any]], width: int, droppable: Iterable[str]
) -> tuple[list[str], list[list[Any]]]:
    """Drop the least important columns until the table fits ``width`` (text columns may still shrink)."""
    text_width = 24  # what a shrinkable text column is allowed to keep

    def natural() -> int:
        widths = []
        for index, name in enumerate(columns):
            cells = [len(fmt(row[index])) for row in rows]
            w = max([len(name), *cells])
            widths.append(min(w, text_width) if name in TEXT_COLUMNS else w)
        return sum(widths) + 2 * len(widths) + 2

    for name in droppable:
        if natural() <= width:
            break
        if name in columns:
            index = columns.index(name)
            columns = columns[:index] + columns[index + 1 :]
            rows = [row[:index] + row[index + 1 :] for row in rows]
    return columns, rows


def print_table(
    columns: Iterable[str], rows: Iterable[Iterable[Any]], *, title: str | None = None, droppable: Iterable[str] = ()
) -> None:
    """A rich table on a terminal (dropping ``droppable`` columns, in order, until it fits);
    plain fixed-width text with every column otherwise."""
    if sys.stdout.isatty():
        console = out_console()
        names, body = _fit(list(columns), [list(row) for row in rows], console.width, droppable)
        console.print(table(title, names, body))
    else:
        if title:
            sys.stdout.write(plain(title) + "\n")
        sys.stdout.write(plain_table(columns, rows))


def key_values(title: str, pairs: Iterable[tuple[str, Any]]) -> Table:
    result = Table(title=Text(plain(title)), title_justify="left", show_header=False, box=None, pad_edge=False)
    result.add_column("key", style="bold")
    result.add_column("value", overflow="fold")
    for key, value in pairs:
        result.add_row(Text(plain(key)), Text(plain(fmt(value))))
    return result
