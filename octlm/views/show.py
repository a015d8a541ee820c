"""What ``octlm show`` reports, as plain data: the list, one experiment in detail, several side by side,
or their curves. Torch-free; the CLI only writes what ``run`` returns (JSON, CSV or a table).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from octlm.core.errors import BadInput
from octlm.core.home import ID_PATTERN, Home
from octlm.store.registry import Registry
from octlm.views import listing, side_by_side
from octlm.views.compare import noise
from octlm.views.curves import plots
from octlm.views.details import SCHEMA_VERSION, Detail, detail, flat
from octlm.views.sweeps import status

__all__ = ["SCHEMA_VERSION", "ShowRequest", "Shown", "detail", "run"]
Mode = Literal["list", "plot", "detail", "compare", "sweep"]
ShownDocument = listing.Listing | Detail | side_by_side.Comparison | plots.PlotData | status.SweepRanking  # by mode


@dataclass(frozen=True)
class ShowRequest:
    """The options of ``octlm show``."""

    ids: tuple[str, ...] = ()
    all_keys: bool = False
    plot: bool = False
    sort: str | None = None
    where: tuple[str, ...] = ()
    limit: int | None = None
    columns: str | None = None
    as_json: bool = False
    as_csv: bool = False
    width: int = 80  # of the --plot charts
    include_archived: bool = False  # --all
    min_effect: float | None = None  # --min-effect: the smallest difference of interest, in nats (None: the default)

    @property
    def effect(self) -> float:
        """The smallest difference of interest the verdicts plan seeds for (``--min-effect``, else 0.01 nats)."""
        return self.min_effect if self.min_effect is not None else noise.MIN_EFFECT

    @property
    def mode(self) -> Mode:
        """``list`` (no ID), ``plot`` (--plot), ``detail`` (one ID) or ``compare`` (several)."""
        if not self.ids:
            return "list"
        if self.plot:
            return "plot"
        if len(self.ids) == 1 and not is_id(self.ids[0]):
            return "sweep"
        return "compare" if len(self.ids) > 1 else "detail"


SHOWN_CELLS = 3  # damaged registry cells a warning names; the rest it counts


@dataclass(frozen=True)
class Shown:
    """What ``octlm show`` writes: ``document`` with --json; ``header`` and ``rows`` with --csv
    (and for the text tables); ``text``, when set, as it is; ``warnings`` on stderr first.

    ``document`` is the view's typed document, as ``mode`` says (``ShownDocument``; None for the text of ``--plot``)."""

    mode: Mode
    document: ShownDocument | None
    header: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    text: str | None = None
    warnings: tuple[str, ...] = ()


def run(home: Home, request: ShowRequest) -> Shown:
    """Answer ``octlm show``; BadInput for conflicting options, unknown IDs, columns or filters."""
    if request.as_json and request.as_csv:
        raise BadInput("--json and --csv cannot be used together: choose one")
    _check_mode(request)
    return replace(VIEWS[request.mode](home, request), warnings=damaged_cells(home))


def _check_mode(request: ShowRequest) -> None:
    """Options that do not apply to the view asked for are an error, never silently ignored."""
    listing_only = request.where or request.sort or request.limit is not None or request.columns
    if request.ids and (listing_only or request.include_archived):
        raise BadInput("--where, --sort, --limit, --columns and --all apply to the list: give them without an ID")
    if request.all_keys and request.mode != "compare":
        raise BadInput("--all-keys applies to a comparison: give two experiment IDs or more")
    if request.plot and (not request.ids or request.as_csv):
        raise BadInput("--plot draws the curves of the experiments named (text, or --json): give their IDs, no --csv")
    if request.min_effect is not None:
        if request.mode not in ("compare", "sweep"):
            raise BadInput(
                "--min-effect applies to a comparison or a sweep: give two experiment IDs or more, or a sweep"
            )
        if not math.isfinite(request.min_effect) or request.min_effect <= 0:
            raise BadInput(f"--min-effect {request.min_effect}: give a positive difference in nats, such as 0.01")


