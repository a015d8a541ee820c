"""Merging records of another home into this one (``registry import``, and ``unpack``'s rows). Torch-free.

``plan`` decides everything before anything is written: each experiment is matched by UUID (one already here keeps
its local ID, and is refused, exit 3, when its config fingerprint differs from the one here: a copied home, changed
and retrained, is another experiment; a new one takes its ID, renamed by ``--prefix`` or ``--as``, and is refused,
exit 3, when that ID is here with another UUID or as files without a row: ``admitting`` decides what may come
in); runs, verdicts and notes by UUID (a run an earlier import found still running in its home is brought up to date
by a later one that shows it further);
checkpoints by experiment, step and sha256 (registered as remote, on their box, unless ``unpack`` brought the
files); a run file is written when there is none here, or replaced when the imported one extends it. ``apply`` then
writes the YAML and run files, and the rows in one transaction, under each experiment's lock; a failure takes the
files back. Importing the same records twice plans nothing the second time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import atomic_write, read_regular
from octlm.core.home import Home, validate_id, validate_prefix
from octlm.exchange import admitting, reading
from octlm.exchange import records as exchange
from octlm.exchange.records import (
    TRACKS,
    ExportedCheckpoint,
    ExportedExperiment,
    ExportedNote,
    ExportedRun,
    ExportedRunFile,
    ExportedVerification,
    ExportRecord,
)
from octlm.exchange.results import Arrival, Imported
from octlm.store.locking import ExperimentLock
from octlm.store.merge import ExchangeRegistry, Merge
from octlm.store.runs import runfile


def import_file(home: Home, path: Path, prefix: str | None = None, *, allow_outside_sources: bool = False) -> Imported:
    """``octlm registry import``: merge the export at ``path`` into ``home``'s registry (see the module)."""
    found = reading.read(path)
    if prefix is not None:
        validate_prefix(prefix, "--prefix")
    hint = "import it under other IDs with --prefix (--prefix B- imports EXP-001 as B-EXP-001)"
    home.ensure_writable()
    with ExchangeRegistry(home.registry) as registry:
        chosen = plan(home, registry, found, lambda i: f"{prefix or ''}{i}", hint=hint, outside=allow_outside_sources)
        rows = apply(home, registry, chosen) if chosen.changed else {}
    files = sorted(str(p.relative_to(home.root)) for p in chosen.files)
    return {
        "schema_version": exchange.SCHEMA_VERSION,
        "file": str(path),
        "changed": chosen.changed,
        "experiments": chosen.experiments,
        "rows": rows,
        "files": files,
    }


@dataclass
class ImportPlan:
    merge: Merge = field(default_factory=Merge)
    files: dict[Path, bytes] = field(default_factory=dict)  # written before the rows, taken back on failure
    targets: dict[str, str] = field(default_factory=dict)  # experiment UUID -> its ID here
    experiments: list[Arrival] = field(default_factory=list)  # what happens to each, for the report
    outside: bool = False  # --allow-outside-sources: data.sources may name files outside the home and data root

    @property
    def changed(self) -> bool:
        return bool(self.files) or not self.merge.empty()


@dataclass
class ByType:
    """An export's records by type, each in the file's order."""

    experiments: list[ExportedExperiment] = field(default_factory=list)
    runs: list[ExportedRun] = field(default_factory=list)
    checkpoints: list[ExportedCheckpoint] = field(default_factory=list)
    verifications: list[ExportedVerification] = field(default_factory=list)
    notes: list[ExportedNote] = field(default_factory=list)
    run_files: list[ExportedRunFile] = field(default_factory=list)


def by_type(found: list[ExportRecord]) -> ByType:
    """``found`` sorted by type (each record checked, so its ``type`` says which TypedDict it is)."""
    out = ByType()
    for item in found:
        if item["type"] == "experiment":
            out.experiments.append(item)
        elif item["type"] == "run":
            out.runs.append(item)
        elif item["type"] == "checkpoint":
            out.checkpoints.append(item)
        elif item["type"] == "verification":
            out.verifications.append(item)
        elif item["type"] == "note":
            out.notes.append(item)
        else:
            out.run_files.append(item)
    return out


def owner(item: ExportRecord) -> str | None:
    """The UUID of the experiment a child record names (None for an experiment's own record)."""
    return None if item["type"] == "experiment" else item["experiment_uuid"]


