"""The SQLite run registry: experiments, runs, checkpoints and verdicts. All of octlm's SQL lives here
(and the schema in ``migrations.py``).

Reads and writes go through the standard ``sqlite3`` module with WAL and a busy
timeout, writes inside ``BEGIN IMMEDIATE`` transactions, so many octlm processes
on one box never fail with "database is locked". The schema is owned by
``migrations.py`` (sqlite-utils), imported only when a migration is pending, so
``octlm show`` stays light. This module never imports torch.

``Registry(path, create=False)`` reads only: ``mode=ro`` (``immutable=1`` on a read-only medium), never
creating, migrating (a pending migration runs on a copy in memory) or switching the journal mode.
Reads return plain dicts with the JSON columns decoded (``argv``, ``latest_metrics``, ``final_metrics``,
checkpoint ``metrics``, verification ``details``); a cell that is not valid JSON reads as ``None``
(``malformed_cells`` names them). Writes accept only the known columns of their table.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from .errors import BadInput, Refused
from .liveness import effective_status, start_time

BUSY_TIMEOUT_S = 60.0
KNOWN_MIGRATIONS = ("m001_initial", "m002_summary_view", "m003_pid_start_json_guards")  # = migrations.NAMES

# The writable columns of each table ("id" is the database's); they mirror migrations.py (a test checks).
EXPERIMENT_COLUMNS = ("description", "preset", "created", "updated", "yaml_path", "config_json", "config_hash")
RUN_COLUMNS = (
    "experiment_id", "kind", "status", "start_step", "end_step", "target_step", "started", "ended", "updated",
    "host", "pid", "argv", "octlm_version", "python_version", "torch_version", "device", "dtype", "threads",
    "git_commit", "git_dirty", "config_hash", "data_hash", "tokenizer_hash", "resumed_from", "latest_metrics",
    "final_metrics", "error", "pid_start",
)  # fmt: skip
CHECKPOINT_COLUMNS = (
    "experiment_id", "run_id", "step", "path", "sha256", "size", "tokens", "created", "config_hash",
    "data_hash", "tokenizer_hash", "metrics",
)  # fmt: skip
VERIFICATION_COLUMNS = ("experiment_id", "run_id", "kind", "verdict", "created", "details")
JSON_COLUMNS = frozenset({"argv", "latest_metrics", "final_metrics", "metrics", "details", "config_json"})
JSON_CELLS = (  # (table, column) of every JSON cell, config_json included
    ("experiments", "config_json"), ("runs", "argv"), ("runs", "latest_metrics"), ("runs", "final_metrics"),
    ("checkpoints", "metrics"), ("verifications", "details"),
)  # fmt: skip
TRAINING_KINDS = ("train", "resume")
SYNC_EXPERIMENT = (  # keeps ``updated`` when neither the config nor the description changed
    " on conflict(id) do update set description=excluded.description, preset=excluded.preset,"
    " yaml_path=excluded.yaml_path, config_json=excluded.config_json, config_hash=excluded.config_hash,"
    " updated=case when experiments.config_hash is excluded.config_hash"
    " and experiments.description is excluded.description then experiments.updated else excluded.updated end"
)

T = TypeVar("T")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _checked(table: str, fields: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    """``fields`` with its JSON columns encoded; ValueError naming the first key that is not a column."""
    for key in fields:
        if key not in allowed:
            raise ValueError(f"{table}: unknown column {key!r}")
    return {k: json.dumps(v) if k in JSON_COLUMNS and not isinstance(v, str) else v for k, v in fields.items()}


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its JSON columns decoded; a malformed cell reads as None."""
    for key in JSON_COLUMNS.intersection(row):
        if isinstance(row[key], str):
            try:
                row[key] = json.loads(row[key])
            except ValueError:
                row[key] = None
    return row


