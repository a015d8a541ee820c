"""The SQLite run registry: experiments, their tags and notes, the highest ID number given with each prefix
(``id_marks``: an ID is never given twice in a home), and, inherited, a run's rows (``store/runs/rows``: runs,
checkpoints, verdicts, metrics) and the sweeps' (``store/sweeps/``: sweeps, their trials, the queue's claims and
halving's decisions). All of octlm's SQL lives here, in those two and in ``store/base/`` (the connection and the
columns; the schema, the columns' source and the rows' types are in ``store/migrations/``).

Reads and writes go through the standard ``sqlite3`` module with WAL and a busy
timeout, writes inside ``BEGIN IMMEDIATE`` transactions, so many octlm processes
on one box never fail with "database is locked". The schema is owned by
``migrations/``, which imports sqlite-utils only when a migration is pending, so
``octlm show`` stays light. This module never imports torch.

``Registry(path, create=False)`` reads only (see ``base``). Reads return plain dicts with the JSON columns
decoded, typed as ``ExperimentRow`` ... ``MetricRow`` (``migrations``, exported here); a cell that is not valid
JSON reads as ``None`` (``malformed_cells`` names them). Writes accept only the known columns of their table.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, cast

from octlm.core.records.freeform import ConfigTree
from octlm.store.base import (
    BUSY_TIMEOUT_S,
    CHECKPOINT_COLUMNS,
    EXPERIMENT_COLUMNS,
    EXPERIMENT_TABLES,
    JSON_CELLS,
    JSON_COLUMNS,
    KNOWN_MIGRATIONS,
    METRIC_COLUMNS,
    METRIC_TABLE_FIELDS,
    NOTE_COLUMNS,
    RUN_COLUMNS,
    TRAINING_KINDS,
    VERIFICATION_COLUMNS,
    checked,
    decode,
    new_uuid,
    now,
    untag_text,
)
from octlm.store.migrations import (
    TABLE_COLUMNS,
    CheckpointRow,
    ExperimentRow,
    MetricRow,
    NoteRow,
    RunRow,
    SummaryRow,
    VerificationRow,
)
from octlm.store.runs.rows import RunRows
from octlm.store.sweeps.queue import QueueRows
from octlm.store.sweeps.rows import SweepRows

__all__ = [
    "BUSY_TIMEOUT_S",
    "CHECKPOINT_COLUMNS",
    "EXPERIMENT_COLUMNS",
    "JSON_CELLS",
    "JSON_COLUMNS",
    "KNOWN_MIGRATIONS",
    "METRIC_COLUMNS",
    "METRIC_TABLE_FIELDS",
    "NOTE_COLUMNS",
    "RUN_COLUMNS",
    "TABLE_COLUMNS",
    "TRAINING_KINDS",
    "VERIFICATION_COLUMNS",
    "CheckpointRow",
    "ExperimentRow",
    "MetricRow",
    "NoteRow",
    "Registry",
    "RunRow",
    "SummaryRow",
    "VerificationRow",
    "now",
]

SYNC_EXPERIMENT = (  # keeps ``updated`` when neither the config nor the description changed
    " on conflict(id) do update set description=excluded.description, preset=excluded.preset,"
    " yaml_path=excluded.yaml_path, config_json=excluded.config_json, config_hash=excluded.config_hash,"
    " updated=case when experiments.config_hash is excluded.config_hash"
    " and experiments.description is excluded.description then experiments.updated else excluded.updated end"
)
MAX_TAGS, MAX_NOTE_CHARS = 100, 10_000
MARKS = "select prefix, highest from id_marks"
RAISE_MARK = (
    "insert into id_marks (prefix, highest) values (?, ?)"
    " on conflict(prefix) do update set highest = max(highest, excluded.highest)"
)


class Registry(RunRows, SweepRows, QueueRows):
    # ------------------------------------------------------------------ experiments

    def add_experiment(self, experiment_id: str, **fields: str) -> None:
        """Insert an experiment: ``description``, ``preset``, ``yaml_path``, ``config_json``, ``config_hash``."""
        self._put_experiment(experiment_id, fields, "")

    def sync_experiment(self, experiment_id: str, **fields: str) -> None:
        """Insert the experiment, or bring its row in line with its YAML file (fields as ``add_experiment``)."""
        self._put_experiment(experiment_id, fields, SYNC_EXPERIMENT)

    def _put_experiment(self, experiment_id: str, fields: dict[str, Any], on_conflict: str) -> None:
        stamp = now()  # a new row's UUID is kept forever: a conflict never updates it
        row = checked(
            "experiments", {"created": stamp, "updated": stamp, "uuid": new_uuid(), **fields}, EXPERIMENT_COLUMNS
        )
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            conn.execute(
                f"insert into experiments (id, {columns}) values (?, {marks}){on_conflict}",
                (experiment_id, *row.values()),
            )

    def experiments(self) -> list[ExperimentRow]:
        """Every experiment row, by ID (``config_json`` decoded, None when malformed)."""
        return cast("list[ExperimentRow]", self._rows("select * from experiments order by id"))

    def experiment(self, experiment_id: str) -> ExperimentRow | None:
        rows = cast("list[ExperimentRow]", self._rows("select * from experiments where id = ?", (experiment_id,)))
        return rows[0] if rows else None

    def former_ids(self, experiment_id: str) -> list[str]:
        """The IDs this experiment's checkpoints may name from before it was unpacked under its own (``--as``)."""
        row = self.experiment(experiment_id)
        former = row["former_ids"] if row else None
        return [i for i in former if isinstance(i, str)] if isinstance(former, list) else []

    def experiment_ids(self) -> list[str]:
        return [row["id"] for row in self._rows("select id from experiments order by id")]

    def with_fingerprint(self, config_hash: str) -> list[str]:
        """The IDs of the experiments registered with this config fingerprint, in ID order."""
        return [row["id"] for row in self._rows("select id from experiments where config_hash = ?", (config_hash,))]

    def configs(self) -> dict[str, ConfigTree]:
        """{experiment ID: its resolved config as registered}; a malformed config reads as {}, and a row whose ID is
        not text (null or a number in a registry edited by hand or damaged) is left out: nothing can name it."""
        rows = self._rows("select id, config_json from experiments")
        configs = {row["id"]: row["config_json"] for row in rows if isinstance(row["id"], str)}
        return {key: config if isinstance(config, dict) else {} for key, config in configs.items()}

    def summary_rows(self) -> list[SummaryRow]:
        """The ``experiment_summary`` view: one row per experiment with its latest training run and verdict (a
        figure octlm stored as ``{"$float": "nan"}`` read as the float)."""
        rows = self._rows("select * from experiment_summary order by id")
        return cast("list[SummaryRow]", [{k: untag_text(v) for k, v in row.items()} for row in rows])

    def malformed_cells(self) -> list[tuple[str, Any, str]]:
        """(table, row id, column) of each JSON cell that is not valid JSON (reads give None; doctor repairs). An
        older octlm's bare ``NaN`` / ``Infinity`` fails SQLite's ``json_valid`` but reads back: not malformed."""
        sql = " union all ".join(
            f"select '{t}' as t, id, '{c}' as c, {c} as v from {t} where {c} is not null and not json_valid({c})"
            for t, c in JSON_CELLS
        )
        return [(row["t"], row["id"], row["c"]) for row in self._rows(sql) if not _readable(row["v"])]

    def clear_cell(self, table: str, row_id: Any, column: str) -> None:
        """Set a JSON cell to null (``doctor --repair`` on a malformed one); only the cells of JSON_CELLS."""
        if (table, column) not in JSON_CELLS:
            raise ValueError(f"{table}.{column}: not a JSON cell")
        with self._transaction() as conn:
            conn.execute(f"update {table} set {column} = null where id = ?", (row_id,))

    def same_config(self, config_hash: str) -> list[str]:
        """IDs of the experiments registered with this config fingerprint."""
        return [
            row["id"]
            for row in self._rows("select id from experiments where config_hash = ? order by id", (config_hash,))
        ]

    # ------------------------------------------------------------------ lifecycle: archive, tags, notes, removal

    def set_archived(self, experiment_id: str, archived: bool) -> bool:
        """Archive or unarchive an experiment's row; False when there is no such row."""
        with self._transaction() as conn:
            cursor = conn.execute("update experiments set archived = ? where id = ?", (int(archived), experiment_id))
            return cursor.rowcount > 0

    def retag(self, experiment_id: str, add: list[str], remove: list[str]) -> list[str]:
        """Add then remove tags in one transaction; the experiment's tags after it, sorted."""
        with self._transaction() as conn:
            row = conn.execute("select tags from experiments where id = ?", (experiment_id,)).fetchone()
            if row is None:
                raise ValueError(f"experiments: no row {experiment_id!r}")
            tags = sorted((set(_tag_list(row["tags"])) | set(add)) - set(remove))
            if len(tags) > MAX_TAGS:
                raise ValueError(f"at most {MAX_TAGS} tags per experiment")
            conn.execute("update experiments set tags = ? where id = ?", (json.dumps(tags), experiment_id))
            return tags

    def add_note(self, experiment_id: str, text: str) -> NoteRow:
        """Append a note to an experiment; the note's row."""
        if not text.strip() or len(text) > MAX_NOTE_CHARS:
            raise ValueError(f"a note holds 1 to {MAX_NOTE_CHARS:,} characters")
        fields = {"experiment_id": experiment_id, "created": now(), "text": text, "uuid": new_uuid()}
        row = checked("notes", fields, NOTE_COLUMNS)
        with self._transaction() as conn:
            cursor = conn.execute(
                "insert into notes (experiment_id, created, text, uuid) values (?, ?, ?, ?)", tuple(row.values())
            )
        return cast("NoteRow", {"id": cursor.lastrowid, **row})

    def notes(self, experiment_id: str) -> list[NoteRow]:
        """An experiment's notes, oldest first."""
        sql = "select * from notes where experiment_id = ? order by id"
        return cast("list[NoteRow]", self._rows(sql, (experiment_id,)))

    def row_counts(self, experiment_id: str) -> dict[str, int]:
        """{table: rows of this experiment} for every table that holds some."""
        key = {table: "id" if table == "experiments" else "experiment_id" for table in EXPERIMENT_TABLES}
        sql = " union all ".join(f"select '{t}' as t, count(*) as n from {t} where {key[t]} = ?" for t in key)
        rows = self._rows(sql, (experiment_id,) * len(key))
        return {row["t"]: row["n"] for row in reversed(rows) if row["n"]}  # the experiment first

    def remove_experiment(self, experiment_id: str) -> dict[str, int]:
        """Delete every row of one experiment (metrics, notes, checkpoints, verdicts, runs, the experiment) in
        one transaction; {table: rows deleted}. Rows of other experiments are never touched."""
        removed = {}
        with self._transaction() as conn:
            for table in EXPERIMENT_TABLES:
                column = "id" if table == "experiments" else "experiment_id"
                removed[table] = conn.execute(f"delete from {table} where {column} = ?", (experiment_id,)).rowcount
        return {table: removed[table] for table in reversed(EXPERIMENT_TABLES) if removed[table]}

    # ------------------------------------------------------------------ the IDs given (m011)

    def id_marks(self) -> dict[str, int]:
        """{prefix: the highest number ever given with it in this registry} (``{"EXP-": 12}``), raised by every
        experiment row inserted and never lowered: a removed experiment's number stays taken."""
        return {row["prefix"]: row["highest"] for row in self._rows(MARKS)}

    def raise_id_marks(self, merge: Callable[[dict[str, int]], Mapping[str, int]]) -> dict[str, int]:
        """In one write transaction: hand the marks to ``merge``, raise each to what it returns (never lowering one);
        the marks after. ``merge`` runs with the registry's write lock held, so what it keeps beside the registry
        (``kept.keep_marks``) is written by one process at a time."""
        with self._transaction() as conn:
            for prefix, highest in merge(_marks(conn)).items():
                conn.execute(RAISE_MARK, (prefix, highest))
            return _marks(conn)


def _marks(conn: sqlite3.Connection) -> dict[str, int]:
    return {prefix: highest for prefix, highest in conn.execute(MARKS).fetchall()}


def _tag_list(cell: Any) -> list[str]:
    try:
        tags = json.loads(cell) if isinstance(cell, str) else []
    except ValueError:
        return []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _readable(text: Any) -> bool:
    """A JSON cell's text that octlm reads back (``base.decode``), SQLite's ``json_valid`` or not."""
    try:
        decode(text)
    except (ValueError, RecursionError, TypeError):
        return False
    return True
