"""What every command module shares: the error handling (``handled``), strict option parsing
(``StrictCommand``, ``OctlmGroup``), the home from ``ctx.obj`` and the option aliases. Imports nothing
from ``app.py``, which registers the commands.

Every way a command can end maps to one line on stderr and an exit code, never a traceback: domain
errors (their own code), bad option values (2, checked for every option of every command: finite
numbers, integers within their limit, text that is valid UTF-8), numbers too large, undecodable
text, allocation failures (3), and a reader who closed stdout (``octlm show | head``: quietly, 0).
"""

from __future__ import annotations

import errno
import functools
import inspect
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer
from typer.core import TyperCommand, TyperGroup

from octlm.cli import render
from octlm.config.validation import shown
from octlm.core.errors import BAD_INPUT, REFUSED, BadInput, OctlmError, Relayed
from octlm.core.home import Home
from octlm.core.mounts import unfamiliar
from octlm.core.signals import SIGNAL_EXIT

F = TypeVar("F", bound=Callable[..., Any])
OUT_OF_MEMORY = "out of memory{}: lower training.batch_size, model.context_length or the model's size"
# Upper limits of options, by parameter name, in every command (and 2**63 for any integer): generous,
# but below where torch, an allocation or a loop over them would fail or run for ever.
OPTION_LIMITS: dict[str, float] = {
    "steps": 10**9,
    "until": 10**9,
    "step": 10**9,
    "limit": 10**9,
    "max_new_tokens": 100_000,
    "top_k": 2**20,
    "temperature": 1000.0,
    "max_loss": 1e6,
}
PATH_OPTIONS = frozenset({"home"})  # a path may hold any bytes the filesystem allows


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


# ---------------------------------------------------------------- strict options


def check_option(name: str, flag: str, value: Any) -> None:
    """BadInput naming ``flag`` unless ``value`` is finite, within its limit and valid UTF-8 text."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise BadInput(f"{flag} {item}: must be a finite number")
        limit = OPTION_LIMITS.get(name, 2**63 - 1)
        if isinstance(item, (int, float)) and item > limit:
            raise BadInput(f"{flag} {shown(item)}: must be at most {limit:,}")
        if isinstance(item, (int, float)) and item < -(2**63):
            raise BadInput(f"{flag} {shown(item)}: must be at least {-(2**63):,}")
        if isinstance(item, str) and name not in PATH_OPTIONS and any("\ud800" <= c <= "\udfff" for c in item):
            raise BadInput(f"{flag}: not valid UTF-8 text (undecodable bytes); give it in UTF-8")


class StrictCommand(TyperCommand):
    """A command whose every option value is checked (``check_option``) once parsed, before it runs; its
    help reads as a person writes it (``ID``, ``[ID]...``, no Python types) and ends with its examples."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [usage_name(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        params = self.get_params(ctx)
        arguments = [p for p in params if p.param_type_name == "argument" and not getattr(p, "hidden", False)]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl([(usage_name(p).strip("[]."), getattr(p, "help", None) or "") for p in arguments])
        options = [p.get_help_record(ctx) for p in params if p.param_type_name == "option"]
        if any(options):
            with formatter.section("Options"):
                formatter.write_dl([record for record in options if record])

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        write_examples(self.epilog, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        for param in self.get_params(ctx):
            option = param.param_type_name == "option"
            flag = max(param.opts, key=len) if option else str(getattr(param, "human_readable_name", param.name))
            check_option(param.name or "", flag, ctx.params.get(param.name or ""))
        return rest


def usage_name(param: Any) -> str:
    """An argument as the usage line shows it: ``ID`` (required), ``[ID]`` (optional), ``[ID]...`` (several)."""
    name = str(param.metavar or (param.name or "").upper())
    if name.startswith("["):
        return name
    many = "..." if param.nargs != 1 else ""
    return f"{name}{many}" if param.required else f"[{name}]{many}"


def summary(help_text: str | None) -> str:
    """A command's first paragraph, whole, as one line (``octlm --help`` never cuts it with ``...``)."""
    return " ".join(inspect.cleandoc(help_text or "").split("\n\n")[0].split())


def write_examples(epilog: str | None, formatter: Any) -> None:
    """The ``Examples:`` section: one command a line, as written (never re-wrapped)."""
    if not epilog:
        return
    formatter.write_paragraph()
    formatter.write("Examples:\n")
    for line in epilog.splitlines():
        formatter.write(f"  {line}\n" if line.strip() else "\n")


# The panels `octlm --help` lists its commands in, in order: where a user looks for each.
PANELS: dict[str, tuple[str, ...]] = {
    "Experiments": ("new", "show", "tag", "note", "archive", "unarchive", "rm"),
    "Training": ("train", "resume", "verify-resume", "overfit", "eval", "sample"),
    "Many runs": ("sweep", "work", "watch"),
    "Moving runs": ("pack", "unpack", "registry", "export"),
    "Tools": ("report", "bench", "canary", "prepare", "doctor", "config"),
}


class OctlmGroup(TyperGroup):
    """The root group: usage errors as one line (``octlm: error: ...``) with exit 2, and stdout flushed
    at the end with a closed pipe taken quietly, so no run of octlm ends in a traceback; its help lists the commands
    in ``PANELS`` (a group below it, such as ``sweep``, lists its own as they are)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        if ctx.parent is not None:
            super().format_commands(ctx, formatter)
            return
        known = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        shown = [name for names in PANELS.values() for name in names]
        panels = {**PANELS, "Other": tuple(name for name in known if name not in shown)}
        for panel, names in panels.items():
            rows = [(name, command.get_short_help_str()) for name in names if (command := known.get(name)) is not None]
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        write_examples(self.epilog, formatter)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
            code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        except typer.TyperException as error:
            code = _usage_error(error)
        except typer.Abort:
            render.error("aborted")
            code = 1
        except OctlmError as error:  # a bad option value found by StrictCommand
            code = report(error) or 1
        if not standalone_mode:
            return code
        finish(code)


def _usage_error(error: typer.TyperException) -> int:
    if type(error).__name__ == "NoArgsIsHelpError":  # a bare `octlm`: the help, as usual
        show = getattr(error, "show", None)
        if show is not None:
            show()
    else:
        ctx = getattr(error, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        render.error(error.format_message() + hint)
    return int(getattr(error, "exit_code", BAD_INPUT))


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
