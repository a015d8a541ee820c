"""Commands that create and inspect experiments: ``new`` and ``show``. Torch-free."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import experiments
from .. import show as shows
from ..presets import DESCRIPTIONS
from . import render, show_view
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
IdsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[ID]...",
        help="One experiment: its detail; several: side by side; none: list all.",
        show_default=False,
    ),
]
AllKeysOption = Annotated[
    bool, typer.Option("--all-keys", help="Compare every config key, not only those that differ.")
]
PlotOption = Annotated[
    bool, typer.Option("--plot", help="Draw train/eval loss, learning rate and gradient norm from the run files.")
]
SortOption = Annotated[
    str | None,
    typer.Option(
        "--sort",
        metavar="KEY",
        help="Sort the list by a column or config key; prefix - for descending.",
        show_default=False,
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        metavar="EXPR",
        help="Filter the list: KEY OP VALUE, e.g. 'eval_loss<2.5' or 'model.n_layers=4' (repeatable).",
        show_default=False,
    ),
]
LimitOption = Annotated[
    int | None, typer.Option("--limit", metavar="N", help="Show at most N experiments.", show_default=False)
]
ColumnsOption = Annotated[
    str | None,
    typer.Option(
        "--columns",
        metavar="A,B,...",
        help="Comma-separated columns of the list (listing columns or config keys).",
        show_default=False,
    ),
]
CsvOption = Annotated[bool, typer.Option("--csv", help="Write CSV on stdout.")]


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


@handled
def show(
    ctx: typer.Context,
    ids: IdsArgument = None,
    all_keys: AllKeysOption = False,
    plot: PlotOption = False,
    sort: SortOption = None,
    where: WhereOption = None,
    limit: LimitOption = None,
    columns: ColumnsOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
) -> None:
    """List experiments, show one in detail, or compare several side by side."""
    width = min(render.out_console().width, 120) if sys.stdout.isatty() else 80
    request = shows.Request(
        ids=tuple(ids or ()), all_keys=all_keys, plot=plot, sort=sort, where=tuple(where or ()), limit=limit,
        columns=columns, as_json=as_json, as_csv=as_csv, width=width,
    )  # fmt: skip
    show_view.write(shows.run(home_of(ctx), request), request)
