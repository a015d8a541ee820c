"""``octlm sweep new`` and ``octlm new --seeds``: what a sweep tries, as trials that are ordinary experiments.
Torch-free (``sweep new`` and ``new`` start fast); Optuna is imported only by a sweep that asks it (``asking``).

A sweep's configurations are its sampler's (a row of ``samplers.SAMPLERS``): the product of its ``--grid`` keys,
crossed with ``--random N`` draws of its ``--range`` keys (seeded: the same command draws the same values), or,
with ``--sampler tpe``, asked of Optuna as earlier trials finish. Each configuration has ``--seeds S`` replicates
differing only in ``training.seed`` (the base's seed, then +1, +2, ...). With ``--halving RUNGS`` every trial's
``training.steps`` is the last rung. Everything is validated (every trial's config built) before anything is
written; then every trial's file is written and every row (experiments, sweep, trials) goes in in one transaction:
a failure leaves neither.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from octlm import config as cfg
from octlm.config import flatten
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import Home
from octlm.core.records.freeform import ConfigTree
from octlm.data import sources
from octlm.store import experiments, kept
from octlm.store.base import Fields
from octlm.store.registry import Registry
from octlm.store.sweeps import specs
from octlm.store.sweeps.records import Made, SweepCreated, SweepRow, SweepSpec
from octlm.tasks.sweeps.planning import asking, samplers
from octlm.tasks.sweeps.planning.spec import (
    SEED,
    SweepRequest,
    check_metric,
    check_options,
    parse_grid,
    parse_ranges,
    parse_rungs,
    validate_name,
)


@dataclass
class Trial:
    """One trial before it is written: its config (no ID yet) and what it varies."""

    config: cfg.Config
    params: ConfigTree
    replicate: int
    seed: int
    target_step: int

    @property
    def group_key(self) -> str:
        return cfg.canonical(self.params)


@dataclass
class SweepPlan:
    spec: SweepSpec
    trials: list[Trial] = field(default_factory=list)


def base_of(home: Home, sweep: SweepRow) -> cfg.Config:
    """The config a sweep's trials are made from: the one kept when the sweep was made (an older sweep: its base's
    YAML as it is now)."""
    kept = (sweep.get("spec") or {}).get("base_config")
    if isinstance(kept, dict):
        return cfg.from_dict(kept, f"sweep {sweep.get('name')}: its base config").replace(id=sweep.get("base") or "")
    return experiments.load(home, sweep["base"] or "")


def build_trials(base: cfg.Config, cells: list[ConfigTree], spec: SweepSpec, name: str) -> list[Trial]:
    """Every configuration's replicates, each config built and validated (BadInput names the key)."""
    trials = []
    rungs, seeds, start = spec["halving"], spec["seeds"], base.training.seed
    for cell in cells:
        for replicate in range(seeds):
            seed = start + replicate
            keys = {**{k: _as_text(v) for k, v in cell.items()}, **({SEED: str(seed)} if seeds > 1 else {})}
            steps = [f"training.steps={rungs[-1]}"] if rungs else []
            overrides = [*spec["overrides"], *steps, *(f"{k}={v}" for k, v in keys.items())]
            try:
                config = experiments.build(
                    preset=None,
                    from_config=base,
                    overrides=overrides,
                    description=describe(name, keys, replicate, seeds),
                )
            except OctlmError as error:
                raise BadInput(f"{describe(name, keys, replicate, seeds)}: {error}") from None
            params = {key: flatten(config.to_dict())[key] for key in cell}
            trials.append(Trial(config, params, replicate, seed, rungs[0] if rungs else config.training.steps))
    return trials


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def describe(name: str | None, keys: dict[str, str], replicate: int, seeds: int) -> str:
    """``sweep lr: training.learning_rate=1e-3, training.seed=1338 (replicate 2 of 3)``."""
    varies = ", ".join(f"{key}={value}" for key, value in keys.items()) or "the base config"
    shown = f"sweep {name}: {varies}" if name else varies
    return shown + (f" (replicate {replicate + 1} of {seeds})" if seeds > 1 else "")


def replicates(home: Home, config: cfg.Config, seeds: int, prefix: str) -> list[cfg.Config]:
    """``octlm new --seeds S``: S experiments of ``config`` differing only in ``training.seed`` (its seed, then +1,
    ...), their files and rows written as a sweep's are (the rows in one transaction); their configs."""
    if not 2 <= seeds <= 1000:
        raise BadInput(f"--seeds {seeds}: give 2 to 1000 replicates")
    trials = []
    for replicate in range(seeds):
        seed = config.training.seed + replicate
        described = f"{config.description} " if config.description else ""
        text = f"{described}(seed {seed}, replicate {replicate + 1} of {seeds})"
        made = config.with_keys({SEED: seed, "description": text})
        trials.append(Trial(made, {}, replicate, seed, made.training.steps))
    with write_trials(home, trials, prefix, None) as (registry, members):
        registry.add_experiments([experiment for experiment, _ in members])
    return [trial.config for trial in trials]


