"""What ``octlm sweep status NAME`` and ``octlm show NAME`` say about a sweep, as plain data (torch-free, read-only).

The status: each trial's state in the queue (queued; running, where: host, pid, threads, device, since when;
``lost`` when its worker is gone, to be taken over; done, failed with its log's tail, stopped by halving), its
rung, step and metric, and the counts. The ranking: the configurations (a trial's replicates together), the
furthest rung first, then by the mean of their metric with its spread over the seeds, and in words whether the
best one's lead over the next exceeds that spread.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.core.reporting import counted
from octlm.store.registry import Registry, SummaryRow
from octlm.store.sweeps.records import ClaimRow, DecisionRow, QueuedTrial, SweepRow, SweepSpec
from octlm.store.sweeps.specs import describe
from octlm.views import noise, side_by_side
from octlm.views.details import run_records
from octlm.views.paired import Paired
from octlm.views.sweeps import replicates
from octlm.views.sweeps.replicates import Spread

SCHEMA_VERSION = 1
STATES = ("queued", "running", "done", "failed", "stopped")


class TrialState(TypedDict):
    id: str
    status: str  # one of STATES, or "lost" (running, its worker gone)
    where: str | None  # "host pid 123, 1 thread, cpu" while claimed
    since: str | None
    rung: int
    target_step: int
    step: int | None  # of its newest run
    steps: int | None  # training.steps
    params: dict[str, Any]
    seed: int
    replicate: int
    value: float | None
    error: str | None


class SweepStatus(TypedDict):
    """The ``octlm sweep status NAME --json`` document."""

    schema_version: int
    name: str
    base: str | None
    description: str | None
    spec: SweepSpec
    counts: dict[str, int]
    claims: int  # every claim taken so far, released ones included
    trials: list[TrialState]
    decisions: list[DecisionRow]
    complete: bool


class BestSoFar(TypedDict):
    id: str
    value: float  # the trial's final metric
    best: float  # the best of it and every trial finished before


class Configuration(TypedDict):
    rank: int
    params: dict[str, Any]
    trials: list[str]
    rung: int  # the furthest rung its trials reached
    step: int  # at that rung
    statuses: list[str]
    value: Spread  # the metric at that step, over the replicates
    eval_loss_se: float | None


class SweepRanking(TypedDict):
    """The ``octlm show NAME --json`` document of a sweep."""

    schema_version: int
    name: str
    metric: str
    keys: list[str]  # what the sweep varies
    configurations: list[Configuration]
    verdict: str  # the best against the next, in words
    best_so_far: list[BestSoFar]  # in the order trials finished


def load(home: Home, name: str) -> tuple[SweepRow, list[QueuedTrial], Registry]:
    """The sweep's row and trials (BadInput for an unknown name) and the read-only registry, still open."""
    registry = Registry(home.registry, create=False)
    sweep = registry.sweep(name)
    if sweep is None:
        registry.close()
        raise BadInput(f"unknown sweep {name}: `octlm sweep new {name} --from ID ...` creates it")
    return sweep, registry.trials(sweep["id"]), registry


def status(home: Home, name: str) -> SweepStatus:
    sweep, trials, registry = load(home, name)
    with registry:
        summary = {row["id"]: row for row in registry.summary_rows()}
        decisions, claims = registry.decisions(sweep["id"]), registry.claims(sweep["id"])
    shown = [_state(trial, summary.get(trial["experiment_id"])) for trial in trials]
    counts = {state: sum(1 for t in shown if t["status"] == state) for state in (*STATES, "lost")}
    return {
        "schema_version": SCHEMA_VERSION,
        "name": sweep["name"],
        "base": sweep["base"],
        "description": describe(sweep["spec"] or {}),  # what it holds now (extended: grown)
        "spec": sweep["spec"] or {},
        "counts": counts,
        "claims": len(claims),
        "trials": shown,
        "decisions": decisions,
        "complete": counts["queued"] + counts["running"] + counts["lost"] == 0,
    }


def _state(trial: QueuedTrial, summary: SummaryRow | None) -> TrialState:
    where = None
    if trial["claim_id"] is not None:
        threads = f", {counted(trial['threads'], 'thread')}" if trial["threads"] else ""
        where = f"{trial['host']} pid {trial['pid']}{threads}, {trial['device'] or 'cpu'}"
    return {
        "id": trial["experiment_id"],
        "status": "lost" if trial["lost"] else trial["status"],
        "where": where,
        "since": trial["claimed"],
        "rung": trial["rung"],
        "target_step": trial["target_step"],
        "step": summary["step"] if summary else None,
        "steps": summary["steps"] if summary else None,
        "params": trial["params"] or {},
        "seed": trial["seed"],
        "replicate": trial["replicate"],
        "value": trial["value"],
        "error": trial["error"],
    }


