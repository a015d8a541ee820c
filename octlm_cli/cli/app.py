"""The Typer app: thin commands that parse options, call one use case and render the result.

Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state.
Torch and tokenizers are imported only inside the commands that train or sample, so
``octlm --help``, ``octlm show`` and ``octlm new`` start fast.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from typing import Annotated, Any, Callable, Optional

import typer

from .. import __version__
from ..errors import REFUSED, OctlmError
from ..home import Home
from . import render

app = typer.Typer(
    name="octlm",
    help="Train miniature decoder-only language models with a loop that resumes exactly, and prove it.\n\n"
    "Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class State:
    home_option: Optional[str] = None

    @property
    def home(self) -> Home:
        return Home.locate(self.home_option)


state = State()


def _version(value: bool) -> None:
    if value:
        print(f"octlm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    home: Annotated[Optional[str], typer.Option("--home", metavar="DIR", help="Home folder (default: OCTLM_HOME, else the nearest folder with experiments/ or registry.db, else the current one).", show_default=False)] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    state.home_option = home


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map domain errors to one line on stderr and their exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OctlmError as exc:
            if exc.exit_code in (130, 143):
                render.info(f"octlm: {exc}")
            else:
                render.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except BrokenPipeError:  # `octlm show | head`: the reader left; say nothing more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except MemoryError:
            render.error("out of memory: lower training.batch_size, model.context_length or the model's size")
            raise typer.Exit(REFUSED) from None
        except RuntimeError as exc:  # torch reports running out of device memory as a RuntimeError
            if "out of memory" not in str(exc).lower():
                raise
            render.error("out of memory on the device: lower training.batch_size, model.context_length or the model's size")
            raise typer.Exit(REFUSED) from None
        except OSError as exc:  # a full disk, a vanished folder: one line, existing state untouched
            where = f": {exc.filename}" if exc.filename else ""
            render.error(f"{exc.strerror or exc}{where}; nothing already written was changed")
            raise typer.Exit(REFUSED) from None
        except sqlite3.Error as exc:
            render.error(f"registry error: {exc}")
            raise typer.Exit(REFUSED) from None

    return wrapper


# Options shared by several commands.
SetOption = Annotated[Optional[list[str]], typer.Option("--set", metavar="KEY=VALUE", help="Override a config key: SECTION.KEY=VALUE (repeatable).", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Write machine-readable JSON on stdout.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output on stderr.")]
UntilOption = Annotated[Optional[int], typer.Option("--until", metavar="N", help="Stop after this step (writing a checkpoint there); default: training.steps.", show_default=False)]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # outside a training loop (which handles it itself)
        render.error("interrupted")
        sys.exit(130)


# Each module below registers its commands on ``app`` when imported.
from . import commands_experiments  # noqa: E402,F401  (new, show)
from . import commands_training  # noqa: E402,F401  (train, resume, verify-resume, overfit, sample)
from . import commands_tools  # noqa: E402,F401  (doctor, bench)
