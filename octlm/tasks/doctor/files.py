"""``octlm doctor``'s look at an experiment's checkpoint files against its rows: missing and orphaned files,
checkpoints that are invalid or another experiment's, checksums that disagree (the file's bytes say which side is
stale), leftover temporary files, checkpoints without a run; and what every check's problem is (``problem``), with
which kinds ``--repair`` cannot fix."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from octlm.core import layout
from octlm.core.errors import Refused
from octlm.core.fsutil import file_sha256
from octlm.core.home import Home
from octlm.core.records import Problem
from octlm.store.locking import ExperimentLock
from octlm.store.registry import CheckpointRow, Registry, now
from octlm.train import checkpoint

# What --repair cannot fix: the files themselves are wrong, and only a person can tell how.
UNREPAIRABLE = frozenset({"invalid config", "invalid checkpoint", "foreign checkpoint", "invalid sweep record"})
OTHER_HOSTS = ("run on another host", "claim on another host")  # repaired with --other-hosts only


def problem(kind: str, where: str, detail: str, repaired: bool = False) -> Problem:
    return {
        "kind": kind,
        "where": where,
        "detail": detail,
        "repaired": repaired,
        "repairable": kind not in UNREPAIRABLE,
    }


def checkpoints(home: Home, registry: Registry, experiment_id: str, repair: bool) -> list[Problem]:
    folder = home.checkpoint_dir(experiment_id)
    on_disk = {str(p.relative_to(home.root)): (step, p) for step, p in layout.checkpoints(folder)}
    prefix = str(folder.relative_to(home.root))
    rows = {  # overfit checkpoints live one folder down; a remote row's file stays on its box (registry import)
        row["path"]: row
        for row in registry.checkpoints(experiment_id)
        if str(Path(row["path"]).parent) == prefix and not row.get("remote_host")
    }
    problems = _leftovers(home, folder, experiment_id, repair)
    for relative in [r for r in rows if r not in on_disk]:
        if repair:
            registry.remove_checkpoint(relative)
        problems.append(problem("missing checkpoint", relative, "registered but the file is gone", repair))
    newest: tuple[int, checkpoint.Record] | None = None
    for relative, (step, path) in on_disk.items():
        row = rows.get(relative)
        record, found = _verdict(home, registry, experiment_id, relative, path, row, repair)
        problems += found
        if record is None:
            continue
        if newest is None or step > newest[0]:
            newest = (step, record)
        if row is None:
            if repair:
                _register_checkpoint(registry, experiment_id, relative, step, path, record)
            problems.append(problem("orphaned checkpoint", relative, "file without a registry row", repair))
    if newest is not None and not registry.has_training_run(experiment_id):
        problems.append(_missing_run(registry, experiment_id, *newest, repair))
    return problems


def _verdict(
    home: Home,
    registry: Registry,
    experiment_id: str,
    relative: str,
    path: Path,
    row: CheckpointRow | None,
    repair: bool,
) -> tuple[checkpoint.Record | None, list[Problem]]:
    """The checkpoint's record when it verifies and belongs to this experiment's training (else None),
    and what is wrong with it."""
    try:
        record = checkpoint.read(path, row["sha256"] if row else None, row["size"] if row else None)
    except checkpoint.InvalidCheckpoint as error:
        return None, [problem("invalid checkpoint", relative, f"{error}; resume skips it")]
    if record.experiment not in ("", experiment_id, *registry.former_ids(experiment_id)) or record.kind != "train":
        detail = (
            f"records experiment {record.experiment or '?'}, kind {record.kind}: not {experiment_id}'s training; "
            "not used to rebuild rows (move it away)"
        )
        return None, [problem("foreign checkpoint", relative, detail)]
    disagreement = _digests(home, registry, experiment_id, relative, path, row, repair) if row else None
    return record, [disagreement] if disagreement else []


def _digests(
    home: Home, registry: Registry, experiment_id: str, relative: str, path: Path, row: CheckpointRow, repair: bool
) -> Problem | None:
    """The ``.sha256`` file and the registry row name different digests: say which the file matches."""
    written, registered = layout.read_sidecar(path), row["sha256"]
    if not written or not registered or written == registered:
        return None
    actual = _file_digest(path)
    fix: Callable[[], None]
    if actual == written:
        stale, fix = "the registry row", lambda: registry.set_checkpoint_digest(relative, actual)
    elif actual == registered:
        stale = layout.sidecar(path).name
        fix = lambda: layout.write_sidecar(path, actual)  # noqa: E731
    else:
        return None  # matches neither: read() has refused it already
    fixed = repair and locked(home, experiment_id, fix)
    detail = (
        f"{layout.sidecar(path).name} says {written[:12]}, the registry {registered[:12]}; "
        f"the file's bytes are {actual[:12]}, so {stale} is stale"
    )
    return problem("checksum disagreement", relative, detail, fixed)


def _file_digest(path: Path) -> str:
    return file_sha256(path)[0]


def locked(home: Home, experiment_id: str, fix: Callable[[], Any]) -> bool:
    """Run ``fix`` holding the experiment's lock (never beside a live write); False when it is held."""
    try:
        with ExperimentLock(home.lock_path(experiment_id), experiment_id):
            fix()
    except Refused:
        return False
    return True


def _leftovers(home: Home, folder: Path, experiment_id: str, repair: bool) -> list[Problem]:
    leftovers = layout.leftovers(folder)
    cleaned = bool(leftovers) and repair and locked(home, experiment_id, lambda: layout.clean_leftovers(folder))
    detail = "left alone: the experiment is running" if repair and not cleaned else "from an interrupted write"
    return [problem("leftover temporary file", str(path.relative_to(home.root)), detail, cleaned) for path in leftovers]


def _register_checkpoint(
    registry: Registry, experiment_id: str, relative: str, step: int, path: Path, record: checkpoint.Record
) -> None:
    registry.add_checkpoint(
        experiment_id=experiment_id,
        run_id=None,
        step=step,
        path=relative,
        sha256=layout.read_sidecar(path) or _file_digest(path),
        size=os.path.getsize(path),
        tokens=record.tokens,
        config_hash=record.fingerprints.config,
        data_hash=record.fingerprints.data,
        tokenizer_hash=record.fingerprints.tokenizer,
        metrics=record.metrics,
    )


def _missing_run(registry: Registry, experiment_id: str, step: int, record: checkpoint.Record, repair: bool) -> Problem:
    """Checkpoints without a training run: with ``repair``, record one rebuilt from the newest checkpoint."""
    if repair:
        steps = record.config.get("training", {}).get("steps")
        environment, prints = record.environment, record.fingerprints
        run_id = registry.start_run(
            experiment_id,
            "train",
            start_step=0,
            end_step=step,
            target_step=steps,
            config_hash=prints.config,
            data_hash=prints.data,
            tokenizer_hash=prints.tokenizer,
            latest_metrics=record.metrics,
            host=None,
            pid=None,
            torch_version=environment.get("torch"),
            device=environment.get("device"),
            dtype=environment.get("dtype"),
            threads=environment.get("threads"),
            world_size=record.world_size,
        )
        last = isinstance(steps, int) and step >= steps  # else ``stopped``, as a run ended by --until records itself
        registry.finish_run(
            run_id,
            "completed" if last else "stopped",
            final_metrics=record.metrics,
            error=f"rebuilt from checkpoints by octlm doctor --repair at {now()}",
        )
    detail = f"progress up to step {step} not in runs"
    return problem("checkpoints without a run", experiment_id, detail, repair)
