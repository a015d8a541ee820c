"""A sweep and its trials as rows (torch-free; the tables of ``m009_sweeps``): their types, a sweep made in one
transaction (every trial's experiment row, the sweep's row and the trial rows), trials added as an Optuna sweep asks,
a sweep merged from another home by its UUID (``sweep unpack``), halving's decisions restored after the registry's
loss, and the reads. The queue's claims are ``queue``'s. ``Registry`` inherits both."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from octlm.core.errors import BadInput, Refused
from octlm.core.liveness import effective_status
from octlm.store.base import EXPERIMENT_COLUMNS, Fields, RegistryBase, checked, decoded, encode, now, writable
from octlm.store.sweeps.records import (
    DecisionRow,
    QueuedTrial,
    RankedGroup,
    SweepFields,
    SweepRow,
    TrialFields,
    TrialRow,
)
from octlm.store.sweeps.specs import check_spec, describe


@dataclass(frozen=True)
class Decision:
    """What ``decide`` concludes once a rung is complete: the ranking, who trains on to ``next_step`` and who stops
    at ``step``. ``late``: the rung was decided before, and this places the trials that ended there since (a failed
    one retried): the decision's row is amended (its ranking, its promoted), never made a second time."""

    rung: int
    step: int  # the rung's step
    ranking: list[RankedGroup]
    promoted: list[str]  # experiment IDs
    next_step: int  # the step the promoted train to
    stopped: list[str] = field(default_factory=list)  # experiment IDs that end at this rung
    late: bool = False


# (sweep, its trials, the decisions taken so far) -> the next decision, or None
Decide = Callable[[SweepRow, list[TrialRow], list[DecisionRow]], Decision | None]
# What moves with a sweep between homes (``sweep pack``) and what its record beside the registry keeps (``kept``):
# ``specs.SWEEP_ROW``, ``TRIAL_ROW`` and ``DECISION_ROW`` check each (a test holds them to these).
SWEEP_FIELDS = tuple(SweepFields.__annotations__)  # name, uuid, base, description, spec, created
TRIAL_FIELDS = tuple(TrialFields.__annotations__)  # experiment_id, position, params, ... status, rung, ... error
DECISION_FIELDS = ("rung", "step", "ranking", "promoted", "created")
OPEN = "select id, trial_id, host, pid, pid_start, threads, device, claimed from sweep_claims where released is null"
TRIALS = (
    "select t.*, c.id as claim_id, c.host, c.pid, c.pid_start, c.threads, c.device, c.claimed"
    f" from sweep_trials t left join ({OPEN}) c on c.trial_id = t.id"
)


def picked(row: Mapping[str, object], keys: Sequence[str]) -> dict[str, object]:
    """The ``keys`` of a row (``SWEEP_FIELDS``, ``TRIAL_FIELDS``, ...): what a pack or a kept record carries."""
    return {key: row[key] for key in keys}


def set_spec(conn: sqlite3.Connection, sweep_id: int, spec: Any) -> None:
    """A sweep's spec replaced, and its description with it, inside the caller's transaction (extend, retry, the
    shipped mark)."""
    sql = "update sweeps set spec = ?, description = ?, updated = ? where id = ?"
    conn.execute(sql, (encode(spec), describe(spec), now(), sweep_id))


def shipped_trials(conn: sqlite3.Connection) -> set[str]:
    """The experiment IDs of the trials every sweep marks shipped (``sweep pack``), not merged back yet."""
    away: set[str] = set()
    for row in conn.execute("select spec from sweeps").fetchall():
        spec = decoded(dict(row))["spec"]
        shipped = spec.get("shipped") if isinstance(spec, dict) else None
        if isinstance(shipped, dict) and isinstance(shipped.get("trials"), list):
            away.update(str(trial) for trial in shipped["trials"])
    return away


def claim_is_dead(row: Fields) -> bool:
    """A claim whose process is gone (on this host, by pid and start time): its trial may be taken over."""
    probe = {"status": "running", "host": row.get("host"), "pid": row.get("pid"), "pid_start": row.get("pid_start")}
    return bool(effective_status(probe)["status"] == "crashed")


def _progress(trial: dict[str, Any]) -> tuple[int, bool]:
    """How far a trial got: its rung, then whether it ended there (done, failed or stopped)."""
    return int(trial.get("rung") or 0), trial.get("status") in ("done", "failed", "stopped")


