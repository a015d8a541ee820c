"""The list's columns, in one spec (torch-free): each column of ``octlm show`` once, in the one order the table,
``--json`` and ``--csv`` all read, with what a row of it says: its key (its name in ``--json``, ``--csv``,
``--columns``, ``--where`` and ``--sort``), its header in the table (none: in ``--json`` and ``--csv`` only), the type
of its values (what the JSON reference says, and whether ``--where`` compares it as a number), how the table writes
it (a kind of ``cli.formats``: ``metric`` at 4 significant figures, ``count`` with separators, ...), when a narrow
terminal leaves it out, and, where the table shows it otherwise than as stored, its cell.

A column whose key is not one of the experiment's own (``OWN``) is a field of the newest record of the experiment's
newest training run, read whole from its run row (``latest_metrics``: every field the run file's records carry,
``core.records.RunRecord``), so that one more figure in the list is one more line here: no registry column, no
migration, and a registry it was shown from stays readable by an older octlm. Any field of that record may also be
named with ``--columns``, ``--where`` and ``--sort`` without a line here (``FIGURES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from octlm.core.records import NESTED_FIELDS, NUMBER_FIELDS, RUN_RECORD_FIELDS

ListedRow = Mapping[str, Any]  # a listing row as a column's cell and a filter read it


@dataclass(frozen=True)
class Column:
    """One column of the list."""

    key: str  # in --json, --csv, --columns, --where, --sort
    header: str | None  # in the table; None: in --json and --csv only
    kind: str  # the type of its values, as the JSON reference writes it: "float | None"
    format: str  # how the table writes a value: a kind of ``cli.formats.COLUMN_KINDS`` (raw, count, metric, text...)
    drop: int | None = None  # a narrow terminal leaves the columns out lowest first; None: never
    cell: Callable[[ListedRow], Any] | None = None  # the table's cell when not the value as stored

    @property
    def numeric(self) -> bool:
        """Whether ``--where`` compares its values as numbers."""
        return self.kind.removesuffix(" | None") in ("int", "float")


def _tags(row: ListedRow) -> str:
    """The tags, after ``archived`` for an archived experiment; ``-`` for neither."""
    tags = " ".join(str(tag) for tag in row.get("tags") or [])
    return ("archived" + (f" {tags}" if tags else "") if row.get("archived") else tags) or "-"


def _step(row: ListedRow) -> str:
    """``12/200``: the step reached of ``training.steps``."""
    return f"{row.get('step') or 0}/{row['steps']}" if row.get("steps") else "-"


def _updated(row: ListedRow) -> str:
    """To the minute, UTC, with a space: ``2026-03-01 12:04``."""
    return str(row.get("updated") or "")[:16].replace("T", " ")


COLUMNS: tuple[Column, ...] = (
    Column("id", "ID", "str", "raw"),
    Column("description", "description", "Any", "text"),  # the YAML's, when it changed after the row was written
    Column("tags", "tags", "list[str]", "yaml", drop=70, cell=_tags),
    Column("archived", None, "bool", "yaml"),
    Column("status", "status", "str", "raw"),  # of its newest training run ("new": none), "running" while one runs
    Column("step", "step", "int | None", "raw", cell=_step),
    Column("steps", None, "int | None", "raw"),  # training.steps
    Column("train_loss", "train loss", "float | None", "metric", drop=30),
    Column("eval_loss", "eval loss", "float | None", "metric"),
    Column("eval_loss_se", None, "float | None", "metric"),  # its standard error over the evaluation's clusters
    Column("perplexity", "ppl", "float | None", "metric", drop=20),
    Column("bits_per_byte", "bpb", "float | None", "metric", drop=60),
    Column("tokens", "tokens", "int | None", "count", drop=40),
    Column("last_verdict", "verdict", "str | None", "text", drop=50),  # the newest of each kind, the checks first
    Column("updated", "updated (UTC)", "str | None", "raw", drop=10, cell=_updated),
)
BY_KEY: dict[str, Column] = {column.key: column for column in COLUMNS}
KEYS: tuple[str, ...] = tuple(BY_KEY)
TABLE: tuple[Column, ...] = tuple(column for column in COLUMNS if column.header is not None)
DROP_ORDER: tuple[str, ...] = tuple(
    str(column.header) for column in sorted(TABLE, key=lambda c: c.drop or 0) if column.drop is not None
)
# What the list makes of the experiment's own rows (its registry row, its newest training run, its verdicts, its
# YAML); every other column is a field of its newest record.
OWN = ("id", "description", "tags", "archived", "status", "step", "steps", "last_verdict", "updated")
# The fields of that record any listing may name beyond the columns (``--columns lr,tokens_per_second``).
FIGURES: tuple[str, ...] = tuple(f for f in RUN_RECORD_FIELDS if f not in NESTED_FIELDS and f not in BY_KEY)


def numeric(key: str) -> bool:
    """Whether a column or record field is a number (``--where`` compares it so)."""
    return BY_KEY[key].numeric if key in BY_KEY else key in NUMBER_FIELDS


def cells(row: ListedRow) -> list[Any]:
    """A row's cells in the table, in the order of ``TABLE``."""
    return [column.cell(row) if column.cell else row.get(column.key) for column in TABLE]


def row_shape() -> type:
    """An experiment of ``show --json`` as a TypedDict made from the spec: what the JSON reference documents."""
    shape: Any = TypedDict  # made at run time from the spec, which a type checker cannot read
    made: type = shape("ListingRow", {column.key: column.kind for column in COLUMNS})
    made.__doc__ = "One experiment in the list (`octlm show`): the listing columns, in their order."
    return made