def plan(
    home: Home,
    registry: ExchangeRegistry,
    found: list[ExportRecord],
    rename: Callable[[str], str],
    *,
    hint: str,
    local: bool = False,
    strict: bool = False,
    outside: bool = False,
) -> ImportPlan:
    """What merging ``found`` writes. ``rename``: an imported experiment's ID here; ``hint``: the way out of a
    taken ID; ``local``: checkpoint files come along (``unpack``) rather than staying remote; ``strict``: an
    experiment already here under another ID than ``rename`` gives is refused rather than merged into it;
    ``outside``: a new experiment's data.sources may name files outside the home and OCTLM_DATA_ROOT."""
    result, kinds = ImportPlan(outside=outside), by_type(found)
    known = {uuid: str(name) for uuid, name in registry.by_uuid("experiments").items()}
    for experiment in kinds.experiments:
        _experiment(home, registry, result, experiment, known, rename, hint, strict)
        if experiment["uuid"] in known:
            admitting.same_data(registry, experiment, known[experiment["uuid"]], kinds.runs)
    for item in found:
        key = owner(item)
        if key is not None and key not in result.targets:
            if key not in known:
                raise BadInput(f"a {item['type']} record names experiment {key}, which is neither in the file nor here")
            result.targets[key] = known[key]
    _children(registry, result, kinds)
    _checkpoints(registry, result, kinds.checkpoints, local)
    for run_file in kinds.run_files:
        _run_file(home, result, run_file)
    return result


def _experiment(
    home: Home,
    registry: ExchangeRegistry,
    result: ImportPlan,
    item: ExportedExperiment,
    known: dict[str, Any],
    rename: Callable[[str], str],
    hint: str,
    strict: bool,
) -> None:
    source, key = item["id"], item["uuid"]
    wanted = validate_id(rename(source))
    target = known.get(key, wanted)
    if key in result.targets or target in result.targets.values():
        raise BadInput(f"{source}: the file holds this experiment (or its ID) twice")
    if key in known and strict and target != wanted:
        raise Refused(f"{source} is already here as {target} (the same UUID): nothing was changed")
    result.targets[key] = target
    former = sorted(set(item.get("former_ids") or []) | ({source} - {target}))
    entry: Arrival = {"id": target, "from": source, "uuid": key, "status": "new"}
    if key in known:
        admitting.same_config(registry, item, target)
        had = registry.former_ids(target)
        if set(former) - set(had):
            result.merge.former_ids[target] = sorted(set(had) | set(former))
        result.experiments.append({**entry, "status": "here"})
        return
    if admitting.taken(home, registry, target):
        raise Refused(f"{target} exists here as another experiment (another UUID): nothing was changed; {hint}")
    text, sources = admitting.renamed_yaml(item, target)
    if not result.outside:
        admitting.refuse_outside(home, sources, source)
    result.files[home.config_path(target)] = text.encode("utf-8")
    fields = {k: item.get(k) for k in ("description", "preset", "created", "updated", "config_hash", "tags")}
    config: dict[str, Any] = item["config_json"] if isinstance(item.get("config_json"), dict) else {}
    yaml_path = str(home.config_path(target).relative_to(home.root))
    row = {
        "id": target,
        "uuid": key,
        **fields,
        "config_json": {**config, "id": target},
        "former_ids": former or None,
        "yaml_path": yaml_path,
        "archived": int(bool(item.get("archived"))),
    }
    result.merge.experiments.append(row)
    result.experiments.append({**entry, "status": "new"})


def _children(registry: ExchangeRegistry, result: ImportPlan, kinds: ByType) -> None:
    """Runs, verdicts and notes not here yet (by UUID), each under its experiment's ID here."""
    children: tuple[tuple[str, Sequence[ExportedRun | ExportedVerification | ExportedNote], list[dict[str, Any]]], ...]
    children = (
        ("runs", kinds.runs, result.merge.runs),
        ("verifications", kinds.verifications, result.merge.verifications),
        ("notes", kinds.notes, result.merge.notes),
    )
    in_flight = registry.runs_in_flight()
    for table, items, out in children:
        here = registry.by_uuid(table)
        for item in items:
            fields = {k: v for k, v in item.items() if k not in ("schema_version", "type", "experiment_uuid")}
            if table == "runs" and fields.get("status") == "running":  # another home's process: never checked here
                fields["status"] = f"unknown (host {fields.get('host') or 'unrecorded'})"
            if item["uuid"] not in here:
                out.append({**fields, "experiment_id": result.targets[item["experiment_uuid"]]})
                here[item["uuid"]] = None
            elif table == "runs" and _further(in_flight, item):
                result.merge.run_updates.append(fields)