def damaged_cells(home: Home) -> tuple[str, ...]:
    """One warning for the registry cells that are not valid JSON, naming the first few: shown as empty, every
    other row as usual. One line however many (a registry damaged in every row would bury the output under a line
    a row)."""
    with Registry(home.registry, create=False) as registry:
        cells = [f"{table} row {row_id}: {column}" for table, row_id, column in registry.malformed_cells()]
    if not cells:
        return ()
    repair = "(`octlm doctor --repair` clears {})"
    if len(cells) == 1:
        return (f"{home.registry.name}: {cells[0]} is not valid JSON; shown as empty {repair.format('it')}",)
    named = ", ".join(cells[:SHOWN_CELLS]) + (
        f" and {len(cells) - SHOWN_CELLS} more" if len(cells) > SHOWN_CELLS else ""
    )
    return (
        f"{home.registry.name}: {len(cells)} cells are not valid JSON ({named}); shown as empty "
        f"{repair.format('them')}",
    )


def _list(home: Home, request: ShowRequest) -> Shown:
    columns = listing.parse_columns(request.columns)
    found = listing.select(
        home,
        where=list(request.where),
        sort=request.sort,
        limit=request.limit,
        columns=columns,
        include_archived=request.include_archived,
    )
    header = listing.header(columns)
    document: listing.Listing = {
        "schema_version": SCHEMA_VERSION,
        "home": str(home.root),
        "experiments": found,
        "replicates": listing.replicate_groups(home, found),
    }
    return Shown("list", document, header, [[row.get(column) for column in header] for row in found])


def _detail(home: Home, request: ShowRequest) -> Shown:
    item = detail(home, request.ids[0])
    return Shown("detail", item, ["key", "value"], [[key, value] for key, value in flat(item).items()])


def _compare(home: Home, request: ShowRequest) -> Shown:
    result = side_by_side.compare(home, list(request.ids), request.all_keys, request.effect)
    rows = [[name, *values] for name, values in side_by_side.table_rows(result)]
    return Shown("compare", result, ["field", *request.ids], rows)


def _sweep(home: Home, request: ShowRequest) -> Shown:
    """A sweep's configurations, ranked; BadInput for a name that is neither a sweep nor an experiment ID."""
    with Registry(home.registry, create=False) as registry:
        if registry.sweep(request.ids[0]) is None:
            raise BadInput(_no_such(request.ids[0], [row["name"] for row in registry.sweeps()]))
    found = status.ranking(home, request.ids[0], request.effect)
    header = ["rank", "params", "trials", "step", found["metric"], "sd", "seeds", "eval_loss_se"]
    rows = [
        [
            c["rank"],
            c["params"],
            c["trials"],
            c["step"],
            c["value"]["mean"],
            c["value"]["sd"],
            c["value"]["n"],
            c["eval_loss_se"],
        ]
        for c in found["configurations"]
    ]
    return Shown("sweep", found, header, rows)


def _no_such(name: str, sweeps: list[str]) -> str:
    """What ``show NAME`` takes, and that nothing here is called ``name``."""
    here = f"the sweeps here: {', '.join(sweeps)}" if sweeps else "this home has no sweeps"
    return (
        f"show {name[:80]!r}: not an experiment ID, and no sweep has that name: `show` takes an experiment ID (such "
        f"as EXP-008) or a sweep's name ({here})"
    )


def is_id(text: str) -> bool:
    """Whether ``text`` is an experiment ID (else it may name a sweep)."""
    return ID_PATTERN.fullmatch(text) is not None


def _plot(home: Home, request: ShowRequest) -> Shown:
    if request.as_json:
        return Shown("plot", plots.plot_data(home, list(request.ids)))
    return Shown("plot", None, text=plots.plots(home, list(request.ids), width=request.width))


VIEWS: dict[Mode, Callable[[Home, ShowRequest], Shown]] = {
    "list": _list,
    "detail": _detail,
    "compare": _compare,
    "plot": _plot,
    "sweep": _sweep,
}
