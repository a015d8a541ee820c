"""Commands of an experiment's lifecycle: ``new`` (and, as they come, removing, archiving, tagging and
noting experiments). Torch-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from .. import experiments
from ..presets import DESCRIPTIONS
from . import render
from .common import JsonOption, SetOption, handled, home_of

NewIdArgument = Annotated[
    str | None,
    typer.Argument(metavar="[ID]", help="EXP-<digits>; omitted: the next free EXP-NNN.", show_default=False),
]
PresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        metavar="NAME",
        help="Start from a preset (default day1). " + "; ".join(f"{n}: {t}" for n, t in DESCRIPTIONS.items()) + ".",
        show_default=False,
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option("--from", metavar="ID", help="Copy the config of an existing experiment.", show_default=False),
]
DescriptionOption = Annotated[
    str | None,
    typer.Option(
        "--description", metavar="TEXT", help="One line saying what this experiment tries.", show_default=False
    ),
]


@handled
def new(
    ctx: typer.Context,
    experiment_id: NewIdArgument = None,
    preset: PresetOption = None,
    from_id: FromOption = None,
    overrides: SetOption = None,
    description: DescriptionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write experiments/<ID>.yaml and register it; print the ID on stdout."""
    home = home_of(ctx)
    base = experiments.load(home, from_id) if from_id else None
    config = experiments.build(preset=preset, from_config=base, overrides=overrides or [], description=description)
    created = experiments.create(home, experiment_id, config)
    path = home.config_path(created.id)
    if as_json:
        render.emit_json({"id": created.id, "path": str(path), "config_hash": created.fingerprint,
                          "config": created.to_dict()})  # fmt: skip
    else:
        print(created.id)
        render.info(f"wrote {path}")


# Lifecycle commands after ``new``, in the order ``octlm --help`` lists them (app.py registers them).
COMMANDS: dict[str, Callable[..., Any]] = {}
