"""The Typer app: the one place that creates it and registers every command.

Commands are thin: they parse options, call one use case and render the result.
Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state.
Torch and tokenizers are imported only inside the commands that train or sample, so
``octlm --help``, ``octlm show`` and ``octlm new`` start fast. The command modules import
``common`` and never this module, so the CLI has no import cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from .. import __version__
from . import commands_config, commands_experiments, commands_lifecycle, commands_tools, commands_training, render
from .common import OctlmGroup, StrictCommand

HELP = (
    "Train miniature decoder-only language models with a loop that resumes exactly, and prove it.\n\n"
    "Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state."
)
HomeOption = Annotated[
    str | None,
    typer.Option(
        "--home",
        metavar="DIR",
        help="Home folder (default: OCTLM_HOME, else the nearest folder with experiments/ or registry.db, "
        "else the current one).",
        show_default=False,
    ),
]


def _version(value: bool) -> None:
    if value:
        print(f"octlm {__version__}")
        raise typer.Exit()


VersionOption = Annotated[
    bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
]


def _root(ctx: typer.Context, home: HomeOption = None, version: VersionOption = False) -> None:
    ctx.obj = {"home": home}  # read by common.home_of


def _typer(**options: Any) -> typer.Typer:
    return typer.Typer(
        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
        cls=OctlmGroup, **options,
    )  # fmt: skip


COMMANDS: dict[str, Callable[..., Any]] = {  # in the order `octlm --help` lists them
    "new": commands_lifecycle.new,
    "show": commands_experiments.show,
    "train": commands_training.train,
    "resume": commands_training.resume,
    "verify-resume": commands_training.verify_resume,
    "overfit": commands_training.overfit,
    "sample": commands_training.sample,
    "doctor": commands_tools.doctor,
    "bench": commands_tools.bench,
    **commands_lifecycle.COMMANDS,
}
CONFIG_COMMANDS: dict[str, Callable[..., Any]] = {"keys": commands_config.keys}

app = _typer(name="octlm", help=HELP)
app.callback()(_root)
for name, command in COMMANDS.items():
    app.command(name, cls=StrictCommand)(command)  # every option checked: finite, within limits, UTF-8
config_app = _typer(name="config", help="Describe the experiment config.")
for name, command in CONFIG_COMMANDS.items():
    config_app.command(name, cls=StrictCommand)(command)
app.add_typer(config_app)


def main() -> None:
    try:
        app()  # OctlmGroup.main exits through common.finish: stdout flushed, a closed pipe taken quietly
    except KeyboardInterrupt:  # outside a training loop (which handles it itself)
        render.error("interrupted")
        sys.exit(130)
