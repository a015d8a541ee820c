"""A run's rows in the registry (torch-free): the run row a training, resuming or overfitting process opens and
closes (a dead process's reads ``crashed``), the checkpoints registered with their digests, the verdicts of
``verify-resume`` and ``eval``, and the run-file records as rows of ``metrics``. ``Registry`` inherits them.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from octlm.core.liveness import effective_status, start_time
from octlm.core.records import NESTED_FIELDS, RunRecord
from octlm.store.base import (
    CHECKPOINT_COLUMNS,
    METRIC_COLUMNS,
    METRIC_TABLE_FIELDS,
    METRIC_TRACKS,
    RUN_COLUMNS,
    TRAINING_KINDS,
    VERIFICATION_COLUMNS,
    RegistryBase,
    checked,
    new_uuid,
    now,
)
from octlm.store.migrations import CheckpointRow, MetricRow, RunRow, VerificationRow


class RunRows(RegistryBase):
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

    def newest_records(self) -> dict[str, RunRecord]:
        """{experiment ID: the newest record of its newest training run}, whole: its run row's ``latest_metrics``, every
        field the run wrote (a newer octlm's too), so that the list reads a figure no registry column holds. An
        experiment with no training run, or whose cell is damaged, is left out."""
        newest = "select max(n.id) from runs n where n.experiment_id = r.experiment_id and n.kind in (?, ?)"
        sql = f"select r.experiment_id, r.latest_metrics from runs r where r.id = ({newest})"
        found = self._rows(sql, TRAINING_KINDS)
        records = {row["experiment_id"]: row["latest_metrics"] for row in found}
        return {
            experiment_id: cast(RunRecord, record)
            for experiment_id, record in records.items()
            if isinstance(record, dict)
        }

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
        file); ValueError for another key that is not one of ``METRIC_TABLE_FIELDS`` (a record may lack any of them)
        or a track other than train and overfit."""
        if track not in METRIC_TRACKS:
            raise ValueError(f"metrics: unknown track {track!r}; one of {', '.join(METRIC_TRACKS)}")
        unknown = [key for key in record if key not in METRIC_TABLE_FIELDS and key not in NESTED_FIELDS]
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


def _verdict_rows(rows: list[dict[str, Any]]) -> list[VerificationRow]:
    decoded = [{**row, "details": row["details"] if isinstance(row["details"], dict) else {}} for row in rows]
    return cast("list[VerificationRow]", decoded)