class Registry:
    def __init__(self, path: Path, *, create: bool = True, busy_timeout: float = BUSY_TIMEOUT_S):
        self.busy_timeout, self.path, self.read_only = busy_timeout, path, not create
        self.conn: sqlite3.Connection | None = None
        if not create and not path.exists():
            return  # every read answers empty; nothing is created
        try:
            self.conn = self._open_for_reading() if self.read_only else self._open_for_writing()
            self._migrate()
        except sqlite3.DatabaseError as error:
            raise Refused(f"{path}: cannot be opened as an octlm registry: {error}") from None
        except OSError as error:
            raise BadInput(f"{path}: cannot be created: {error.strerror}") from None

    # ------------------------------------------------------------------ plumbing

    def _open_for_writing(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None)
        conn.row_factory = sqlite3.Row
        self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open_for_reading(self) -> sqlite3.Connection:
        """``mode=ro``; ``immutable=1`` where a reader cannot create the WAL index (a read-only folder or medium)."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path))
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=self.busy_timeout, isolation_level=None)
        try:
            conn.execute("select count(*) from sqlite_master").fetchone()
        except sqlite3.OperationalError as error:
            conn.close()
            if "unable to open" not in str(error) and "readonly" not in str(error):
                raise
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def _retry(self, fn: Callable[[], T]) -> T:
        # journal_mode changes ignore the busy handler on a fresh file; retry briefly.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _connection(self) -> sqlite3.Connection:
        if self.conn is None:
            raise Refused(f"{self.path}: there is no registry here to write to")
        return self.conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        if self.conn is None:
            return []
        return [_decoded(dict(row)) for row in self.conn.execute(sql, params).fetchall()]

    def _applied(self) -> list[str]:
        sql = "select 1 from sqlite_master where type='table' and name='_sqlite_migrations'"
        if not self._rows(sql):
            return []
        rows = self._rows("select name from _sqlite_migrations where migration_set='octlm' order by id")
        return [row["name"] for row in rows]

    def _migrate(self) -> None:
        applied = self._applied()
        unknown = [name for name in applied if name not in KNOWN_MIGRATIONS]
        if unknown:
            raise Refused(
                f"{self.path}: written by a newer octlm (unknown schema migration {unknown[0]}); "
                "upgrade octlm to use this registry"
            )
        if len(applied) == len(KNOWN_MIGRATIONS):
            return
        # Imported only here: sqlite_utils stays out of `octlm show` and `octlm new` once migrated.
        from sqlite_utils import Database

        from .migrations import migrations

        if self.read_only:  # never write the file: read an up-to-date copy in memory
            memory = sqlite3.connect(":memory:", isolation_level=None)
            self._connection().backup(memory)
            self._connection().close()
            self.conn, memory.row_factory = memory, sqlite3.Row
        with self._transaction() as conn:
            migrations.apply(Database(conn))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (waits, never fails busy)."""
        conn = self._connection()
        try:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            raise
        except sqlite3.OperationalError as error:
            raise Refused(f"{self.path}: the registry cannot be written ({error}); nothing was recorded") from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ experiments

    def add_experiment(self, experiment_id: str, **fields: str) -> None:
        """Insert an experiment: ``description``, ``preset``, ``yaml_path``, ``config_json``, ``config_hash``."""
        self._put_experiment(experiment_id, fields, "")

    def sync_experiment(self, experiment_id: str, **fields: str) -> None:
        """Insert the experiment, or bring its row in line with its YAML file (fields as ``add_experiment``)."""
        self._put_experiment(experiment_id, fields, SYNC_EXPERIMENT)

    def _put_experiment(self, experiment_id: str, fields: dict[str, Any], on_conflict: str) -> None:
        stamp = now()
        row = _checked("experiments", {"created": stamp, "updated": stamp, **fields}, EXPERIMENT_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            conn.execute(
                f"insert into experiments (id, {columns}) values (?, {marks}){on_conflict}",
                (experiment_id, *row.values()),
            )

    def experiments(self) -> list[dict[str, Any]]:
        """Every experiment row, by ID (``config_json`` decoded, None when malformed)."""
        return self._rows("select * from experiments order by id")

    def experiment(self, experiment_id: str) -> dict[str, Any] | None:
        rows = self._rows("select * from experiments where id = ?", (experiment_id,))
        return rows[0] if rows else None

    def experiment_ids(self) -> list[str]:
        return [row["id"] for row in self._rows("select id from experiments order by id")]

    def configs(self) -> dict[str, dict[str, Any]]:
        """{experiment ID: its resolved config as registered}; a malformed config reads as {}."""
        rows = self._rows("select id, config_json from experiments")
        return {row["id"]: row["config_json"] if isinstance(row["config_json"], dict) else {} for row in rows}

    def summary_rows(self) -> list[dict[str, Any]]:
        """The ``experiment_summary`` view: one row per experiment with its latest training run and verdict."""
        return self._rows("select * from experiment_summary order by id")

    def malformed_cells(self) -> list[tuple[str, Any, str]]:
        """(table, row id, column) of each JSON cell that is not valid JSON (reads give None; doctor repairs)."""
        sql = " union all ".join(
            f"select '{t}' as t, id, '{c}' as c from {t} where {c} is not null and not json_valid({c})"
            for t, c in JSON_CELLS
        )
        return [(row["t"], row["id"], row["c"]) for row in self._rows(sql)]

    def clear_cell(self, table: str, row_id: Any, column: str) -> None:
        """Set a JSON cell to null (``doctor --repair`` on a malformed one); only the cells of JSON_CELLS."""
        if (table, column) not in JSON_CELLS:
            raise ValueError(f"{table}.{column}: not a JSON cell")
        with self._transaction() as conn:
            conn.execute(f"update {table} set {column} = null where id = ?", (row_id,))

    # ------------------------------------------------------------------ runs

    def start_run(self, experiment_id: str, kind: str, **fields: Any) -> int:
        stamp = now()
        defaults = {"status": "running", "started": stamp, "updated": stamp, "host": socket.gethostname()}
        fields = {"experiment_id": experiment_id, "kind": kind, **defaults, "pid": os.getpid(), **fields}
        fields.setdefault("pid_start", start_time(fields["pid"]) if fields["pid"] else None)  # liveness
        row = _checked("runs", fields, RUN_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            self._mark_crashed(conn, experiment_id)
            cursor = conn.execute(f"insert into runs ({columns}) values ({marks})", tuple(row.values()))
            return int(cursor.lastrowid or 0)

    def update_run(self, run_id: int, **fields: Any) -> None:
        row = _checked("runs", {**fields, "updated": now()}, RUN_COLUMNS)
        assignments = ", ".join(f"{key} = ?" for key in row)  # keys are checked columns, never user text
        with self._transaction() as conn:
            conn.execute(f"update runs set {assignments} where id = ?", (*row.values(), run_id))

    def finish_run(self, run_id: int, status: str, **fields: Any) -> None:
        self.update_run(run_id, status=status, ended=now(), **fields)

    def runs(self, experiment_id: str) -> list[dict[str, Any]]:
        """The runs of an experiment, oldest first, each with its effective status."""
        rows = self._rows("select * from runs where experiment_id = ? order by id", (experiment_id,))
        return [effective_status(row) for row in rows]

    def running_runs(self) -> list[dict[str, Any]]:
        """Runs recorded as ``running``, each with its effective status (a dead process reads ``crashed``)."""
        return [effective_status(row) for row in self._rows("select * from runs where status = 'running' order by id")]

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
        fields = _checked("checkpoints", {"created": now(), **row}, CHECKPOINT_COLUMNS)
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

    def checkpoints(self, experiment_id: str) -> list[dict[str, Any]]:
        return self._rows("select * from checkpoints where experiment_id = ? order by step", (experiment_id,))

    def digests(self, root: Path, experiment_id: str) -> dict[str, str]:
        """{absolute checkpoint path: sha256} as registered, for verifying files before loading."""
        return {str(root / row["path"]): row["sha256"] for row in self.checkpoints(experiment_id)}

    # ------------------------------------------------------------------ verdicts

    def add_verification(
        self, experiment_id: str, kind: str, verdict: str, details: dict[str, Any], run_id: int | None = None
    ) -> None:
        fields = {"experiment_id": experiment_id, "run_id": run_id, "kind": kind, "verdict": verdict}
        row = _checked("verifications", {**fields, "created": now(), "details": details}, VERIFICATION_COLUMNS)
        columns, marks = ", ".join(row), ", ".join("?" for _ in row)
        with self._transaction() as conn:
            conn.execute(f"insert into verifications ({columns}) values ({marks})", tuple(row.values()))

    def verifications(self, experiment_id: str) -> list[dict[str, Any]]:
        """Verdicts of an experiment, oldest first; ``details`` is a dict ({} when absent or unreadable)."""
        rows = self._rows("select * from verifications where experiment_id = ? order by id", (experiment_id,))
        return [{**row, "details": row["details"] if isinstance(row["details"], dict) else {}} for row in rows]
