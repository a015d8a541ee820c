"""The SQLite run registry: experiments, runs, checkpoints and verdicts.

Reads and writes go through the standard ``sqlite3`` module with WAL and a busy
timeout, writes inside ``BEGIN IMMEDIATE`` transactions, so many octlm processes
on one box never fail with "database is locked". The schema is owned by
``migrations.py`` (sqlite-utils), imported only when a migration is pending, so
``octlm show`` stays light. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from .errors import BadInput, Refused

BUSY_TIMEOUT_S = 60.0
KNOWN_MIGRATIONS = ("m001_initial", "m002_summary_view")  # mirrors migrations.NAMES (a test checks)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Registry:
    def __init__(self, path: Path, *, create: bool = True):
        self.path = path
        if not create and not path.exists():
            self.conn = None
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self._retry(lambda: self.conn.execute("PRAGMA journal_mode=WAL"))
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as error:
            raise Refused(f"{path}: cannot be opened as an octlm registry: {error}") from None
        except OSError as error:
            raise BadInput(f"{path}: cannot be created: {error.strerror}") from None

    # ------------------------------------------------------------------ plumbing

    def _retry(self, fn: Any) -> Any:
        # journal_mode changes ignore the busy handler on a fresh file; retry briefly.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _applied(self) -> list[str]:
        exists = self.conn.execute(
            "select 1 from sqlite_master where type='table' and name='_sqlite_migrations'"
        ).fetchone()
        if not exists:
            return []
        rows = self.conn.execute(
            "select name from _sqlite_migrations where migration_set='octlm' order by id"
        ).fetchall()
        return [row[0] for row in rows]

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
        from sqlite_utils import Database

        from .migrations import migrations

        with self.transaction():
            migrations.apply(Database(self.conn))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (waits, never fails busy)."""
        try:
            self._retry(lambda: self.conn.execute("BEGIN IMMEDIATE"))
            try:
                yield self.conn
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
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

    def query(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        if self.conn is None:
            return []
        return [dict(row) for row in self.conn.execute(sql, params).fetchall()]

    # ------------------------------------------------------------------ experiments

    def add_experiment(self, experiment_id: str, *, description: str, preset: str, yaml_path: str,
                       config_json: str, config_hash: str) -> None:
        stamp = now()
        with self.transaction() as conn:
            conn.execute(
                "insert into experiments (id, description, preset, created, updated, yaml_path, "
                "config_json, config_hash) values (?, ?, ?, ?, ?, ?, ?, ?)",
                (experiment_id, description, preset, stamp, stamp, yaml_path, config_json, config_hash),
            )

    def sync_experiment(self, experiment_id: str, *, description: str, preset: str, yaml_path: str,
                        config_json: str, config_hash: str) -> None:
        """Insert the experiment, or bring its row in line with its YAML file."""
        stamp = now()
        with self.transaction() as conn:
            conn.execute(
                "insert into experiments (id, description, preset, created, updated, yaml_path, "
                "config_json, config_hash) values (?, ?, ?, ?, ?, ?, ?, ?) "
                "on conflict(id) do update set description=excluded.description, preset=excluded.preset, "
                "yaml_path=excluded.yaml_path, config_json=excluded.config_json, "
                "config_hash=excluded.config_hash, "
                "updated=case when experiments.config_hash is excluded.config_hash "
                "and experiments.description is excluded.description then experiments.updated "
                "else excluded.updated end",
                (experiment_id, description, preset, stamp, stamp, yaml_path, config_json, config_hash),
            )

    def experiment(self, experiment_id: str) -> dict[str, Any] | None:
        rows = self.query("select * from experiments where id = ?", (experiment_id,))
        return rows[0] if rows else None

    def experiment_ids(self) -> list[str]:
        return [row["id"] for row in self.query("select id from experiments")]

    def summaries(self) -> list[dict[str, Any]]:
        return self.query("select * from experiment_summary")

    # ------------------------------------------------------------------ runs

    def start_run(self, experiment_id: str, kind: str, **fields: Any) -> int:
        stamp = now()
        row = {
            "experiment_id": experiment_id, "kind": kind, "status": "running",
            "started": stamp, "updated": stamp, "host": socket.gethostname(), "pid": os.getpid(),
            **fields,
        }
        for key in ("argv", "latest_metrics", "final_metrics"):
            if key in row and not isinstance(row[key], str):
                row[key] = json.dumps(row[key])
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as conn:
            self._mark_crashed(conn, experiment_id)
            cursor = conn.execute(f"insert into runs ({columns}) values ({marks})", tuple(row.values()))
            return int(cursor.lastrowid)

    def update_run(self, run_id: int, **fields: Any) -> None:
        fields["updated"] = now()
        for key in ("latest_metrics", "final_metrics"):
            if key in fields and not isinstance(fields[key], str):
                fields[key] = json.dumps(fields[key])
        assignments = ", ".join(f"{key} = ?" for key in fields)  # keys are ours, never user text
        with self.transaction() as conn:
            conn.execute(f"update runs set {assignments} where id = ?", (*fields.values(), run_id))

    def finish_run(self, run_id: int, status: str, **fields: Any) -> None:
        self.update_run(run_id, status=status, ended=now(), **fields)

    def runs(self, experiment_id: str) -> list[dict[str, Any]]:
        rows = self.query("select * from runs where experiment_id = ? order by id", (experiment_id,))
        return [effective_status(row) for row in rows]

    def _mark_crashed(self, conn: sqlite3.Connection, experiment_id: str) -> None:
        for row in conn.execute(
            "select id, pid, host, status from runs where experiment_id = ? and status = 'running'", (experiment_id,)
        ).fetchall():
            if effective_status(dict(row))["status"] == "crashed":
                conn.execute(
                    "update runs set status = 'crashed', ended = ?, updated = ? where id = ?",
                    (now(), now(), row["id"]),
                )

    # ------------------------------------------------------------------ checkpoints

    def add_checkpoint(self, **row: Any) -> None:
        row.setdefault("created", now())
        if "metrics" in row and not isinstance(row["metrics"], str):
            row["metrics"] = json.dumps(row["metrics"])
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        updates = ", ".join(f"{key} = excluded.{key}" for key in row if key != "path")
        with self.transaction() as conn:
            conn.execute(
                f"insert into checkpoints ({columns}) values ({marks}) on conflict(path) do update set {updates}",
                tuple(row.values()),
            )

    def remove_checkpoint(self, path: str) -> None:
        with self.transaction() as conn:
            conn.execute("delete from checkpoints where path = ?", (path,))

    def checkpoints(self, experiment_id: str) -> list[dict[str, Any]]:
        return self.query("select * from checkpoints where experiment_id = ? order by step", (experiment_id,))

    def digests(self, root: Path, experiment_id: str) -> dict[str, str]:
        """{absolute checkpoint path: sha256} as registered, for verifying files before loading."""
        return {str(root / row["path"]): row["sha256"] for row in self.checkpoints(experiment_id)}

    # ------------------------------------------------------------------ verdicts

    def add_verification(self, experiment_id: str, kind: str, verdict: str, details: dict[str, Any],
                         run_id: int | None = None) -> None:
        with self.transaction() as conn:
            conn.execute(
                "insert into verifications (experiment_id, run_id, kind, verdict, created, details) "
                "values (?, ?, ?, ?, ?, ?)",
                (experiment_id, run_id, kind, verdict, now(), json.dumps(details)),
            )

    def verifications(self, experiment_id: str) -> list[dict[str, Any]]:
        return self.query("select * from verifications where experiment_id = ? order by id", (experiment_id,))


def effective_status(row: dict[str, Any]) -> dict[str, Any]:
    """A run left ``running`` by a process that is gone (same host) reads as ``crashed``."""
    if row.get("status") == "running" and row.get("host") == socket.gethostname():
        pid = row.get("pid")
        if pid and pid != os.getpid() and not pid_alive(int(pid)):
            row = {**row, "status": "crashed"}
    return row
