"""A row's cells as the registry holds them (torch-free): the columns a write may name, derived from what the
migrations make (``migrations/``), the tables an experiment's rows live in, and the JSON cells. Writes accept only
the known columns of their table (``checked``). A non-finite number in a JSON cell (a diverged run's NaN loss, an
infinite evaluation) is written as ``{"$float": "nan"}`` (``"inf"``, ``"-inf"``), which SQLite's JSON accepts, and
read back as the float; an older octlm's bare ``NaN`` / ``Infinity`` reads back too. Reads decode the JSON cells
(``decoded``: ``argv``, ``latest_metrics``, ``final_metrics``, checkpoint ``metrics``, verification ``details``,
experiment ``tags``, ``config_json``, ``former_ids``, the sweeps' cells); a cell that is not valid JSON reads as
``None`` (``tags`` as ``[]``).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from octlm.store.migrations import TABLE_COLUMNS


def writable(table: str) -> tuple[str, ...]:
    """The columns of ``table`` that a write may name: every one its migrations made but ``id`` (the database's)."""
    return tuple(column for column in TABLE_COLUMNS[table] if column != "id")


EXPERIMENT_COLUMNS = writable("experiments")
RUN_COLUMNS = writable("runs")
CHECKPOINT_COLUMNS = writable("checkpoints")
VERIFICATION_COLUMNS = writable("verifications")
NOTE_COLUMNS = writable("notes")
METRIC_COLUMNS = writable("metrics")
# The fields of a run-file record that the metrics table holds: core.records.METRIC_FIELDS, those a record says it
# carries (a test holds the two the same).
METRIC_TABLE_FIELDS = tuple(column for column in METRIC_COLUMNS if column not in ("experiment_id", "run_id", "track"))
METRIC_TRACKS = ("train", "overfit")
# Every table holding rows of an experiment, children first (the order a removal deletes them in): a removed
# trial leaves its sweep. The sweeps and their decisions belong to no one experiment (``SWEEP_TABLES``).
EXPERIMENT_TABLES = (
    "metrics",
    "notes",
    "checkpoints",
    "verifications",
    "sweep_claims",
    "sweep_trials",
    "runs",
    "experiments",
)
SWEEP_TABLES = ("sweep_decisions", "sweeps")
HOME_TABLES = ("id_marks",)  # the home's own (m011): of no experiment or sweep, never exported or removed
JSON_CELLS = (  # (table, column) of every JSON cell, config_json included
    ("experiments", "config_json"),
    ("experiments", "tags"),
    ("runs", "argv"),
    ("runs", "latest_metrics"),
    ("runs", "final_metrics"),
    ("checkpoints", "metrics"),
    ("verifications", "details"),
    ("experiments", "former_ids"),
    ("sweeps", "spec"),
    ("sweep_trials", "params"),
    ("sweep_decisions", "ranking"),
    ("sweep_decisions", "promoted"),
)
JSON_COLUMNS = frozenset(column for _, column in JSON_CELLS)
TRAINING_KINDS = ("train", "resume")

Fields = Mapping[str, object]  # the columns of a row to write, by name: checked against the table (``checked``)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_uuid() -> str:
    """A new row's UUID, kept forever (an export, an import and a rebuilt registry match rows by it)."""
    return str(uuid.uuid4())


def checked(table: str, fields: Fields, allowed: tuple[str, ...]) -> dict[str, object]:
    """``fields`` with its JSON columns encoded; ValueError naming the first key that is not a column."""
    for key in fields:
        if key not in allowed:
            raise ValueError(f"{table}: unknown column {key!r}")
    return {k: encode(v) if k in JSON_COLUMNS and not isinstance(v, str) else v for k, v in fields.items()}


NONFINITE = "$float"  # {"$float": "nan"}: a non-finite number in a JSON cell


def encode(value: Any) -> str:
    """A JSON cell's text: valid JSON (SQLite's too), a non-finite float as ``{"$float": "nan"}``."""
    return json.dumps(_tagged(value), allow_nan=False)


def _tagged(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {NONFINITE: str(value)}  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tagged(item) for item in value]
    return value


def _untagged(item: dict[str, Any]) -> Any:
    """``json.loads``' object hook: ``{"$float": "nan"}`` back to the float."""
    if len(item) == 1 and item.get(NONFINITE) in ("nan", "inf", "-inf"):
        return float(item[NONFINITE])
    return item


def untag_text(value: Any) -> Any:
    """``value``, or the float a ``{"$float": ...}`` text (what SQLite's ``json_extract`` gives of one) stands for."""
    if isinstance(value, str) and value.startswith('{"' + NONFINITE):
        untagged = _untagged(json.loads(value)) if _readable_object(value) else value
        return untagged if isinstance(untagged, float) else value
    return value


def _readable_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def decode(text: str) -> Any:
    """A JSON cell's value (ValueError when it is not JSON); octlm's ``$float`` and a bare NaN read as floats."""
    return json.loads(text, object_hook=_untagged)


def decoded(row: dict[str, Any]) -> dict[str, Any]:  # any table's row, before its reader types it
    """``row`` with its JSON columns decoded; a malformed cell reads as None, and ``tags`` as a list."""
    for key in JSON_COLUMNS.intersection(row):
        if isinstance(row[key], str):
            try:
                row[key] = decode(row[key])
            except (ValueError, RecursionError):
                row[key] = None
    if "tags" in row and not (isinstance(row["tags"], list) and all(isinstance(t, str) for t in row["tags"])):
        row["tags"] = []
    return row
