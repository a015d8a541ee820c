"""What every command module shares: the error handling (``handled``), the home from ``ctx.obj``, the option
aliases and their shell completion, and how the process ends (``finish``). Imports nothing from ``app.py``, which
registers the commands and holds the classes that check their options.

Every way a command can end maps to one line on stderr and an exit code, never a traceback: domain
errors (their own code), bad option values (2, checked for every option of every command by ``app``: finite
numbers, integers within their limit, text that is valid UTF-8), numbers too large, undecodable
text, allocation failures (3), and a reader who closed stdout (``octlm show | head``: quietly, 0).
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from octlm.cli import render
from octlm.core.errors import BAD_INPUT, REFUSED, OctlmError, Relayed
from octlm.core.home import Home
from octlm.core.mounts import unfamiliar
from octlm.core.signals import SIGNAL_EXIT

F = TypeVar("F", bound=Callable[..., Any])
OUT_OF_MEMORY = "out of memory{}: lower training.batch_size, model.context_length or the model's size"


# ---------------------------------------------------------------- shell completion (torch-free, no registry)


def complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Experiment IDs for shell completion: the names of ``experiments/*.yaml`` in the home."""
    try:
        root = ctx.find_root()
        home = Home.locate(root.params.get("home") or (root.obj or {}).get("home"))
        names = sorted(path.stem for path in home.experiments.glob("*.yaml"))
    except (OSError, OctlmError, ValueError):
        return []
    return [name for name in names if name.upper().startswith(incomplete.upper())]


def complete_set_keys(incomplete: str) -> list[str]:
    """``--set`` keys for shell completion, as ``KEY=`` (every key ``octlm config keys`` lists)."""
    from octlm.config import describe_keys

    if "=" in incomplete:
        return []
    return [f"{item['key']}=" for item in describe_keys() if str(item["key"]).startswith(incomplete)]


# Options shared by several commands.
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a config key: SECTION.KEY=VALUE (repeatable; `octlm config keys` lists them).",
        show_default=False,
        autocompletion=complete_set_keys,
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
IdArgument = Annotated[
    str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.", autocompletion=complete_ids)
]


def home_of(ctx: typer.Context) -> Home:
    """The home folder: the root ``--home`` option (kept in ``ctx.obj`` by the root callback), else located. A home
    on a filesystem octlm does not know is said once per process (``mounts.unfamiliar``)."""
    home = Home.locate((ctx.obj or {}).get("home"))
    if home.root not in _TOLD:
        _TOLD.add(home.root)
        warning = unfamiliar(home.root)
        if warning:
            render.warn(warning)
    return home


_TOLD: set[Path] = set()  # the homes whose filesystem was looked at in this process


def finish(code: int) -> None:
    """Exit with ``code`` after flushing stdout and stderr; a reader who left (a closed pipe) costs nothing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            _silence(stream)
    sys.exit(code)


def _silence(stream: Any) -> None:
    """Send whatever ``stream`` still holds to /dev/null (Python flushes it again at exit, and would fail)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# ---------------------------------------------------------------- errors


def handled(fn: F) -> F:
    """Map domain errors to one line on stderr and their exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (OctlmError, MemoryError, RuntimeError, OSError, sqlite3.Error, ValueError, ArithmeticError) as exc:
            code = report(exc)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return cast(F, wrapper)


def report(exc: BaseException) -> int | None:
    """Say what went wrong in one line on stderr and return the exit code; None: not ours to handle."""
    if isinstance(exc, Relayed):  # a rank other than 0 ends as rank 0 told it: rank 0 says why and gives the code
        return 0
    if isinstance(exc, OctlmError):
        if exc.exit_code in SIGNAL_EXIT.values():  # stopped by a signal: a note, not an error
            render.info(f"octlm: {exc}")
        else:
            render.error(str(exc))
        return exc.exit_code
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:  # `octlm show | head`: the reader left
        _silence(sys.stdout)
        return 0
    if isinstance(exc, (MemoryError, RuntimeError)):
        return _resources(exc)
    if isinstance(exc, OSError):  # a full disk, a vanished folder: one line, existing state untouched
        where = f": {exc.filename}" if exc.filename else ""
        render.error(f"{exc.strerror or exc}{where}; nothing already written was changed")
    elif isinstance(exc, sqlite3.Error):
        render.error(f"registry error: {exc}")
    else:
        return _bad_value(exc)
    return REFUSED


def _resources(exc: BaseException) -> int | None:
    """Allocation failures (MemoryError; torch's "can't allocate memory" on a CPU, OutOfMemoryError on a GPU)."""
    text = str(exc).lower()
    if isinstance(exc, RecursionError):
        render.error("input nested too deeply to read")
        return BAD_INPUT
    if isinstance(exc, MemoryError) or "can't allocate memory" in text:
        render.error(OUT_OF_MEMORY.format(""))
    elif type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text:
        render.error(OUT_OF_MEMORY.format(" on the device"))
    else:
        return None
    return REFUSED


def _bad_value(exc: BaseException) -> int | None:
    """Values octlm was given that it cannot use: undecodable text, numbers too large, malformed values."""
    if isinstance(exc, UnicodeError):
        render.error(f"text that is not valid UTF-8 ({getattr(exc, 'reason', exc)}): give it in UTF-8")
    elif isinstance(exc, OverflowError):
        render.error(f"a number too large to use ({exc}): lower it")
    elif isinstance(exc, (ValueError, ArithmeticError)):
        render.error(f"bad value: {str(exc)[:300]}")
    else:
        return None
    return BAD_INPUT
