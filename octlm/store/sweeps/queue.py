"""The durable queue's SQL (torch-free): a trial claimed inside one ``BEGIN IMMEDIATE`` transaction (the first
queued, or running under a claim whose process is gone: ``core.liveness``), at most one open claim per trial (a unique
index), a claim settled with its trial's outcome and, in the same transaction, halving's decisions taken by the
caller's ``decide``, so a rung is decided exactly once. Claims stay as rows once released: the queue's history.
``Registry`` inherits these."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Collection
from typing import Any, cast

from octlm.core.errors import BadInput
from octlm.store.base import RegistryBase, checked, decoded, encode, now, writable
from octlm.store.sweeps.records import (
    ClaimedTrial,
    ClaimRow,
    DecisionRow,
    Retried,
    RetriedTrial,
    Shipped,
    SweepRow,
    SweepSpec,
    TrialRow,
    Worker,
)
from octlm.store.sweeps.rows import TRIALS, Decide, Decision, _insert, claim_is_dead, set_spec, shipped_trials
from octlm.store.sweeps.specs import check_spec

FAILED_LINE = re.compile(r"\d\d:\d\d:\d\d failed: (.+)")  # a worker's last word on a trial in its log
REASON_CHARS = 160


def reason_of(error: str | None) -> str:
    """Why a trial failed, on one line: the message of the last ``HH:MM:SS failed: ...`` line of the log tail its
    row keeps (the first line of that message), else its last line, shortened to ``REASON_CHARS``; "" for none."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    found = [m.group(1) for m in map(FAILED_LINE.fullmatch, lines) if m]
    reason = (found or lines or [""])[-1]
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3].rstrip() + "..."


def _record(conn: sqlite3.Connection, sweep_id: int, decision: Decision) -> None:
    """A decision's row (a ``late`` one amends the rung's row: a rung is decided once, by its unique index), its
    stopped trials stopped and its promoted ones queued for the next rung."""
    if decision.late:
        sql = "update sweep_decisions set ranking = ?, promoted = ? where sweep_id = ? and rung = ?"
        conn.execute(sql, (encode(decision.ranking), encode(decision.promoted), sweep_id, decision.rung))
    else:
        fields = {"sweep_id": sweep_id, "rung": decision.rung, "step": decision.step, "created": now()}
        _insert(conn, "sweep_decisions", {**fields, "ranking": decision.ranking, "promoted": decision.promoted})
    stop = "update sweep_trials set status = 'stopped', updated = ? where sweep_id = ? and experiment_id = ?"
    for experiment_id in decision.stopped:
        conn.execute(stop, (now(), sweep_id, experiment_id))
    promote = "update sweep_trials set status = 'queued', rung = ?, target_step = ?, updated = ?"
    at_rung = "where sweep_id = ? and experiment_id = ? and rung = ?"  # those promoted before moved on already
    for experiment_id in decision.promoted:
        values = (decision.rung + 1, decision.next_step, now(), sweep_id, experiment_id, decision.rung)
        conn.execute(f"{promote} {at_rung}", values)