def ranking(home: Home, name: str) -> SweepRanking:
    sweep, trials, registry = load(home, name)
    spec = sweep["spec"] or {}
    metric = str(spec.get("metric") or "eval_loss")
    with registry:
        errors = {
            t["experiment_id"]: registry.rung_value(t["experiment_id"], t["target_step"], "eval_loss_se")
            for t in trials
        }
        finished = [c for c in registry.claims(sweep["id"]) if c["outcome"] == "done"]
    configurations = _configurations(trials, errors)
    paired = _paired_lead(home, configurations) if metric == "eval_loss" else None
    return {
        "schema_version": SCHEMA_VERSION,
        "name": sweep["name"],
        "metric": metric,
        "keys": [*spec.get("grid", {}), *spec.get("ranges", {})],
        "configurations": configurations,
        "verdict": verdict(configurations, metric, paired, sweep["name"]),
        "best_so_far": best_so_far(finished, {t["experiment_id"]: t for t in trials}),
    }


def _configurations(trials: list[QueuedTrial], errors: dict[str, float | None]) -> list[Configuration]:
    groups: dict[str, list[QueuedTrial]] = {}
    for trial in trials:
        groups.setdefault(trial["group_key"], []).append(trial)
    found: list[Configuration] = []
    for members in groups.values():
        rung = max(m["rung"] for m in members)
        at = [m for m in members if m["rung"] == rung]
        values = [m["value"] for m in at if m["status"] in ("done", "stopped")]
        own = replicates.spread([errors.get(m["experiment_id"]) for m in at])["mean"]
        found.append(
            {
                "rank": 0,
                "params": members[0]["params"] or {},
                "trials": [m["experiment_id"] for m in members],
                "rung": rung,
                "step": max(m["target_step"] for m in members),
                "statuses": [m["status"] for m in members],
                "value": replicates.spread(values),
                "eval_loss_se": own,
            }
        )
    found.sort(key=lambda c: (-c["step"], c["value"]["mean"] is None, c["value"]["mean"] or 0.0))
    for rank, configuration in enumerate(found, 1):
        configuration["rank"] = rank
    return found


def _ranked(configurations: list[Configuration]) -> list[Configuration]:
    """The configurations with a value, when the best two were measured at the same step ([] otherwise)."""
    ranked = [c for c in configurations if c["value"]["mean"] is not None]
    return ranked if len(ranked) >= 2 and ranked[1]["step"] == ranked[0]["step"] else []


def _paired_lead(home: Home, configurations: list[Configuration]) -> Paired | None:
    """The best against the next on the same validation blocks, when each is one trial (no seeds to average)."""
    ranked = _ranked(configurations)
    if not ranked or len(ranked[0]["trials"]) != 1 or len(ranked[1]["trials"]) != 1:
        return None
    best, other = ranked[0]["trials"][0], ranked[1]["trials"][0]
    kept = {e: side_by_side.final_blocks(home, e, run_records(home, e)) for e in (best, other)}
    return side_by_side.pairing(kept, other, best)[0]  # the best minus the next; a blocks file not checked: unpaired


def verdict(configurations: list[Configuration], metric: str, paired: Paired | None = None, name: str = "NAME") -> str:
    """The best configuration against the next at the same step, in words, with the test it rests on and, within
    noise, what would resolve it: the seeds' spread when they have seeds, else the paired evaluation error."""
    ranked = _ranked(configurations)
    if not ranked:
        return "fewer than two configurations measured at the same step: nothing to rank yet"
    best, next_ = ranked[0], ranked[1]  # the best minus the next: negative when the best is lower
    head = f"the best ({_params(best['params'])}) against the next ({_params(next_['params'])}): {metric}"
    if paired is not None and best["value"]["sd"] is None and next_["value"]["sd"] is None:
        test = f"paired, {counted(paired['blocks'], 'block')}"
        judged = noise.judge(paired["eval_loss_difference"], paired["eval_loss_se"], "evaluation noise", test)
        fix = (
            "; the whole validation split (training.eval_tokens: 0, eval_blocks: 0) may resolve it"
            if judged.within
            else ""
        )
        seeds = (
            f"; one seed each: whether the configuration is better, seeds say (`octlm sweep extend {name} --seeds 3`)"
        )
        return f"{head} {judged.words}{fix}{seeds}"
    errors = [e for e in (best["eval_loss_se"], next_["eval_loss_se"]) if e is not None]
    own = math.hypot(*errors) if len(errors) == 2 else None
    _, words = replicates.difference(next_["value"], best["value"], own)
    return f"{head} {words}"


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items()) or "the base config"


def best_so_far(finished: list[ClaimRow], trials: dict[str, QueuedTrial]) -> list[BestSoFar]:
    """The trials' final metric in the order they finished (their last claim's release), with the best so far."""
    best: float | None = None
    out: list[BestSoFar] = []
    for claim in sorted(finished, key=lambda c: c["released"] or ""):
        trial = trials.get(claim["experiment_id"])
        if trial is None or claim["target_step"] != trial["target_step"] or trial["value"] is None:
            continue
        best = trial["value"] if best is None else min(best, trial["value"])
        out.append({"id": claim["experiment_id"], "value": trial["value"], "best": best})
    return out
