"""``octlm doctor``: check the registry against the files, and rebuild what it lost.

The files are the truth: ``experiments/*.yaml`` hold the configs, and every checkpoint
carries its config, fingerprints, step and metrics. So deleting ``registry.db`` loses
nothing that matters; ``doctor --repair`` rebuilds experiments, checkpoints and a run per
experiment from them (verdict history is the one thing only the registry held).

Checking opens the registry read-only. Beyond missing rows it reports: registry cells that are
not valid JSON (``--repair`` writes the config again from its YAML, or clears the cell); runs
left ``running`` by a process that is gone (pid and start time) or by another host, which cannot
be checked from here (``--repair --other-hosts`` marks those crashed); a checkpoint whose
``.sha256`` file and registry row disagree (the file's bytes say which one is stale, and
``--repair`` rewrites that one); and a checkpoint in ``checkpoints/<ID>/`` that records another
experiment or another track (``overfit``): foreign, never used to rebuild rows. Rows of an experiment
whose YAML is gone are removed by ``--repair`` (as ``octlm rm --keep-files``). A run rebuilt from
checkpoints reads ``completed`` at ``training.steps`` and ``stopped`` before it. The staging folders
(``.unpack-*``) of an ``unpack`` that was killed are listed, and removed by ``--repair``. Each problem says whether
``--repair`` can fix it, and ``advice`` recommends it only then. ``--repair`` also gives the registry the highest ID
numbers ever given that ``.octlm/ids.json`` keeps (and the file the registry's), so a rebuilt registry never gives
again the ID of an experiment removed before its loss.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from octlm.core import layout
from octlm.core.errors import OctlmError, Refused
from octlm.core.fsutil import file_sha256
from octlm.core.home import Home
from octlm.core.liveness import alive, is_other_host
from octlm.core.records import Checkup, Problem
from octlm.store import experiments, kept
from octlm.store.locking import ExperimentLock
from octlm.store.registry import CheckpointRow, Registry, now
from octlm.store.sweeps.rows import claim_is_dead
from octlm.train import checkpoint

# What --repair cannot fix: the files themselves are wrong, and only a person can tell how.
UNREPAIRABLE = frozenset({"invalid config", "invalid checkpoint", "foreign checkpoint", "invalid sweep record"})
OTHER_HOSTS = ("run on another host", "claim on another host")  # repaired with --other-hosts only


def _problem(kind: str, where: str, detail: str, repaired: bool = False) -> Problem:
    return {
        "kind": kind,
        "where": where,
        "detail": detail,
        "repaired": repaired,
        "repairable": kind not in UNREPAIRABLE,
    }


def run(home: Home, repair: bool = False, other_hosts: bool = False) -> Checkup:
    """The report; its ``advice`` is the closing line, which recommends ``--repair`` only when it would fix something
    still listed."""
    with Registry(home.registry, create=repair) as registry:  # checking never creates or writes a registry
        problems = _damaged_cells(home, registry, repair) + _shared_identities(home, registry, repair)
        problems += _experiments(home, registry, repair) + _stuck_runs(registry, repair, other_hosts)
        problems += _open_claims(registry, repair, other_hosts) + _lost_sweeps(home, registry, repair)
        if repair:  # the IDs given before, from .octlm/ids.json (a rebuilt registry), and back: never given again
            kept.keep_marks(home, registry)
    problems += _staging(home, repair)
    unrepaired = [p for p in problems if not p["repaired"]]
    return {
        "home": str(home.root),
        "repair": repair,
        "problems": problems,
        "healthy": not unrepaired,
        "advice": advice(problems),
    }


def advice(problems: list[Problem]) -> str:
    """The closing line: healthy, or what to do about the problems left (the repair that fixes some, or none)."""
    left = [p for p in problems if not p["repaired"]]
    if not left:
        return "healthy"
    fixable = [p for p in left if p["repairable"]]
    if not fixable:
        return f"problems found ({len(left)}) that --repair cannot fix: see the detail of each"
    hosts = (
        " --other-hosts" if any(p["kind"] in ("run on another host", "claim on another host") for p in fixable) else ""
    )
    share = "" if len(fixable) == len(left) else f" ({len(fixable)} of {len(left)} it can fix)"
    return f"problems found: run `octlm doctor --repair{hosts}`{share}"


def _damaged_cells(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Cells that are not valid JSON: ``show`` reads them as empty; repairing writes them again or clears them."""
    problems = []
    for table, row_id, column in registry.malformed_cells():
        if repair:
            _repair_cell(home, registry, table, row_id, column)
        detail = f"{column} is not valid JSON; show reads it as empty"
        problems.append(_problem("malformed registry cell", f"{table} row {row_id}", detail, repair))
    return problems


