"""The SQLite run registry: experiments, runs, checkpoints, verdicts, metrics, tags and notes, the highest ID number
given with each prefix (``id_marks``: an ID is never given twice in a home), and (inherited from
``sweeps.py``) sweeps, their trials, the queue's claims and halving's decisions. All of octlm's SQL lives here,
in ``sweeps.py`` and in ``base.py`` (the connection and its columns; the schema, the columns' source and the rows'
types are in ``migrations/``).

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
import os
import socket
import sqlite3
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from octlm.core.liveness import effective_status, start_time
from octlm.core.records import NESTED_FIELDS, RunRecord
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
    METRIC_FIELDS,
    METRIC_TRACKS,
    NOTE_COLUMNS,
    RUN_COLUMNS,
    TRAINING_KINDS,
    VERIFICATION_COLUMNS,
    checked,
    decode,
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
    "METRIC_FIELDS",
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


class Registry(SweepRows, QueueRows):
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
        """{experiment ID: its resolved config as registered}; a malformed config reads as {}."""
        rows = self._rows("select id, config_json from experiments")
        return {row["id"]: row["config_json"] if isinstance(row["config_json"], dict) else {} for row in rows}

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

    # ------------------------------------------------------------------ runs

    def start_run(self, experiment_id: str, kind: str, **fields: Any) -> int:
        stamp = now()
        defaults = {
            "status": "running",
            "started": stamp,
            "updated": stamp,
            "host": socket.gethostname(),
            "uuid": new_uuid(),
        }
        fields = {"experiment_id": experiment_id, "kind": kind, **defaults, "pid": os.getpid(), **fields}
        fields.setdefault("pid_start", start_time(fields["pid"]) if fields["pid"] else None)  # liveness
        row = checked("runs", fields, RUN_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            self._mark_crashed(conn, experiment_id)
            cursor = conn.execute(f"insert into runs ({columns}) values ({marks})", tuple(row.values()))
            return int(cursor.lastrowid or 0)

    def update_run(self, run_id: int, **fields: Any) -> None:
        row = checked("runs", {**fields, "updated": now()}, RUN_COLUMNS)
        assignments = ", ".join(f"{key} = ?" for key in row)  # keys are checked columns, never user text
        with self._transaction() as conn:
            conn.execute(f"update runs set {assignments} where id = ?", (*row.values(), run_id))

    def finish_run(self, run_id: int, status: str, **fields: Any) -> None:
        self.update_run(run_id, status=status, ended=now(), **fields)

    def runs(self, experiment_id: str) -> list[RunRow]:
        """The runs of an experiment, oldest first, each with its effective status."""
        rows = self._rows("select * from runs where experiment_id = ? order by id", (experiment_id,))
        return [effective_status(row) for row in cast("list[RunRow]", rows)]

    def running_runs(self) -> list[RunRow]:
        """Runs recorded as ``running`` (or imported as ``unknown (host X)``), each with its effective status (a dead
        process reads ``crashed``)."""
        sql = "select * from runs where status = 'running' or status like 'unknown (host %' order by id"
        return [effective_status(row) for row in cast("list[RunRow]", self._rows(sql))]

    def has_training_run(self, experiment_id: str) -> bool:
        sql = "select 1 from runs where experiment_id = ? and kind in (?, ?) limit 1"
        return bool(self._rows(sql, (experiment_id, *TRAINING_KINDS)))

    def _mark_crashed(self, conn: sqlite3.Connection, experiment_id: str) -> None:
        sql = "select id, pid, pid_start, host, status from runs where experiment_id = ? and status = 'running'"
        for row in conn.execute(sql, (experiment_id,)).fetchall():
            if effective_status(dict(row))["status"] == "crashed":
                stamp = now()
                conn.execute(
                    "update runs set status = 'crashed', ended = ?, updated = ? where id = ?", (stamp, stamp, row["id"])
                )

    # ------------------------------------------------------------------ checkpoints

    def add_checkpoint(self, **row: Any) -> None:
        """Register a checkpoint file (or replace the row of the same ``path``)."""
        fields = checked("checkpoints", {"created": now(), **row}, CHECKPOINT_COLUMNS)
        columns, marks = ", ".join(fields), ", ".join("?" for _ in fields)
        updates = ", ".join(f"{key} = excluded.{key}" for key in fields if key != "path")
        with self._transaction() as conn:
            conn.execute(
                f"insert into checkpoints ({columns}) values ({marks}) on conflict(path) do update set {updates}",
                tuple(fields.values()),
            )

    def remove_checkpoint(self, path: str) -> None:
        with self._transaction() as conn:
            conn.execute("delete from checkpoints where path = ?", (path,))

    def set_checkpoint_digest(self, path: str, sha256: str) -> None:
        with self._transaction() as conn:
            conn.execute("update checkpoints set sha256 = ? where path = ?", (sha256, path))

    def checkpoints(self, experiment_id: str) -> list[CheckpointRow]:
        sql = "select * from checkpoints where experiment_id = ? order by step"
        return cast("list[CheckpointRow]", self._rows(sql, (experiment_id,)))

    def digests(self, root: Path, experiment_id: str) -> dict[str, str]:
        """{absolute checkpoint path: sha256} as registered, for verifying files before loading."""
        return {str(root / row["path"]): row["sha256"] for row in self.checkpoints(experiment_id)}

    # ------------------------------------------------------------------ verdicts

    def add_verification(
        self, experiment_id: str, kind: str, verdict: str, details: Mapping[str, object], run_id: int | None = None
    ) -> None:
        fields = {
            "experiment_id": experiment_id,
            "run_id": run_id,
            "kind": kind,
            "verdict": verdict,
            "uuid": new_uuid(),
        }
        row = checked("verifications", {**fields, "created": now(), "details": details}, VERIFICATION_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            conn.execute(f"insert into verifications ({columns}) values ({marks})", tuple(row.values()))

    def verifications(self, experiment_id: str) -> list[VerificationRow]:
        """Verdicts of an experiment, oldest first; ``details`` is a dict ({} when absent or unreadable)."""
        rows = self._rows("select * from verifications where experiment_id = ? order by id", (experiment_id,))
        return _verdict_rows(rows)

    def newest_verdicts(self) -> list[VerificationRow]:
        """The newest verdict of each kind of every experiment (a proof's beside a later ``eval``'s), oldest
        first; ``details`` as ``verifications`` reads it."""
        newest = "select max(w.id) from verifications w where w.experiment_id = v.experiment_id and w.kind = v.kind"
        return _verdict_rows(self._rows(f"select * from verifications v where v.id = ({newest}) order by v.id"))

    # ------------------------------------------------------------------ metrics (the run files' records as rows)

    def add_metrics(self, experiment_id: str, track: str, run_id: int | None, record: RunRecord) -> None:
        """One run-file record as a row of ``metrics`` (its nested fields, such as ``eval_sources``, stay in the run
        file); ValueError for another key that is not one of ``METRIC_FIELDS`` (a record may lack any of them) or a
        track other than train and overfit."""
        if track not in METRIC_TRACKS:
            raise ValueError(f"metrics: unknown track {track!r}; one of {', '.join(METRIC_TRACKS)}")
        unknown = [key for key in record if key not in METRIC_FIELDS and key not in NESTED_FIELDS]
        if unknown:
            raise ValueError(f"metrics: unknown column {unknown[0]!r}")
        scalars = {key: value for key, value in record.items() if key not in NESTED_FIELDS}
        fields = {"experiment_id": experiment_id, "run_id": run_id, "track": track, **scalars}
        row = checked("metrics", fields, METRIC_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            conn.execute(f"insert into metrics ({columns}) values ({marks})", tuple(row.values()))

    def cut_metrics(self, experiment_id: str, track: str, step: int) -> None:
        """Delete the rows after ``step`` of one track, as a resume cuts its run file back."""
        with self._transaction() as conn:
            conn.execute(
                "delete from metrics where experiment_id = ? and track = ? and step > ?", (experiment_id, track, step)
            )

    def metrics(self, experiment_id: str, track: str = "train") -> list[MetricRow]:
        """The metric rows of one track, by step (rows of one step in the order they were written)."""
        sql = "select * from metrics where experiment_id = ? and track = ? order by step, id"
        return cast("list[MetricRow]", self._rows(sql, (experiment_id, track)))

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


def _verdict_rows(rows: list[dict[str, Any]]) -> list[VerificationRow]:
    decoded = [{**row, "details": row["details"] if isinstance(row["details"], dict) else {}} for row in rows]
    return cast("list[VerificationRow]", decoded)


def new_uuid() -> str:
    return str(uuid.uuid4())


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