def _unchanged(
    conn: sqlite3.Connection, sweep_id: int, members: Sequence[tuple[Fields, Fields]], groups: int | None, was: Any
) -> bool:
    """Whether the sweep is still as the ``members`` to add were made from it (see ``SweepRows.add_trials``)."""
    found = conn.execute("select group_key, replicate from sweep_trials where sweep_id = ?", (sweep_id,))
    have = {(row["group_key"], row["replicate"]) for row in found.fetchall()}
    if any((trial["group_key"], trial.get("replicate", 0)) in have for _, trial in members):
        return False
    if groups is not None and len({key for key, _ in have}) != groups:
        return False
    row = conn.execute("select spec from sweeps where id = ?", (sweep_id,)).fetchone()
    return was is None or (row is not None and (decoded(dict(row))["spec"] or {}) == was)


def _insert(conn: sqlite3.Connection, table: str, fields: dict[str, Any]) -> int:
    row = checked(table, fields, writable(table))
    columns, marks = ", ".join(row), ", ".join("?" for _ in row)
    cursor = conn.execute(f"insert into {table} ({columns}) values ({marks})", tuple(row.values()))
    return int(cursor.lastrowid or 0)


class SweepRows(RegistryBase):
    """The sweeps' rows: made, merged, restored and read (``Registry`` inherits them; the queue's claims are
    ``queue.QueueRows``)."""

    def add_sweep(self, sweep: Fields, members: Sequence[tuple[Fields, Fields]]) -> int:
        """The sweep (``name``, ``base``, ``description``, ``spec``) with its trials, each (experiment row fields
        with ``id``, trial fields), in one transaction; BadInput when the name is taken. The sweep's id."""
        stamp = now()
        with self._transaction() as conn:
            if conn.execute("select 1 from sweeps where name = ?", (sweep["name"],)).fetchone():
                raise BadInput(f"sweep {sweep['name']} already exists: choose another name")
            fields = {"uuid": str(uuid.uuid4()), "created": stamp, "updated": stamp, **sweep}
            sweep_id = _insert(conn, "sweeps", fields)
            self._add_members(conn, sweep_id, members, 0)
            return sweep_id

    def add_trials(
        self,
        sweep_id: int,
        members: Sequence[tuple[Fields, Fields]],
        expect_groups: int | None = None,
        spec: Any = None,
        was: Any = None,
    ) -> bool:
        """More trials for a sweep (one that asks as it goes, or ``sweep extend`` with the grown ``spec``), in one
        transaction, only while none of their (configuration, replicate) pairs is there yet, the sweep still holds the
        ``expect_groups`` configurations they were made from (an ask) and, given ``was``, its spec is still ``was``
        (``extend``: no other extend grew it and no ``sweep pack`` marked it since it was read): False when another
        process got there first (nothing is written then). Checked inside the transaction, under the write lock: two
        processes that read the same sweep never both add to it."""
        with self._transaction() as conn:
            if not _unchanged(conn, sweep_id, members, expect_groups, was):
                return False
            start = conn.execute(
                "select coalesce(max(position), -1) + 1 from sweep_trials where sweep_id = ?", (sweep_id,)
            )
            self._add_members(conn, sweep_id, members, int(start.fetchone()[0]))
            if spec is not None:
                set_spec(conn, sweep_id, spec)
            return True

    def add_experiments(self, rows: Sequence[Fields]) -> None:
        """Experiment rows (fields as ``add_experiment``, with ``id``) in one transaction (``new --seeds``)."""
        stamp = now()
        with self._transaction() as conn:
            for row in rows:
                self._insert_experiment(conn, {"created": stamp, "updated": stamp, "uuid": str(uuid.uuid4()), **row})

    def _add_members(
        self, conn: sqlite3.Connection, sweep_id: int, members: Sequence[tuple[Fields, Fields]], at: int
    ) -> None:
        stamp = now()
        for position, (experiment, trial) in enumerate(members, at):
            self._insert_experiment(conn, {"created": stamp, "updated": stamp, "uuid": str(uuid.uuid4()), **experiment})
            base = {"sweep_id": sweep_id, "experiment_id": experiment["id"], "position": position, "status": "queued"}
            _insert(conn, "sweep_trials", {"rung": 0, "replicate": 0, "updated": stamp, **base, **trial})

    @staticmethod
    def _insert_experiment(conn: sqlite3.Connection, row: Fields) -> None:
        fields = checked("experiments", {k: v for k, v in row.items() if k != "id"}, EXPERIMENT_COLUMNS)
        columns, marks = ", ".join(fields), ", ".join("?" for _ in fields)
        conn.execute(f"insert into experiments (id, {columns}) values (?, {marks})", (row["id"], *fields.values()))

    def merge_sweep(self, sweep: Fields, trials: Sequence[Fields]) -> dict[str, str]:
        """A sweep shipped from another home (``sweep unpack``), matched by its UUID, in one transaction: its row
        when new here, and each trial's row where the shipped one got further (a later rung, or ended where this
        one waits); a trial shipped running arrives queued (claims stay where they were). {trial ID: new |
        further | kept}. Refused when the name is another sweep's here; the trials' experiments must be here."""
        merged: dict[str, str] = {}
        with self._transaction() as conn:
            found = conn.execute(
                "select id, uuid from sweeps where name = ? or uuid = ?", (sweep["name"], sweep["uuid"])
            )
            row = found.fetchone()
            if row is not None and row["uuid"] != sweep["uuid"]:
                raise Refused(f"sweep {sweep['name']} is another sweep here (another UUID): nothing was changed")
            sweep_id = row["id"] if row is not None else _insert(conn, "sweeps", {**sweep, "updated": now()})
            for trial in trials:
                trial_id = str(trial["experiment_id"])
                fields = {**trial, "status": "queued" if trial["status"] == "running" else trial["status"]}
                here = conn.execute(
                    "select id, rung, status from sweep_trials where sweep_id = ? and experiment_id = ?",
                    (sweep_id, trial["experiment_id"]),
                ).fetchone()
                if here is None:
                    _insert(conn, "sweep_trials", {**fields, "sweep_id": sweep_id, "updated": now()})
                    merged[trial_id] = "new"
                elif _progress(fields) > _progress(dict(here)):
                    row = checked("sweep_trials", {**fields, "updated": now()}, writable("sweep_trials"))
                    sets = ", ".join(f"{key} = ?" for key in row)
                    conn.execute(f"update sweep_trials set {sets} where id = ?", (*row.values(), here["id"]))
                    merged[trial_id] = "further"
                else:
                    merged[trial_id] = "kept"
        return merged

    def restore_decisions(self, sweep_id: int, decisions: Sequence[Fields]) -> int:
        """Halving's decisions kept beside the registry (``doctor --repair`` after its loss), those not here yet, in
        one transaction; how many went in."""
        added = 0
        with self._transaction() as conn:
            for decision in decisions:
                here = conn.execute(
                    "select 1 from sweep_decisions where sweep_id = ? and rung = ?", (sweep_id, decision["rung"])
                )
                if here.fetchone() is None:
                    _insert(
                        conn,
                        "sweep_decisions",
                        {key: decision.get(key) for key in DECISION_FIELDS} | {"sweep_id": sweep_id},
                    )
                    added += 1
        return added

    # ------------------------------------------------------------------ reads

    def sweep(self, name: str) -> SweepRow | None:
        """The sweep named ``name``, its spec decoded and checked (``specs.check_spec``: BadInput naming the
        registry, the sweep and the key), or None. Every command that reads one sweep reads it here."""
        rows = self._rows("select * from sweeps where name = ?", (name,)) if self._has_sweeps() else []
        if not rows:
            return None
        return cast("SweepRow", {**rows[0], "spec": check_spec(rows[0]["spec"], f"{self.path}: sweep {name}")})

    def sweeps(self) -> list[SweepRow]:
        return cast("list[SweepRow]", self._rows("select * from sweeps order by id") if self._has_sweeps() else [])

    def _has_sweeps(self) -> bool:
        """False on a registry a read-only opening left without m009 (every read then answers empty)."""
        return bool(self._rows("select 1 from sqlite_master where type = 'table' and name = 'sweeps'"))

    def trials(self, sweep_id: int) -> list[QueuedTrial]:
        """A sweep's trials in queue order, each with its open claim's ``claim_id``, ``host``, ``pid``, ``threads``,
        ``device`` and ``claimed`` (None when unclaimed) and ``lost``: the claim's process is gone."""
        rows = self._rows(f"{TRIALS} where t.sweep_id = ? order by t.position", (sweep_id,))
        found = [{**row, "lost": row["claim_id"] is not None and claim_is_dead(row)} for row in rows]
        return cast("list[QueuedTrial]", found)

    def sweeps_of(self, experiment_id: str) -> list[str]:
        """The names of the sweeps ``experiment_id`` is a trial of."""
        if not self._has_sweeps():
            return []
        sql = "select s.name from sweep_trials t join sweeps s on s.id = t.sweep_id where t.experiment_id = ?"
        return [row["name"] for row in self._rows(sql, (experiment_id,))]

    def decisions(self, sweep_id: int) -> list[DecisionRow]:
        sql = "select * from sweep_decisions where sweep_id = ? order by rung"
        return cast("list[DecisionRow]", self._rows(sql, (sweep_id,)))

    def rung_value(self, experiment_id: str, step: int, metric: str) -> float | None:
        """``metric`` (eval_loss, ...) of the experiment's newest metrics row at ``step``."""
        if metric not in writable("metrics"):
            raise BadInput(f"--metric {metric}: not a metric octlm records")
        sql = (
            f"select {metric} as v from metrics where experiment_id = ? and track = 'train' and step = ?"
            f" and {metric} is not null order by id desc limit 1"
        )
        rows = self._rows(sql, (experiment_id, step))
        return rows[0]["v"] if rows else None
