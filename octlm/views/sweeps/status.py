"""What ``octlm sweep status NAME`` and ``octlm show NAME`` say about a sweep, as plain data (torch-free, read-only).

The status: each trial's state in the queue (queued; running, where: host, pid, threads, device, since when;
``lost`` when its worker is gone, to be taken over; done, failed with its log's tail, stopped by halving), its
rung, step and metric, and the counts. The ranking: the configurations (a trial's replicates together), the
furthest rung first, then by the mean of their metric with its spread over the seeds; the best against the next and
against every other configuration at its step (``compare.winner``: as configurations, paired by seed; as runs on the
same blocks with one seed each), the best's expected optimism, and the best so far named as the luckiest trial.
"""

from __future__ import annotations

from typing import Any, TypedDict

from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.core.records.freeform import ConfigTree
from octlm.core.reporting import counted
from octlm.store.registry import Registry, SummaryRow
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.store.sweeps.records import ClaimRow, DecisionRow, QueuedTrial, SweepRow, SweepSpec
from octlm.store.sweeps.specs import describe
from octlm.views import side_by_side
from octlm.views.compare import noise, seeds, winner
from octlm.views.compare.noise import Size, Verdict
from octlm.views.compare.winner import Challenger, Entry, Optimism
from octlm.views.details import run_records
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
    params: ConfigTree  # the configuration: {config key: value}
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
    params: ConfigTree  # the configuration: {config key: value}
    trials: list[str]
    rung: int  # the furthest rung its trials reached
    step: int  # at that rung
    statuses: list[str]
    value: Spread  # the metric at that step, over the replicates
    eval_loss_se: float | None


class SweepRanking(TypedDict):
    """The ``octlm show NAME --json`` document of a sweep: its configurations ranked; the best against the next
    (``best_against_next``, and ``verdict`` in words) and against every other configuration at its step
    (``challengers``, Holm-adjusted over every pair of configurations, since the best was chosen among them;
    ``within_noise_of_best`` their ranks that noise could explain); the best's expected optimism; ``notes``, all that
    in words; the best so far, the luckiest single trial."""

    schema_version: int
    name: str
    metric: str
    keys: list[str]  # what the sweep varies
    configurations: list[Configuration]
    verdict: str  # the best against the next, in words
    best_against_next: Verdict | None  # the best minus the next (negative: the best lower)
    challengers: list[Challenger]  # every other configuration at the best's step, against the best
    within_noise_of_best: list[int]  # the ranks of those within noise of the best
    optimism: Optimism | None
    notes: list[str]  # the winner in words: the best so far, who is within noise of it, its optimism, the advice
    min_effect: float  # the smallest difference of interest, in nats (--min-effect)
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


def ranking(home: Home, name: str, min_effect: float = noise.MIN_EFFECT) -> SweepRanking:
    sweep, trials, registry = load(home, name)
    spec = sweep["spec"] or {}
    metric = str(spec.get("metric") or "eval_loss")
    with registry:
        errors = {
            t["experiment_id"]: registry.rung_value(t["experiment_id"], t["target_step"], "eval_loss_se")
            for t in trials
        }
        finished = [c for c in registry.claims(sweep["id"]) if c["outcome"] == "done"]
        prints = {t["experiment_id"]: _prints(registry.runs(t["experiment_id"])) for t in trials}
        configs = registry.configs()
    configurations = _configurations(trials, errors)
    by_id = {t["experiment_id"]: t for t in trials}
    entries = [_entry(home, c, by_id, errors, metric, prints, configs) for c in _ranked(configurations)]
    scored = _scored_all(entries, configs)
    found = winner.challengers(entries, metric, Size(min_effect=min_effect), scored) if entries else []
    progress = best_so_far(finished, by_id)
    bias = winner.optimism(entries, len(progress))
    lucky = [winner.luckiest(progress[-1]["best"], len(progress), bias)] if progress else []
    return {
        "schema_version": SCHEMA_VERSION,
        "name": sweep["name"],
        "metric": metric,
        "keys": [*spec.get("grid", {}), *spec.get("ranges", {})],
        "configurations": configurations,
        "verdict": verdict(configurations, metric, found[0] if found else None),
        "best_against_next": found[0]["verdict"] if found else None,
        "challengers": found,
        "within_noise_of_best": [c["rank"] for c in found if c["verdict"] is not None and c["verdict"]["within_noise"]],
        "optimism": bias,
        "notes": lucky + (winner.notes(found, entries[0], bias, sweep["name"]) if entries else []),
        "min_effect": min_effect,
        "best_so_far": progress,
    }


def _prints(runs: list[Any]) -> dict[str, str | None]:
    """What a trial trained on: the newest data and tokenizer fingerprints its runs recorded."""
    return {
        key: next((run[column] for run in reversed(runs) if run.get(column)), None)
        for key, column in (("data", "data_hash"), ("tokenizer", "tokenizer_hash"))
    }


def _entry(
    home: Home,
    configuration: Configuration,
    trials: dict[str, QueuedTrial],
    errors: dict[str, float | None],
    metric: str,
    prints: dict[str, dict[str, str | None]],
    configs: dict[str, Any],
) -> Entry:
    """A ranked configuration with its seeds: each finished trial at its rung, its value, its own evaluation error
    and (for the eval loss) its final evaluation block by block."""
    members = []
    for experiment_id in configuration["trials"]:
        trial = trials[experiment_id]
        if (
            trial["rung"] != configuration["rung"]
            or trial["status"] not in ("done", "stopped")
            or trial["value"] is None
        ):
            continue
        blocks = None
        if metric == "eval_loss":
            found = side_by_side.final_blocks(home, experiment_id, run_records(home, experiment_id))
            blocks = found if isinstance(found, BlockEvaluation) else None  # not one a verdict may rest on
        error = errors.get(experiment_id) if metric == "eval_loss" else None  # the eval loss's, in nats
        members.append(seeds.Member(experiment_id, trial["seed"], trial["value"], error, blocks))
    first = members[0].id if members else configuration["trials"][0]
    data = configs.get(first, {}).get("data")
    sources = [str(s) for s in data.get("sources", [])] if isinstance(data, dict) else []
    return Entry(configuration["rank"], configuration["params"], members, prints.get(first, {}), sources)


def _scored_all(entries: list[Entry], configs: dict[str, Any]) -> bool | None:
    """Whether the best's evaluation read the whole validation split (``compare.seeds.scored_all``)."""
    if not entries or not entries[0].members:
        return None
    member = entries[0].members[0]
    return seeds.scored_all(configs.get(member.id, {}), member.blocks.blocks if member.blocks else None)


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
    """The configurations with a value at the best's step, the best first, when there are two or more ([]
    otherwise)."""
    ranked = [c for c in configurations if c["value"]["mean"] is not None]
    ranked = [c for c in ranked if c["step"] == ranked[0]["step"]] if ranked else []
    return ranked if len(ranked) >= 2 else []


def verdict(configurations: list[Configuration], metric: str, against: Challenger | None) -> str:
    """The best configuration against the next at the same step, in words (``compare.winner``'s)."""
    ranked = _ranked(configurations)
    if not ranked or against is None:
        return "fewer than two configurations measured at the same step: nothing to rank yet"
    best, next_ = ranked[0], ranked[1]  # the best minus the next: negative when the best is lower
    return f"the best ({_params(best['params'])}) against the next ({_params(next_['params'])}): {against['words']}"


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