class QueueRows(RegistryBase):
    """The queue's claims: taken, settled, read."""

    def claims(self, sweep_id: int) -> list[ClaimRow]:
        """Every claim of a sweep's trials, open and released, oldest first."""
        return cast(
            "list[ClaimRow]", self._rows("select * from sweep_claims where sweep_id = ? order by id", (sweep_id,))
        )

    def open_claims(self, host: str, pid: int) -> list[int]:
        """The ids of the claims a process (host, pid) holds open."""
        return [int(row["id"]) for row in self.claims_held(host, pid)]

    def claims_held(self, host: str | None = None, pid: int | None = None) -> list[ClaimRow]:
        """The open claims (of one process, when ``host`` and ``pid`` are given), oldest first."""
        if host is None or pid is None:
            return cast("list[ClaimRow]", self._rows("select * from sweep_claims where released is null order by id"))
        sql = "select * from sweep_claims where released is null and host = ? and pid = ? order by id"
        return cast("list[ClaimRow]", self._rows(sql, (host, pid)))

    # ------------------------------------------------------------------ the queue

    def claim(
        self, sweep_ids: Collection[int] | None, worker: Worker, skip: Collection[int] = ()
    ) -> ClaimedTrial | None:
        """Take the first trial (of ``sweep_ids``, else of every sweep) that is queued or whose claim's process is
        gone, for ``worker`` (``host``, ``pid``, ``pid_start``, ``threads``, ``device``); the trial's row with
        its ``claim_id``, or None when there is none. ``skip``: trial ids not to take now. A trial its sweep marks
        shipped (``sweep pack``: it runs in another home until ``sweep unpack`` brings it back) is never taken."""
        where = "t.status in ('queued', 'running')"
        if sweep_ids is not None:
            where += f" and t.sweep_id in ({', '.join(str(int(i)) for i in sweep_ids) or 'null'})"
        with self._transaction() as conn:
            away = shipped_trials(conn)
            for found in conn.execute(f"{TRIALS} where {where} order by t.sweep_id, t.position").fetchall():
                row = decoded(dict(found))
                if row["id"] in skip or row["experiment_id"] in away:
                    continue
                if row["status"] == "running" and not self._lost(conn, row):
                    continue
                fields = {"trial_id": row["id"], "sweep_id": row["sweep_id"], "experiment_id": row["experiment_id"]}
                fields = {**fields, "target_step": row["target_step"], "claimed": now(), **worker}
                lost = {"host": row["host"], "pid": row["pid"]} if row["status"] == "running" else None
                claim_id = _insert(conn, "sweep_claims", fields)
                conn.execute("update sweep_trials set status = 'running', updated = ? where id = ?", (now(), row["id"]))
                claimed = {
                    **row,
                    **fields,
                    "id": row["id"],
                    "status": "running",
                    "claim_id": claim_id,
                    "taken_over": lost,
                }
                return cast("ClaimedTrial", claimed)
        return None

    @staticmethod
    def _lost(conn: sqlite3.Connection, row: dict[str, Any]) -> bool:
        """A running trial whose claim's process is gone (or that has no open claim): its claim is closed as lost."""
        if row["claim_id"] is not None and not claim_is_dead(row):
            return False
        if row["claim_id"] is not None:
            sql = "update sweep_claims set released = ?, outcome = 'lost' where id = ?"
            conn.execute(sql, (now(), row["claim_id"]))
        return True

    def settle_claim(self, claim_id: int, status: str, decide: Decide | None = None, **trial: Any) -> list[Decision]:
        """Close an open claim and set its trial's ``status`` (done, failed, or queued again when it was released
        by a signal: outcome ``released``; ``busy``: another process held the experiment; ``deferred``: this
        process cannot run it, another will; ``lost``: its claimant died) with ``trial``'s fields
        (``value``, ``error``); then, in the same transaction, ``decide`` on the sweep as it now stands, as many
        rungs as complete. The decisions taken. A claim already closed (taken over) changes nothing."""
        outcome = {"queued": "released"}.get(status, status)
        if status in ("busy", "deferred", "lost"):  # another process holds it, must run it, or the claimant died
            outcome, status = status, "queued"
        with self._transaction() as conn:
            row = conn.execute("select trial_id, sweep_id, released from sweep_claims where id = ?", (claim_id,))
            claim = row.fetchone()
            if claim is None or claim["released"] is not None:
                return []
            conn.execute("update sweep_claims set released = ?, outcome = ? where id = ?", (now(), outcome, claim_id))
            fields = checked("sweep_trials", {"status": status, "updated": now(), **trial}, writable("sweep_trials"))
            sets = ", ".join(f"{key} = ?" for key in fields)
            conn.execute(f"update sweep_trials set {sets} where id = ?", (*fields.values(), claim["trial_id"]))
            return self._decide(conn, claim["sweep_id"], decide) if decide is not None else []

    def _decide(self, conn: sqlite3.Connection, sweep_id: int, decide: Decide) -> list[Decision]:
        """``decide`` asked again as long as it finds something due (each answer changes the trials it read)."""
        taken: list[Decision] = []
        sweep = cast(SweepRow, decoded(dict(conn.execute("select * from sweeps where id = ?", (sweep_id,)).fetchone())))
        sweep["spec"] = check_spec(sweep["spec"], f"{self.path}: sweep {sweep['name']}")  # what decides is checked
        while True:
            rows = conn.execute("select * from sweep_trials where sweep_id = ? order by position", (sweep_id,))
            trials = [cast(TrialRow, decoded(dict(r))) for r in rows.fetchall()]
            rows = conn.execute("select * from sweep_decisions where sweep_id = ? order by rung", (sweep_id,))
            decision = decide(sweep, trials, [cast(DecisionRow, decoded(dict(r))) for r in rows.fetchall()])
            if decision is None:
                return taken
            _record(conn, sweep_id, decision)
            taken.append(decision)

    def requeue(
        self, name: str, statuses: Collection[str], next_step: Callable[[TrialRow], tuple[int, int] | None]
    ) -> Retried:
        """``sweep retry``: every trial of sweep ``name`` whose status is in ``statuses`` (failed, stopped) and that
        no process holds, queued again in one transaction, each to the (step, rung) ``next_step(trial)`` gives
        (None: left as it is); the sweep's history (its spec's ``history``) gains one event naming each trial and
        why it stopped before. The event ({"event": "retried", "at", "trials": {ID: {"was", "reason",
        "target_step"}}})."""
        with self._transaction() as conn:
            row = conn.execute("select id, spec from sweeps where name = ?", (name,)).fetchone()
            if row is None:
                raise BadInput(f"no sweep named {name}: `octlm show` lists the sweeps (as sweep:NAME tags)")
            sweep = decoded(dict(row))
            marks = ", ".join("?" for _ in statuses)
            sql = f"{TRIALS} where t.sweep_id = ? and t.status in ({marks}) and c.id is null order by t.position"
            taken: dict[str, RetriedTrial] = {}
            for found in conn.execute(sql, (sweep["id"], *statuses)).fetchall():
                trial = cast(TrialRow, decoded(dict(found)))
                going = next_step(trial)
                if going is None:
                    continue
                target, rung = going
                conn.execute(
                    "update sweep_trials set status = 'queued', error = null, value = null, target_step = ?,"
                    " rung = ?, updated = ? where id = ?",
                    (target, rung, now(), trial["id"]),
                )
                reason = reason_of(trial["error"]) or trial["status"]
                taken[trial["experiment_id"]] = {"was": trial["status"], "reason": reason, "target_step": target}
            event: Retried = {"event": "retried", "at": now(), "trials": taken, "asked": list(statuses)}
            if taken:
                spec = dict(sweep["spec"] or {})
                spec["history"] = [*spec.get("history", []), event]
                set_spec(conn, sweep["id"], spec)
            return event

    def change_spec(self, name: str, change: Callable[[SweepSpec], SweepSpec]) -> SweepSpec:
        """The spec of sweep ``name`` replaced by ``change(spec)`` in one transaction (``sweep pack`` marks the
        trials it ships, ``sweep unpack`` unmarks what comes back); the new spec. BadInput for an unknown sweep."""
        with self._transaction() as conn:
            row = conn.execute("select id, spec from sweeps where name = ?", (name,)).fetchone()
            if row is None:
                raise BadInput(f"no sweep named {name}")
            spec = change(cast("SweepSpec", dict(decoded(dict(row))["spec"] or {})))
            set_spec(conn, row["id"], spec)
            return spec

    def ship(self, name: str, was: SweepSpec, claims: int, shipped: Shipped) -> bool:
        """``sweep pack``'s mark: the spec of sweep ``name`` gains ``shipped``, in one transaction, only while it is
        still ``was`` and its trials have had ``claims`` claims, as when they were packed (no ``extend`` or ``retry``
        changed it and no worker here took a trial since): False otherwise, nothing marked."""
        with self._transaction() as conn:
            row = conn.execute("select id, spec from sweeps where name = ?", (name,)).fetchone()
            if row is None or (decoded(dict(row))["spec"] or {}) != was:
                return False
            taken = conn.execute("select count(*) from sweep_claims where sweep_id = ?", (row["id"],)).fetchone()[0]
            if taken != claims:
                return False
            set_spec(conn, row["id"], {**was, "shipped": shipped})
            return True
