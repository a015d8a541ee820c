"""A sweep that grows and heals: ``sweep extend`` adds trials to a sweep without renumbering or retraining what is done,
made by the sweep's own sampler (the row of ``planning/samplers`` its spec names); ``sweep retry`` queues failed
trials (and, asked, the ones halving stopped) to run once more. A failed trial goes back to the step it was going to;
a stopped one is promoted to the sweep's last rung, past every decision (so no rung is decided twice). Its worker
continues it from its newest checkpoint where it has one, exactly as a takeover does. One transaction
(``Registry.requeue``), the reason each trial stopped before kept in the sweep's history, the record beside the
registry kept too. Torch-free."""

from __future__ import annotations

from typing import Any

from octlm.core.errors import BadInput, Refused
from octlm.core.home import DEFAULT_PREFIX, Home
from octlm.store import kept
from octlm.store.registry import Registry, now
from octlm.store.sweeps.records import ExtendAsked, Extended, SweepExtended, SweepRetried, SweepSpec, TrialRow
from octlm.tasks.sweeps.planning import samplers
from octlm.tasks.sweeps.upkeep import shipping

RETRYABLE = ("failed", "stopped")


def retry(home: Home, name: str, statuses: tuple[str, ...]) -> SweepRetried:
    """Queue again the trials of ``name`` in ``statuses`` that no worker holds; the history event it recorded
    (``trials`` empty when there was nothing to retry)."""
    unknown = [status for status in statuses if status not in RETRYABLE]
    if unknown or not statuses:
        raise BadInput(f"sweep retry takes --failed and --stopped, not {', '.join(unknown) or 'nothing'}")
    with Registry(home.registry) as registry:
        sweep = registry.sweep(name)
        if sweep is None:
            raise BadInput(f"unknown sweep {name}: `octlm sweep new {name} --from ID ...` creates it")
        samplers.of(sweep["spec"], f"{home.registry}: sweep {name}")  # a spec that names no sampler: refused
        shipping.refuse_shipped(sweep["spec"] or {}, name, "retried")
        rungs = list((sweep["spec"] or {}).get("halving") or [])
        event = registry.requeue(name, statuses, lambda trial: _going(trial, rungs))
        if event["trials"]:
            kept.keep_sweep(home, registry, name)  # what survives the registry's loss
    return {"name": name, **event}


def _going(trial: TrialRow, rungs: list[int]) -> tuple[int, int] | None:
    """(step, rung) a retried trial trains to: a failed one where it was going; a stopped one to the last rung."""
    if trial["status"] == "failed":
        return int(trial["target_step"]), int(trial["rung"])
    if rungs and trial["target_step"] < rungs[-1]:
        return int(rungs[-1]), len(rungs) - 1
    return None  # stopped at the last step already: nothing more to train


def extend(home: Home, name: str, seeds: int | None, grid: tuple[str, ...], draws: int) -> SweepExtended:
    """``sweep extend``: the same sweep with more seeds (``seeds``: the new count per configuration), more values of
    its grid keys (``grid``: KEY=V,... added to the key's values) or ``draws`` more random draws, its configurations
    made by its own sampler (``samplers.of``: the row its spec names); only the trials it did not have are made,
    numbered after the last, nothing done is trained again (a trial's config is the one it would have had in a sweep
    made so from the start). One transaction; the sweep's history says what was added."""
    from octlm.tasks.sweeps.planning import plan

    with Registry(home.registry) as registry:
        sweep = registry.sweep(name)
        if sweep is None:
            raise BadInput(f"unknown sweep {name}: `octlm sweep new {name} --from ID ...` creates it")
        spec, trials = (sweep["spec"] or {}).copy(), registry.trials(sweep["id"])
    sampler = samplers.of(spec, f"{home.registry}: sweep {name}")
    shipping.refuse_shipped(spec, name, "extended")
    base = plan.base_of(home, sweep)
    grown = _grown(name, spec, sampler, base, seeds, grid, draws)
    cells = sampler.first(grown)
    have = {(t["group_key"], t["replicate"]) for t in trials}
    new = [t for t in plan.build_trials(base, cells, grown, name) if (t.group_key, t.replicate) not in have]
    plan.check_sources(home, new)  # a source added that holds nothing: refused here, not at its trials' train
    if not new:
        return {"name": name, "event": "extended", "added": 0, "trials": []}
    event: Extended = {
        "event": "extended",
        "at": now(),
        "added": len(new),
        "seeds": grown["seeds"],
        "grid": grown["grid"],
        "asked": _asked(spec, grown, draws),
    }
    grown["history"] = [*spec.get("history", []), event]
    with plan.write_trials(home, new, spec.get("prefix") or DEFAULT_PREFIX, name) as (registry, members):
        if not registry.add_trials(sweep["id"], members, spec=grown, was=spec):
            _raced(registry, name)
        kept.keep_sweep(home, registry, name)
    return {"name": name, **event, "trials": [t.config.id for t in new]}


def _asked(spec: SweepSpec, grown: SweepSpec, draws: int) -> ExtendAsked:
    """What an extension added, as its options would say it (the history's words: ``extend --seeds 3 ...``)."""
    more = {key: [x for x in values if x not in spec["grid"][key]] for key, values in grown["grid"].items()}
    seeds = grown["seeds"] if grown["seeds"] != spec["seeds"] else None
    return {"seeds": seeds, "grid": {key: values for key, values in more.items() if values}, "random": draws}


def _raced(registry: Registry, name: str) -> None:
    """Another process changed the sweep since ``extend`` read it (another ``extend``, ``retry``, ``sweep pack``):
    Refused, saying which when it was shipped meanwhile; the trials' files go again (``plan.write_trials``)."""
    sweep = registry.sweep(name)
    shipping.refuse_shipped((sweep["spec"] if sweep else None) or {}, name, "extended")
    raise Refused(
        f"sweep {name} changed while it was being extended (another extend or retry): nothing was changed; try again"
    )


def _grown(
    name: str,
    spec: SweepSpec,
    sampler: samplers.SweepSampler,
    base: Any,
    seeds: int | None,
    grid: tuple[str, ...],
    draws: int,
) -> SweepSpec:
    """The sweep's spec with what ``extend`` adds, each addition checked and the trials it would then make counted
    by its sampler (``samplers.size``), one line naming the option."""
    from octlm.tasks.sweeps.planning.spec import parse_grid

    if spec.get("halving") or sampler.asks:
        at_once = " and ".join(row.name for row in samplers.SAMPLERS.values() if not row.asks)
        raise BadInput(f"sweep {name}: extend takes {at_once} sweeps without --halving (this one is not)")
    added = parse_grid(grid, base)
    unknown = sorted(set(added) - set(spec["grid"]))
    if unknown:
        keys = ", ".join(spec["grid"]) or "none"
        raise BadInput(f"--grid {unknown[0]}: not a key of sweep {name} (its keys: {keys})")
    if seeds is not None and seeds < spec["seeds"]:
        raise BadInput(f"--seeds {seeds}: sweep {name} has {spec['seeds']} already; give more")
    if draws < 0:
        raise BadInput(f"--random {draws}: give the number of draws to add (1 or more)")
    if draws and "random" not in sampler.reads:
        raise BadInput(f"--random {draws}: sweep {name} draws no --range keys (its sampler is {sampler.name})")
    grown: SweepSpec = {**spec, "seeds": seeds or spec["seeds"], "random": spec["random"] + draws}
    grown["grid"] = {k: [*v, *(x for x in added.get(k, []) if x not in v)] for k, v in spec["grid"].items()}
    samplers.size(grown)
    return grown
