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
from .registry import Registry, effective_status, now


def _problem(kind: str, where: str, detail: str, repaired: bool = False) -> dict[str, Any]:
    return {"kind": kind, "where": where, "detail": detail, "repaired": repaired}


def run(home: Home, repair: bool = False) -> dict[str, Any]:
    problems: list[dict[str, Any]] = []
    registry = Registry(home.registry, create=repair)  # checking never creates a registry
    try:
        ids = experiments.ids_on_disk(home)
        rows = {row["id"]: row for row in registry.query("select * from experiments")}
        for experiment_id in ids:
            try:
                config = experiments.load(home, experiment_id)
            except OctlmError as error:
                problems.append(_problem("invalid config", f"experiments/{experiment_id}.yaml", str(error)))
                continue
            if experiment_id not in rows:
                if repair:
                    experiments.register(home, registry, config)
                problems.append(_problem("experiment without row", experiment_id, "in experiments/ but not in the registry", repair))
            problems += _checkpoints(home, registry, experiment_id, repair)
        for experiment_id in sorted(set(rows) - set(ids)):
            problems.append(_problem("row without config", experiment_id, f"no experiments/{experiment_id}.yaml"))
        for row in registry.query("select * from runs where status = 'running'"):
            if effective_status(row)["status"] == "crashed":
                if repair:
                    registry.finish_run(row["id"], "crashed", error="process gone; marked by octlm doctor")
                problems.append(_problem("run stuck in running", f"run {row['id']} of {row['experiment_id']}",
                                         f"pid {row['pid']} on {row['host']} is gone", repair))
    finally:
        registry.close()
    unrepaired = [p for p in problems if not p["repaired"]]
    return {"home": str(home.root), "repair": repair, "problems": problems, "healthy": not unrepaired}


def _checkpoints(home: Home, registry: Registry, experiment_id: str, repair: bool) -> list[dict[str, Any]]:
    problems = []
    folder = home.checkpoint_dir(experiment_id)
    on_disk = {str(p.relative_to(home.root)): (step, p) for step, p in checkpoint.listing(folder)}
    prefix = str(folder.relative_to(home.root))
    rows = {row["path"]: row for row in registry.checkpoints(experiment_id)
            if str(Path(row["path"]).parent) == prefix}  # overfit checkpoints live one folder down
    leftovers = checkpoint.leftovers(folder)
    cleaned = False
    if leftovers and repair:
        try:
            with ExperimentLock(folder, experiment_id):  # never pull a file from under a live write
                checkpoint.clean_leftovers(folder)
                cleaned = True
        except Refused:
            pass
    for path in leftovers:
        detail = "left alone: the experiment is running" if repair and not cleaned else "from an interrupted write"
        problems.append(_problem("leftover temporary file", str(path.relative_to(home.root)), detail, cleaned))
    for relative, row in rows.items():
        if relative not in on_disk:
            if repair:
                registry.remove_checkpoint(relative)
            problems.append(_problem("missing checkpoint", relative, "registered but the file is gone", repair))
    newest: tuple[int, dict[str, Any]] | None = None
    for relative, (step, path) in on_disk.items():
        row = rows.get(relative)
        try:
            state = checkpoint.read(path, row["sha256"] if row else None)
        except checkpoint.InvalidCheckpoint as error:
            problems.append(_problem("invalid checkpoint", relative, f"{error}; resume skips it"))
            continue
        if newest is None or step > newest[0]:
            newest = (step, state)
        if row is None:
            if repair:
                registry.add_checkpoint(
                    experiment_id=experiment_id, run_id=None, step=step, path=relative,
                    sha256=checkpoint.expected_digest(path), size=os.path.getsize(path),
                    tokens=state.get("tokens_processed"), config_hash=state["config_hash"],
                    data_hash=state["data_hash"], tokenizer_hash=state["tokenizer_hash"], metrics=state.get("metrics") or {},
                )
            problems.append(_problem("orphaned checkpoint", relative, "file without a registry row", repair))
    has_runs = registry.query("select 1 from runs where experiment_id = ? and kind in ('train', 'resume') limit 1", (experiment_id,))
    if newest is not None and not has_runs:
        step, state = newest
        if repair:
            steps = (state.get("config") or {}).get("training", {}).get("steps")
            run_id = registry.start_run(
                experiment_id, "train", start_step=0, end_step=step, target_step=steps,
                config_hash=state["config_hash"], data_hash=state["data_hash"], tokenizer_hash=state["tokenizer_hash"],
                latest_metrics=state.get("metrics") or {}, host=None, pid=None,
                torch_version=state.get("environment", {}).get("torch"), device=state.get("environment", {}).get("device"),
                dtype=state.get("environment", {}).get("dtype"), threads=state.get("environment", {}).get("threads"),
            )
            registry.finish_run(run_id, "completed" if step == steps else "interrupted", final_metrics=state.get("metrics") or {},
                                error=f"rebuilt from checkpoints by octlm doctor --repair at {now()}")
        problems.append(_problem("checkpoints without a run", experiment_id, f"progress up to step {step} not in runs", repair))
    return problems
