"""The registry's side of moving experiments between homes (``registry export/import``, ``pack/unpack``): the
raw rows of an experiment, the UUIDs and checkpoint paths already here, and ``merge``, which writes a planned
import in one transaction. Never imports torch; the records and their checks are ``exchange``'s. Its reads return
the rows typed (``migrations.ExperimentRow`` ... ``MetricRow``), for ``exchange`` to build records from.

Rows are matched by UUID (experiments, runs, verdicts, notes) or by path (checkpoints): a row already here is
never written again, so merging the same plan twice changes nothing; but a run that an earlier import found still
running in its home (its status ``unknown (host ...)``, ``runs_in_flight``) is brought up to date when a later
import shows it further (``Merge.run_updates``: a trial's checkpoints shipped back to its driver as it trains, then its
end).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any, Literal, cast, overload

from octlm.store.base import (
    CHECKPOINT_COLUMNS,
    EXPERIMENT_COLUMNS,
    METRIC_COLUMNS,
    NOTE_COLUMNS,
    RUN_COLUMNS,
    VERIFICATION_COLUMNS,
    checked,
)
from octlm.store.migrations import CheckpointRow, ExperimentRow, MetricRow, NoteRow, RunRow, VerificationRow
from octlm.store.registry import Registry

# The tables with rows of an experiment that an export carries (metrics go with their run file).
EXPORTED = ("runs", "checkpoints", "verifications", "notes", "metrics")
UUID_TABLES = ("experiments", "runs", "verifications", "notes")


@dataclass
class Merge:
    """What an import writes. Child rows name their run by ``run_uuid`` (its local id is looked up in the
    transaction, after the runs are in); ``metrics`` replaces the rows of (experiment, track) wholesale."""

    experiments: list[dict[str, Any]] = field(default_factory=list)
    former_ids: dict[str, list[str]] = field(default_factory=dict)  # existing experiment -> its new former IDs
    runs: list[dict[str, Any]] = field(default_factory=list)
    run_updates: list[dict[str, Any]] = field(default_factory=list)  # runs here (by uuid) brought up to date
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    verifications: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)

    def empty(self) -> bool:
        rows = (self.experiments, self.runs, self.run_updates, self.checkpoints, self.verifications, self.notes)
        return not any(rows) and not self.former_ids and not self.metrics


class ExchangeRegistry(Registry):
    def experiment_row(self, experiment_id: str) -> ExperimentRow | None:
        """The experiment's row (as ``experiment``), typed."""
        rows = self._rows("select * from experiments where id = ?", (experiment_id,))
        return cast(ExperimentRow, rows[0]) if rows else None

    @overload
    def raw_rows(self, table: Literal["runs"], experiment_id: str) -> list[RunRow]: ...
    @overload
    def raw_rows(self, table: Literal["checkpoints"], experiment_id: str) -> list[CheckpointRow]: ...
    @overload
    def raw_rows(self, table: Literal["verifications"], experiment_id: str) -> list[VerificationRow]: ...
    @overload
    def raw_rows(self, table: Literal["notes"], experiment_id: str) -> list[NoteRow]: ...
    @overload
    def raw_rows(self, table: Literal["metrics"], experiment_id: str) -> list[MetricRow]: ...
    def raw_rows(self, table: str, experiment_id: str) -> list[Any]:
        """Every row of one experiment in ``table`` (one of ``EXPORTED``), as stored (statuses not re-derived)."""
        if table not in EXPORTED:
            raise ValueError(f"{table}: not an exported table")
        return self._rows(f"select * from {table} where experiment_id = ? order by id", (experiment_id,))

    def by_uuid(self, table: str) -> dict[str, object]:
        """{uuid: id} of every row of ``table`` (one of ``UUID_TABLES``) that has a UUID (an experiment's ID is its
        name, every other row's a number)."""
        if table not in UUID_TABLES:
            raise ValueError(f"{table}: has no uuid column")
        return {row["uuid"]: row["id"] for row in self._rows(f"select id, uuid from {table} where uuid is not null")}

    def runs_in_flight(self) -> dict[str, int | None]:
        """{uuid: end_step} of the runs an import found still running in their home (status ``unknown (host
        ...)``): a later import that shows one further brings it up to date (``Merge.run_updates``)."""
        sql = "select uuid, end_step from runs where uuid is not null and status like 'unknown (%'"
        return {row["uuid"]: row["end_step"] for row in self._rows(sql)}

    def checkpoint_paths(self) -> set[str]:
        return {row["path"] for row in self._rows("select path from checkpoints")}

    def merge(self, plan: Merge) -> dict[str, int]:
        """Write ``plan`` in one transaction; {table: rows written}. A row already here (its UUID, its path)
        is skipped; an experiment ID taken meanwhile fails the whole transaction (sqlite3.IntegrityError)."""
        written: dict[str, int] = {}
        with self._transaction() as conn:
            for row in plan.experiments:
                fields = checked("experiments", {k: v for k, v in row.items() if k != "id"}, EXPERIMENT_COLUMNS)
                _insert(conn, "experiments", {"id": row["id"], **fields}, "", written)
            for experiment_id, former in plan.former_ids.items():
                fields = checked("experiments", {"former_ids": former}, EXPERIMENT_COLUMNS)
                conn.execute(
                    "update experiments set former_ids = ? where id = ?", (fields["former_ids"], experiment_id)
                )
            for row in plan.runs:
                _insert(conn, "runs", checked("runs", row, RUN_COLUMNS), " on conflict(uuid) do nothing", written)
            for row in plan.run_updates:
                fields = checked("runs", {k: v for k, v in row.items() if k != "uuid"}, RUN_COLUMNS)
                sets = ", ".join(f"{column} = ?" for column in fields)  # checked columns, never user text
                cursor = conn.execute(f"update runs set {sets} where uuid = ?", (*fields.values(), row["uuid"]))
                written["runs"] = written.get("runs", 0) + max(cursor.rowcount, 0)
            run_ids = _run_ids(conn)
            for table, rows, columns, conflict in (
                ("checkpoints", plan.checkpoints, CHECKPOINT_COLUMNS, "path"),
                ("verifications", plan.verifications, VERIFICATION_COLUMNS, "uuid"),
                ("notes", plan.notes, NOTE_COLUMNS, "uuid"),
            ):
                for row in rows:
                    fields = checked(table, _with_run_id(row, run_ids, table != "notes"), columns)
                    _insert(conn, table, fields, f" on conflict({conflict}) do nothing", written)
            self._replace_metrics(conn, plan.metrics, run_ids, written)
        return {table: count for table, count in written.items() if count}

    def _replace_metrics(
        self,
        conn: sqlite3.Connection,
        metrics: dict[tuple[str, str], list[dict[str, Any]]],
        run_ids: dict[str, int],
        written: dict[str, int],
    ) -> None:
        for (experiment_id, track), rows in metrics.items():
            conn.execute("delete from metrics where experiment_id = ? and track = ?", (experiment_id, track))
            for row in rows:
                fields = {"experiment_id": experiment_id, "track": track, **_with_run_id(row, run_ids, True)}
                _insert(conn, "metrics", checked("metrics", fields, METRIC_COLUMNS), "", written)


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any], conflict: str, written: dict[str, int]) -> None:
    columns, marks = ", ".join(row), ", ".join("?" for _ in row)  # keys are checked columns, never user text
    cursor = conn.execute(f"insert into {table} ({columns}) values ({marks}){conflict}", tuple(row.values()))
    written[table] = written.get(table, 0) + max(cursor.rowcount, 0)


def _run_ids(conn: sqlite3.Connection) -> dict[str, int]:
    return {row[1]: row[0] for row in conn.execute("select id, uuid from runs where uuid is not null").fetchall()}


def _with_run_id(row: dict[str, Any], run_ids: dict[str, int], has_run: bool) -> dict[str, Any]:
    """``row`` with its ``run_uuid`` turned into this registry's ``run_id`` (None when the run is not here)."""
    fields = {k: v for k, v in row.items() if k != "run_uuid"}
    if has_run:
        fields["run_id"] = run_ids.get(row.get("run_uuid") or "")
    return fields