def _repair_cell(home: Home, registry: Registry, table: str, row_id: Any, column: str) -> None:
    if (table, column) == ("experiments", "config_json"):  # the YAML file holds the config: register it again
        try:
            experiments.register(home, registry, experiments.load(home, str(row_id)))
            return
        except OctlmError:
            pass
    registry.clear_cell(table, row_id, column)


def _shared_identities(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Two experiments' identities kept with one UUID (``.octlm/identities/`` copied by hand): the first keeps it,
    and ``--repair`` gives each other one its own (before, registering it broke the registry's unique UUIDs)."""
    return [
        _problem(
            "shared identity",
            f".octlm/identities/{other}",
            f"{keeper}'s UUID too; {keeper} keeps it, "
            + (f"{other} was given its own" if repair else f"--repair gives {other} its own"),
            repair,
        )
        for other, keeper in kept.shared_identities(home, registry, repair)
    ]


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
        problems.append(_row_without_config(home, registry, experiment_id, repair))
    return problems


def _row_without_config(home: Home, registry: Registry, experiment_id: str, repair: bool) -> Problem:
    """Rows of an experiment whose config is gone: repairing removes them all, as ``octlm rm --keep-files``."""
    fixed = repair and _locked(home, experiment_id, lambda: registry.remove_experiment(experiment_id))
    if fixed:
        detail = f"no experiments/{experiment_id}.yaml; its rows were removed (files, if any, kept)"
    elif repair:
        detail = f"no experiments/{experiment_id}.yaml; left alone: the experiment is locked by a running process"
    else:
        detail = f"no experiments/{experiment_id}.yaml; --repair removes its rows (as `octlm rm --keep-files`)"
    return _problem("row without config", experiment_id, detail, fixed)


def _staging(home: Home, repair: bool) -> list[Problem]:
    """Staging folders of an ``unpack`` that is gone (killed before it could clean up): ``--repair`` removes them.
    A live unpack's (its pid and start time in the name) is left alone."""
    problems = []
    for path, pid, start in layout.staging_folders(home.root):
        if pid is not None and start is not None and alive(pid, start):
            continue
        size = sum(p.lstat().st_size for p in path.rglob("*"))
        if repair:
            shutil.rmtree(path, ignore_errors=True)
        detail = f"left by an unpack that is gone ({size:,} bytes); --repair removes it"
        problems.append(_problem("stale unpack staging folder", path.name, detail, repair))
    return problems


def _stuck_runs(registry: Registry, repair: bool, other_hosts: bool) -> list[Problem]:
    problems = []
    for row in registry.running_runs():
        where = f"run {row['id']} of {row['experiment_id']}"
        if row["status"] == "crashed":
            if repair:
                registry.finish_run(row["id"], "crashed", error="process gone; marked by octlm doctor")
            detail = f"pid {row['pid']} on {row['host']} is gone"
            problems.append(_problem("run stuck in running", where, detail, repair))
        elif is_other_host(row):
            fixed = repair and other_hosts
            if fixed:
                error = (
                    f"not checked on its host; marked by octlm doctor --repair --other-hosts on {socket.gethostname()}"
                )
                registry.finish_run(row["id"], "crashed", error=error)
            hint = "" if fixed else "; if it runs no more, `octlm doctor --repair --other-hosts` marks it crashed"
            detail = f"{row['status']}: pid {row['pid']} cannot be checked from this host{hint}"
            problems.append(_problem("run on another host", where, detail, fixed))
    return problems


def _open_claims(registry: Registry, repair: bool, other_hosts: bool) -> list[Problem]:
    """Claims on the sweeps' queue that no worker here will ever release: a dead worker's on this host (the next
    worker takes it over; ``--repair`` releases it now) and any on another host (a copied home, a container renamed;
    ``--repair --other-hosts`` releases it): released, the trial is queued again and resumes from its checkpoint."""
    problems, here = [], socket.gethostname()
    for claim in registry.claims_held():
        where = f"claim {claim['id']} of {claim['experiment_id']}"
        if claim["host"] == here:
            if not claim_is_dead(claim):
                continue
            if repair:
                registry.settle_claim(claim["id"], "lost")
            detail = f"its worker (pid {claim['pid']}) is gone; --repair queues the trial again"
            problems.append(_problem("lost claim", where, detail, repair))
            continue
        fixed = repair and other_hosts
        if fixed:
            registry.settle_claim(claim["id"], "lost")
        hint = "" if fixed else "; no worker here takes it: `octlm doctor --repair --other-hosts` queues it again"
        detail = f"held by pid {claim['pid']} on host {claim['host']} since {claim['claimed']}{hint}"
        problems.append(_problem("claim on another host", where, detail, fixed))
    return problems


def _lost_sweeps(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Sweeps the registry lost (``registry.db`` gone or replaced) but their records beside it keep
    (``.octlm/sweeps/<name>.json``): ``--repair`` rebuilds each, its queue, halving's decisions and its trials'
    ``sweep:`` tags (a trial running then is queued again). A record checked and found not to be one (damaged, or
    made by hand: ``kept.kept_sweeps``) is said in one line naming its key, and nothing is rebuilt from it."""
    records, damaged = kept.kept_sweeps(home)
    problems = [_problem("invalid sweep record", where, f"{why}; not rebuilt from") for where, why in damaged.items()]
    here = {row["uuid"] for row in registry.sweeps()}
    for name, record in records.items():
        if record["sweep"]["uuid"] in here:
            continue
        trials = [t for t in record["trials"] if registry.experiment(str(t["experiment_id"])) is not None]
        gone = len(record["trials"]) - len(trials)
        detail = f"kept in .octlm/sweeps/{name}.json with {len(trials)} trials, not in the registry"
        detail += f" ({gone} of its trials' experiments are gone)" if gone else ""
        fixed = repair
        try:
            if repair:
                kept.rebuild_sweep(registry, record, trials)
        except OctlmError as error:  # its name is another sweep's here: said, and the rest repaired
            detail, fixed = f"{detail}; not rebuilt: {error}", False
        problems.append(_problem("sweep without rows", f"sweep {name}", detail + "; rebuilt" * fixed, fixed))
    return problems


def _checkpoints(home: Home, registry: Registry, experiment_id: str, repair: bool) -> list[Problem]:
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
        problems.append(_problem("missing checkpoint", relative, "registered but the file is gone", repair))
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
            problems.append(_problem("orphaned checkpoint", relative, "file without a registry row", repair))
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
        return None, [_problem("invalid checkpoint", relative, f"{error}; resume skips it")]
    if record.experiment not in ("", experiment_id, *registry.former_ids(experiment_id)) or record.kind != "train":
        detail = (
            f"records experiment {record.experiment or '?'}, kind {record.kind}: not {experiment_id}'s training; "
            "not used to rebuild rows (move it away)"
        )
        return None, [_problem("foreign checkpoint", relative, detail)]
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
    fixed = repair and _locked(home, experiment_id, fix)
    detail = (
        f"{layout.sidecar(path).name} says {written[:12]}, the registry {registered[:12]}; "
        f"the file's bytes are {actual[:12]}, so {stale} is stale"
    )
    return _problem("checksum disagreement", relative, detail, fixed)


def _file_digest(path: Path) -> str:
    return file_sha256(path)[0]


def _locked(home: Home, experiment_id: str, fix: Callable[[], Any]) -> bool:
    """Run ``fix`` holding the experiment's lock (never beside a live write); False when it is held."""
    try:
        with ExperimentLock(home.lock_path(experiment_id), experiment_id):
            fix()
    except Refused:
        return False
    return True


def _leftovers(home: Home, folder: Path, experiment_id: str, repair: bool) -> list[Problem]:
    leftovers = layout.leftovers(folder)
    cleaned = bool(leftovers) and repair and _locked(home, experiment_id, lambda: layout.clean_leftovers(folder))
    detail = "left alone: the experiment is running" if repair and not cleaned else "from an interrupted write"
    return [
        _problem("leftover temporary file", str(path.relative_to(home.root)), detail, cleaned) for path in leftovers
    ]


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
    return _problem("checkpoints without a run", experiment_id, detail, repair)
