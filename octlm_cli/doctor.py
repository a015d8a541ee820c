"""``octlm doctor``: check the registry against the files, and rebuild what it lost.

The files are the truth: ``experiments/*.yaml`` hold the configs, and every checkpoint
carries its config, fingerprints, step and metrics. So deleting ``registry.db`` loses
nothing that matters; ``doctor --repair`` rebuilds experiments, checkpoints and a run per
experiment from them (verdict history is the one thing only the registry held).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import checkpoint, experiments
from .errors import OctlmError, Refused
from .home import Home
from .locking import ExperimentLock
from .registry import Registry, now

Problem = dict[str, Any]


def _problem(kind: str, where: str, detail: str, repaired: bool = False) -> Problem:
    return {"kind": kind, "where": where, "detail": detail, "repaired": repaired}


def run(home: Home, repair: bool = False) -> dict[str, Any]:
    with Registry(home.registry, create=repair) as registry:  # checking never creates a registry
        problems = _experiments(home, registry, repair) + _stuck_runs(registry, repair)
    unrepaired = [p for p in problems if not p["repaired"]]
    return {"home": str(home.root), "repair": repair, "problems": problems, "healthy": not unrepaired}


def _experiments(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    problems = []
    ids, registered = experiments.ids_on_disk(home), set(registry.experiment_ids())
    for experiment_id in ids:
        try:
            config = experiments.load(home, experiment_id)
        except OctlmError as error:
            problems.append(_problem("invalid config", f"experiments/{experiment_id}.yaml", str(error)))
            continue
        if experiment_id not in registered:
            if repair:
                experiments.register(home, registry, config)
            detail = "in experiments/ but not in the registry"
            problems.append(_problem("experiment without row", experiment_id, detail, repair))
        problems += _checkpoints(home, registry, experiment_id, repair)
    for experiment_id in sorted(registered - set(ids)):
        problems.append(_problem("row without config", experiment_id, f"no experiments/{experiment_id}.yaml"))
    return problems


def _stuck_runs(registry: Registry, repair: bool) -> list[Problem]:
    problems = []
    for row in registry.running_runs():
        if row["status"] == "crashed":
            if repair:
                registry.finish_run(row["id"], "crashed", error="process gone; marked by octlm doctor")
            where, detail = f"run {row['id']} of {row['experiment_id']}", f"pid {row['pid']} on {row['host']} is gone"
            problems.append(_problem("run stuck in running", where, detail, repair))
    return problems


def _checkpoints(home: Home, registry: Registry, experiment_id: str, repair: bool) -> list[Problem]:
    folder = home.checkpoint_dir(experiment_id)
    on_disk = {str(p.relative_to(home.root)): (step, p) for step, p in checkpoint.listing(folder)}
    prefix = str(folder.relative_to(home.root))
    rows = {
        row["path"]: row
        for row in registry.checkpoints(experiment_id)
        if str(Path(row["path"]).parent) == prefix  # overfit checkpoints live one folder down
    }
    problems = _leftovers(home, folder, experiment_id, repair)
    for relative in [r for r in rows if r not in on_disk]:
        if repair:
            registry.remove_checkpoint(relative)
        problems.append(_problem("missing checkpoint", relative, "registered but the file is gone", repair))
    newest: tuple[int, checkpoint.Record] | None = None
    for relative, (step, path) in on_disk.items():
        row = rows.get(relative)
        try:
            record = checkpoint.read(path, row["sha256"] if row else None)
        except checkpoint.InvalidCheckpoint as error:
            problems.append(_problem("invalid checkpoint", relative, f"{error}; resume skips it"))
            continue
        if newest is None or step > newest[0]:
            newest = (step, record)
        if row is None:
            if repair:
                _register_checkpoint(registry, experiment_id, relative, step, path, record)
            problems.append(_problem("orphaned checkpoint", relative, "file without a registry row", repair))
    if newest is not None and not registry.has_training_run(experiment_id):
        problems.append(_missing_run(registry, experiment_id, *newest, repair))
    return problems


def _leftovers(home: Home, folder: Path, experiment_id: str, repair: bool) -> list[Problem]:
    leftovers = checkpoint.leftovers(folder)
    cleaned = False
    if leftovers and repair:
        try:
            with ExperimentLock(folder, experiment_id):  # never pull a file from under a live write
                checkpoint.clean_leftovers(folder)
                cleaned = True
        except Refused:
            pass
    detail = "left alone: the experiment is running" if repair and not cleaned else "from an interrupted write"
    return [
        _problem("leftover temporary file", str(path.relative_to(home.root)), detail, cleaned) for path in leftovers
    ]


def _register_checkpoint(
    registry: Registry, experiment_id: str, relative: str, step: int, path: Path, record: checkpoint.Record
) -> None:
    registry.add_checkpoint(
        experiment_id=experiment_id, run_id=None, step=step, path=relative,
        sha256=checkpoint.expected_digest(path), size=os.path.getsize(path), tokens=record.tokens,
        config_hash=record.fingerprints.config, data_hash=record.fingerprints.data,
        tokenizer_hash=record.fingerprints.tokenizer, metrics=record.metrics,
    )  # fmt: skip


def _missing_run(registry: Registry, experiment_id: str, step: int, record: checkpoint.Record, repair: bool) -> Problem:
    """Checkpoints without a training run: with ``repair``, record one rebuilt from the newest checkpoint."""
    if repair:
        steps = record.config.get("training", {}).get("steps")
        environment, prints = record.environment, record.fingerprints
        run_id = registry.start_run(
            experiment_id, "train", start_step=0, end_step=step, target_step=steps,
            config_hash=prints.config, data_hash=prints.data, tokenizer_hash=prints.tokenizer,
            latest_metrics=record.metrics, host=None, pid=None, torch_version=environment.get("torch"),
            device=environment.get("device"), dtype=environment.get("dtype"), threads=environment.get("threads"),
        )  # fmt: skip
        registry.finish_run(
            run_id, "completed" if step == steps else "interrupted", final_metrics=record.metrics,
            error=f"rebuilt from checkpoints by octlm doctor --repair at {now()}",
        )  # fmt: skip
    detail = f"progress up to step {step} not in runs"
    return _problem("checkpoints without a run", experiment_id, detail, repair)
