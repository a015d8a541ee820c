"""Rendering for humans (rich, on stderr or a stdout table) and for scripts (JSON on stdout).

Torch-free. Data goes to stdout; progress, logs and warnings go to stderr. rich drops
colour when the output is not a terminal or ``NO_COLOR`` is set.

Text from users and files (descriptions, paths, configs, error messages) is never markup: every
console here is a ``PlainConsole``, which reads no markup and no emoji codes and passes every string
through ``plain`` (control characters out, lone surrogates replaced), and table cells and titles are
``rich.text.Text`` built by ``plain``. octlm's own styling goes through ``style=``, never markup. Each value is
written as its column's kind says (``formats``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from octlm.cli.formats import TEXT_KINDS, format_cell, kind_of
from octlm.cli.formats import shown_value as shown_value  # for cli/commands/sweeps.py, until it names formats

# C0 and C1 controls (ESC, BEL, CR, backspace, DEL ...) but tab and newline, and the bidirectional
# overrides that make a terminal show text in another order than it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile("[\t\n\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # undecodable bytes of argv or a file: unprintable as UTF-8


def plain(value: Any, multiline: bool = False) -> str:
    """``value`` as text safe to show as it is: control characters removed, lone surrogates as U+FFFD,
    and (unless ``multiline``) tabs and line breaks as spaces, so one value stays one line."""
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable():  # nothing to remove or replace (most cells): no pattern run
        return text
    text = _SURROGATE.sub("\ufffd", text)
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


def terminal() -> bool:
    """Whether stdout is an interactive terminal (rich tables) rather than a pipe or file (plain text)."""
    return sys.stdout.isatty()


def say(text: str) -> None:
    """One sentence on stdout: on a terminal wrapped at words to its width (its later lines indented); in a pipe one
    line, for grep."""
    line = plain(text)
    if terminal():
        import shutil
        import textwrap

        width = shutil.get_terminal_size().columns
        line = textwrap.fill(line, width=max(40, width - 1), subsequent_indent="  ", break_on_hyphens=False)
    print(line)


def emit_json(value: Any) -> None:
    """``value`` as JSON on stdout: valid JSON always (a non-finite number, a diverged run's NaN or a halving rung's
    infinity, is written as null: JSON has no Infinity)."""
    sys.stdout.write(json.dumps(_finite(value), indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _say(text: str, style: str | None = None) -> None:
    """One message on stderr: on a terminal wrapped at words to its width (rich breaks a line only between words, and
    folds only a word longer than a line), never hard-wrapped off a terminal (logs stay greppable); a stderr the
    reader closed (a pipe, a hung-up terminal) is not an error."""
    try:
        if err.is_terminal:
            err.print(text, soft_wrap=False, style=style)
        else:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def error(message: str) -> None:
    _say(f"octlm: error: {plain(message)}")


def warn(message: str) -> None:
    _say(f"octlm: warning: {plain(message)}", style="yellow")


def info(message: str) -> None:
    _say(plain(message, multiline=True))


# ---------------------------------------------------------------- tables

TEXT_MIN = 20  # what a free-text column keeps at least on a narrow terminal


def cells(columns: list[str], rows: Iterable[Iterable[Any]], kinds: list[str] | None = None) -> list[list[str]]:
    """Every cell as the text it is shown as (kinds by column name unless given)."""
    chosen = kinds or [kind_of(c) for c in columns]
    return [[plain(format_cell(k, v)) for k, v in zip(chosen, row, strict=False)] for row in rows]


def plain_table(columns: Iterable[str], rows: Iterable[Iterable[Any]], kinds: list[str] | None = None) -> str:
    """Fixed-width text for pipes and files: fast for thousands of rows, easy to grep and cut."""
    header = [plain(c) for c in columns]
    return _fixed_width(header, cells(header, rows, kinds))


def _fixed_width(header: list[str], body: list[list[str]]) -> str:
    """``plain_table`` of cells already shown as text."""
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in body]
    return "\n".join(lines) + "\n"


def _widths(header: list[str], body: list[list[str]]) -> list[int]:
    return [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]


def needed(header: list[str], body: list[list[str]], kinds: list[str], keep: list[int] | None = None) -> int:
    """The width a rich table needs with every value whole (free text shortened to TEXT_MIN)."""
    widths = _widths(header, body)
    chosen = range(len(header)) if keep is None else keep
    return sum((min(widths[i], TEXT_MIN) if kinds[i] in TEXT_KINDS else widths[i]) + 3 for i in chosen) - 1


def fit(
    header: list[str], body: list[list[str]], kinds: list[str], width: int, droppable: Iterable[str]
) -> tuple[list[int], list[str]]:
    """The indexes of the columns kept to fit ``width`` (dropping ``droppable`` ones, in order) and the
    names of those dropped."""
    keep: list[int] = list(range(len(header)))
    dropped: list[str] = []
    for name in droppable:
        if needed(header, body, kinds, keep) <= width:
            break
        if name in header and header.index(name) in keep:
            keep.remove(header.index(name))
            dropped.append(name)
    return keep, dropped


def rich_table(title: str | None, header: list[str], body: list[list[str]], kinds: list[str], width: int) -> Table:
    """A rich table in which numbers, IDs and names keep their width and only free text gives way
    (with an ellipsis) to what ``width`` leaves it."""
    widths = _widths(header, body)
    fixed = sum(w + 3 for w, k in zip(widths, kinds, strict=True) if k not in TEXT_KINDS) - 1
    texts = [i for i, k in enumerate(kinds) if k in TEXT_KINDS]
    room = max(0, width - fixed - 3 * len(texts))
    shown = Text(plain(title)) if title is not None else None
    result = Table(
        title=shown, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    shares = dict(zip(texts, _shares([widths[i] for i in texts], room), strict=True))
    for index, name in enumerate(header):
        if index in texts:
            result.add_column(Text(name), no_wrap=True, overflow="ellipsis", width=shares[index])
        else:
            result.add_column(Text(name), no_wrap=True, min_width=widths[index], justify=_justify(kinds[index]))
    for row in body:
        result.add_row(*(Text(cell) for cell in row))
    return result


def _shares(wanted: list[int], room: int) -> list[int]:
    """The widths of the free-text columns in ``room``: those narrower than an equal share whole, the room they leave
    shared by the others (so a short description leaves a long verdict its room), none below TEXT_MIN."""
    shares = list(wanted)
    waiting = sorted(range(len(wanted)), key=lambda i: wanted[i])
    while waiting and wanted[waiting[0]] <= room // len(waiting):
        room -= wanted[waiting.pop(0)]
    for index in waiting:
        shares[index] = room // len(waiting)
    return [max(TEXT_MIN, share) for share in shares]


def _justify(kind: str) -> Any:
    return "right" if kind in ("metric", "count", "seconds", "mb", "megabytes") else "left"


def print_table(
    columns: Iterable[str],
    rows: Iterable[Iterable[Any]],
    *,
    title: str | None = None,
    droppable: Iterable[str] = (),
    kinds: list[str] | None = None,
) -> list[str]:
    """A rich table on a terminal (dropping ``droppable`` columns, in order, until it fits, with a note
    on stderr naming them); plain fixed-width text with every column otherwise. Returns the dropped names."""
    header = [plain(c) for c in columns]
    chosen = kinds or [kind_of(c) for c in header]
    body = cells(header, rows, chosen)
    if not terminal():
        if title:
            sys.stdout.write(plain(title) + "\n")
        sys.stdout.write(_fixed_width(header, body))
        return []
    console = out_console()
    keep, dropped = fit(header, body, chosen, console.width, droppable)
    if dropped:
        info(f"note: {console.width} columns: left out {', '.join(dropped)} (widen the terminal, or pipe the output)")
    pick = [header[i] for i in keep], [[row[i] for i in keep] for row in body], [chosen[i] for i in keep]
    if needed(*pick) > console.width:  # still too wide: plain lines, which the terminal wraps but never cuts
        sys.stdout.write((plain(title) + "\n" if title else "") + _fixed_width(*pick[:2]))
        return dropped
    console.print(rich_table(title, *pick, console.width))
    return dropped


def print_pairs(title: str, pairs: Iterable[tuple[str, Any]]) -> None:
    """``key: value`` lines: a rich two-column grid on a terminal, plain lines otherwise; values never cut
    (a long value wraps on a terminal)."""
    items = [(plain(k), plain(format_cell(kind_of(k), v))) for k, v in pairs]
    if not terminal():
        sys.stdout.write(plain(title) + "\n" + "".join(f"  {k}: {v}\n" for k, v in items))
        return
    result = Table(title=Text(plain(title)), title_justify="left", show_header=False, box=None, pad_edge=False)
    result.add_column("key", style="bold", no_wrap=True)
    result.add_column("value", overflow="fold")
    for key, value in items:
        result.add_row(Text(key), Text(value))
    out_console().print(result)