def _further(in_flight: dict[str, int | None], item: ExportedRun | ExportedVerification | ExportedNote) -> bool:
    """Whether ``item``, a run here that an earlier import found still running in its home, shows it further now:
    ended there, or a later step (a trial shipping its checkpoints back to its driver as it trains)."""
    if item["uuid"] not in in_flight or item["type"] != "run":
        return False
    here, there = in_flight[item["uuid"]], item.get("end_step")
    status = str(item.get("status") or "running")
    ended = status != "running" and not status.startswith("unknown (")
    return ended or (isinstance(there, int) and (here is None or there > here))


def _checkpoints(registry: ExchangeRegistry, result: ImportPlan, items: list[ExportedCheckpoint], local: bool) -> None:
    """Checkpoints not here yet (the same experiment, step and sha256): as remote rows (the file stays on its
    box), or with ``local`` at ``checkpoints/<ID>/step-NNNNNN.pt``, where ``unpack`` puts the file."""
    here: dict[str, set[tuple[int, str]]] = {}
    for item in items:
        target = result.targets[item["experiment_uuid"]]
        if target not in here:
            here[target] = {(row["step"], row["sha256"]) for row in registry.checkpoints(target)}
        if (item["step"], item["sha256"]) in here[target]:
            continue
        here[target].add((item["step"], item["sha256"]))
        fields = {k: v for k, v in item.items() if k not in ("schema_version", "type", "experiment_uuid")}
        if local:
            fields.update(
                path=f"checkpoints/{target}/{layout.checkpoint_name(item['step'])}", remote_host=None, remote_path=None
            )
        elif not item.get("remote_host") or not item.get("remote_path"):
            raise BadInput(f"a checkpoint record of {target} at step {item['step']} names no remote_host and path")
        else:
            fields["path"] = f"{item['remote_host']}:{item['remote_path']}"
        result.merge.checkpoints.append({**fields, "experiment_id": target})


def _run_file(home: Home, result: ImportPlan, item: ExportedRunFile) -> None:
    """A track's run file: written when there is none here, replaced when the imported one extends this one."""
    target = result.targets[item["experiment_uuid"]]
    path = home.run_file(target, TRACKS[item["track"]])
    current, incoming = runfile.read(path), item["records"]
    if current and (len(incoming) <= len(current) or incoming[: len(current)] != current):
        return
    if not incoming and not item["metrics"]:
        return
    result.files[path] = "".join(json.dumps(record) + "\n" for record in incoming).encode("utf-8")
    result.merge.metrics[(target, item["track"])] = item["metrics"]


def apply(
    home: Home, registry: ExchangeRegistry, chosen: ImportPlan, before: Callable[[list[Path]], None] | None = None
) -> dict[str, int]:
    """Write ``chosen``: under the lock of each experiment it touches, ``before`` (``unpack`` places its files,
    naming each in the list it is given), the YAML and run files, then the rows in one transaction; {table: rows
    written}. Any failure takes back every file written."""
    placed: list[Path] = []
    written: list[tuple[Path, bytes | None]] = []
    with contextlib.ExitStack() as locks:
        for target in sorted(set(chosen.targets.values())):
            home.refuse_links(home.checkpoint_dir(target), home.runs, home.locks, home.experiments)
            locks.enter_context(ExperimentLock(home.lock_path(target), target))
        try:
            if before is not None:
                before(placed)
            for path, data in chosen.files.items():
                old = read_regular(path, max_bytes=runfile.MAX_BYTES, follow=False) if path.exists() else None
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, data)
                written.append((path, old))
            return registry.merge(chosen.merge)
        except BaseException as error:
            _take_back(placed, written)
            if isinstance(error, sqlite3.IntegrityError):
                raise Refused(
                    f"another process registered one of these IDs meanwhile ({error}): nothing changed"
                ) from None
            raise


def _take_back(placed: list[Path], written: list[tuple[Path, bytes | None]]) -> None:
    for path, old in reversed(written):
        if old is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, old)
    for path in reversed(placed):
        path.unlink(missing_ok=True)
