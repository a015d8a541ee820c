"""``octlm show``: the list, one experiment in detail, several side by side, curves. Torch-free."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from octlm.cli import render
from octlm.cli.common import JsonOption, complete_ids, handled, home_of

IdsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[ID]...",
        help="One experiment: its detail; several: side by side; none: list all.",
        show_default=False,
        autocompletion=complete_ids,
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
        help="Sort the list by a column, a field of the run's newest record or a config key; prefix - for descending.",
        show_default=False,
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        metavar="EXPR",
        help="Filter the list (repeatable; all must hold): KEY OP VALUE, KEY a listing column, a field of the "
        "run's newest record (tokens_per_second, lr, ...) or a config key, "
        "OP one of == (or =), !=, <, <=, >, >=, ~ (contains), e.g. 'eval_loss<2.5', 'model.n_layers==4', "
        "'status=stopped', 'description~warmup', 'tags=baseline'. A number with decimals matches at that "
        "precision (eval_loss==4.39 matches 4.3912). An unknown key or a malformed expression is exit 2.",
        show_default=False,
    ),
]
AllOption = Annotated[bool, typer.Option("--all", "-a", help="List archived experiments too.")]
LimitOption = Annotated[
    int | None, typer.Option("--limit", metavar="N", help="Show at most N experiments.", show_default=False)
]
ColumnsOption = Annotated[
    str | None,
    typer.Option(
        "--columns",
        metavar="A,B,...",
        help="Comma-separated columns of the list: listing columns, fields of the run's newest record "
        "(tokens_per_second, lr, ...) or config keys.",
        show_default=False,
    ),
]
CsvOption = Annotated[bool, typer.Option("--csv", help="Write CSV on stdout.")]
MinEffectOption = Annotated[
    float | None,
    typer.Option(
        "--min-effect",
        metavar="NATS",
        help="The smallest difference in eval loss worth finding, in nats (default 0.01): a comparison or a sweep "
        "says how many seeds a configuration needs to find it 80% of the time.",
        show_default=False,
    ),
]


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
    include_archived: AllOption = False,
    min_effect: MinEffectOption = None,
) -> None:
    """List experiments, show one in detail, or compare several side by side."""
    from octlm.cli import show_view  # here: --help never loads the views
    from octlm.views import show as shows

    width = min(render.out_console().width, 120) if sys.stdout.isatty() else 80
    request = shows.ShowRequest(
        ids=tuple(ids or ()),
        all_keys=all_keys,
        plot=plot,
        sort=sort,
        where=tuple(where or ()),
        limit=limit,
        columns=columns,
        as_json=as_json,
        as_csv=as_csv,
        width=width,
        include_archived=include_archived,
        min_effect=min_effect,
    )
    show_view.write(shows.run(home_of(ctx), request), request)