def plan(home: Home, request: SweepRequest) -> SweepPlan:
    """The sweep's spec and its first trials (all of them, but with a sampler that asks), validated: the options
    its sampler reads and needs, and the trials it makes, counted before a single trial's config is built."""
    validate_name(request.name)
    base = experiments.load(home, request.base)
    check_metric(request.metric)
    grid, ranges = parse_grid(request.grid, base), parse_ranges(request.ranges)
    name = samplers.chosen(request)
    check_options(request, grid, ranges)
    spec: SweepSpec = {
        "grid": grid,
        "ranges": ranges,
        "random": request.random,
        "seeds": request.seeds,
        "sampler": name,
        "trials": request.trials,
        "parallel": request.parallel,
        "metric": request.metric,
        "seed": request.seed,
        "halving": [],
        "keep": request.keep,
        "overrides": list(request.overrides),
        "prefix": request.prefix,
        "base_config": base.to_dict(),  # the config its trials are made from, whatever happens to the base's YAML later
    }
    sampler = samplers.check(spec)
    samplers.size(spec)  # before a single trial's config is built
    spec["halving"] = parse_rungs(request.halving, base)
    trials = build_trials(base, sampler.first(spec), spec, request.name)
    return SweepPlan(spec, check_sources(home, trials))


def check_sources(home: Home, trials: list[Trial]) -> list[Trial]:
    """``trials``, once the data sources of each hold something to train on (``sources.check_readable``, each set of
    sources asked once): else BadInput naming the trial, before any file is written (``sweep new``, ``extend``)."""
    root, seen = sources.data_root(home), set()
    for trial in trials:
        if trial.config.data.sources not in seen:
            seen.add(trial.config.data.sources)
            try:
                sources.check_readable(trial.config.data.sources, root)
            except BadInput as error:
                raise BadInput(f"{trial.config.description}: {error}") from None
    return trials


def create(home: Home, request: SweepRequest) -> SweepCreated:
    """``octlm sweep new``: the sweep and its trials, written as the module says; what was made."""
    made = plan(home, request)
    sweep = {"name": request.name, "base": request.base, "description": specs.describe(made.spec), "spec": made.spec}
    with write_trials(home, made.trials, request.prefix, request.name) as (registry, members):
        sweep_id = registry.add_sweep(sweep, members)
        kept.keep_sweep(home, registry, request.name)  # beside the registry: doctor --repair rebuilds it from there
    return {"sweep": request.name, "id": sweep_id, "spec": made.spec, "trials": [_shown(t) for t in made.trials]}


def _shown(trial: Trial) -> Made:
    return {"id": trial.config.id, "params": trial.params, "seed": trial.seed, "description": trial.config.description}


@contextlib.contextmanager
def write_trials(
    home: Home, trials: list[Trial], prefix: str, sweep: str | None
) -> Iterator[tuple[Registry, list[tuple[Fields, Fields]]]]:
    """Write the trials' files (IDs allocated as ``octlm new`` allocates them, each staged: ``experiments.staged``)
    and hand the open registry and the rows to insert to the block; when the block fails, the files go again (their
    rows never went in), and a process killed before its rows went in leaves nothing ``doctor`` would register."""
    home.ensure_writable()
    home.experiments.mkdir(exist_ok=True)
    written: list[str] = []
    with Registry(home.registry) as registry, experiments.staged(home) as staging:
        try:
            members: list[tuple[Fields, Fields]] = []
            free = experiments.free_ids(home, registry, prefix)  # the taken IDs read once
            for trial in trials:
                trial.config = experiments.publish_next(home, free, trial.config, prefix, staging)
                written.append(trial.config.id)
                members.append((_experiment_row(home, trial, sweep), _trial_row(trial)))
            yield registry, members
        except BaseException:
            for experiment_id in written:
                home.config_path(experiment_id).unlink(missing_ok=True)
            raise
        kept.keep_marks(home, registry, written)  # beside the registry too: none of these IDs is ever given again


def _experiment_row(home: Home, trial: Trial, sweep: str | None) -> Fields:
    row: dict[str, object] = {"id": trial.config.id, **experiments.row_fields(home, trial.config)}
    return {**row, "tags": [f"sweep:{sweep}"]} if sweep else row


def _trial_row(trial: Trial) -> Fields:
    fields = {"params": trial.params, "group_key": trial.group_key, "replicate": trial.replicate}
    return {**fields, "seed": trial.seed, "target_step": trial.target_step}


class Raced(Exception):
    """Another worker asked first: the trials made for this ask are taken back."""


def top_up(home: Home, sweep: SweepRow) -> list[str]:
    """Ask the sweep's sampler for as many configurations as keep ``parallel`` of them pending, within the ``trials``
    budget, and add their trials (files, rows) to the sweep; the new experiment IDs. Nothing when its sampler makes
    every trial at once, or another worker asked first; BadInput when its spec names no sampler of the table."""
    spec = sweep["spec"]
    sampler = samplers.of(spec, f"{home.registry}: sweep {sweep['name']}")
    if sampler.more is None:
        return []
    with Registry(home.registry, create=False) as registry:
        finished, pending, total = asking.history(registry.trials(sweep["id"]))
    wanted = min(spec["parallel"] - len(pending), (spec["trials"] or 0) - total)
    cells = sampler.more(spec, finished, wanted, pending)
    if not cells:
        return []
    trials = build_trials(base_of(home, sweep), cells, spec, sweep["name"])
    try:
        with write_trials(home, trials, spec["prefix"], sweep["name"]) as (registry, members):
            if not registry.add_trials(sweep["id"], members, expect_groups=total):
                raise Raced
            kept.keep_sweep(home, registry, sweep["name"])
    except Raced:
        return []
    return [trial.config.id for trial in trials]
