"""What every command module shares: the error handling (``handled``), the home from ``ctx.obj`` and
the option aliases. Imports nothing from ``app.py``, which registers the commands."""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast

import typer

from ..errors import REFUSED, OctlmError
from ..home import Home
from . import render

F = TypeVar("F", bound=Callable[..., Any])
OUT_OF_MEMORY = "out of memory{}: lower training.batch_size, model.context_length or the model's size"

# Options shared by several commands.
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE", help="Override a config key: SECTION.KEY=VALUE (repeatable).", show_default=False
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Write machine-readable JSON on stdout.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output on stderr.")]
UntilOption = Annotated[
    int | None,
    typer.Option(
        "--until",
        metavar="N",
        help="Stop after this step (writing a checkpoint there); default: training.steps.",
        show_default=False,
    ),
]
IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")]


def home_of(ctx: typer.Context) -> Home:
    """The home folder: the root ``--home`` option (kept in ``ctx.obj`` by the root callback), else located."""
    return Home.locate((ctx.obj or {}).get("home"))


def handled(fn: F) -> F:
    """Map domain errors to one line on stderr and their exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OctlmError, MemoryError, RuntimeError, OSError, sqlite3.Error) as exc:
            code = report(exc)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return cast(F, wrapper)


def report(exc: BaseException) -> int | None:
    """Say what went wrong in one line on stderr and return the exit code; None: not ours to handle."""
    if isinstance(exc, OctlmError):
        if exc.exit_code in (130, 143):  # stopped by a signal: a note, not an error
            render.info(f"octlm: {exc}")
        else:
            render.error(str(exc))
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):  # `octlm show | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if isinstance(exc, MemoryError):
        render.error(OUT_OF_MEMORY.format(""))
    elif isinstance(exc, RuntimeError):  # torch reports running out of device memory as a RuntimeError
        if "out of memory" not in str(exc).lower():
            return None
        render.error(OUT_OF_MEMORY.format(" on the device"))
    elif isinstance(exc, OSError):  # a full disk, a vanished folder: one line, existing state untouched
        where = f": {exc.filename}" if exc.filename else ""
        render.error(f"{exc.strerror or exc}{where}; nothing already written was changed")
    elif isinstance(exc, sqlite3.Error):
        render.error(f"registry error: {exc}")
    else:
        return None
    return REFUSED
