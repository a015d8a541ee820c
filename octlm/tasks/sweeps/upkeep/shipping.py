"""``octlm sweep pack`` / ``sweep unpack``: a sweep's trials moved to the node-local homes of a job array and back,
so that no registry is ever on a network filesystem. Torch-free.

A shipped sweep is a folder (a network filesystem is fine for it: plain files, each written whole): ``sweep.json``
(the format, the sweep's row with its UUID, its trials' rows) and one ``octlm pack`` per trial (``<ID>.tar``, its
newest checkpoint among its files). ``--shards N`` writes ``shard-0/`` ... ``shard-N-1/``, trial i in shard
i mod N. ``sweep.json`` is written last, so a folder with it is complete. ``unpack`` unpacks every trial's pack
(``exchange.packing``: every checksum verified, the same pack twice changes nothing) and merges the sweep's rows
by UUID (``Registry.merge_sweep``: a trial's row where the shipped one got further). A task packs its home's
sweep back into its shard's folder when its worker stops; the driver unpacks every shard folder at the end.
Successive halving and Optuna decide across all of a sweep's trials, so they ship whole (``--shards 1``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import check_output, read_regular, write_output
from octlm.core.home import Home
from octlm.exchange import packing
from octlm.store import kept
from octlm.store.registry import Registry, now
from octlm.store.sweeps import specs
from octlm.store.sweeps.records import (
    QueuedTrial,
    Shipped,
    SweepFields,
    SweepPacked,
    SweepRow,
    SweepSpec,
    SweepUnpacked,
    TrialFields,
)
from octlm.store.sweeps.rows import SWEEP_FIELDS, TRIAL_FIELDS, picked
from octlm.tasks.sweeps.planning import samplers

if TYPE_CHECKING:
    from octlm.train.checkpoint import Record

FORMAT, VERSION, MANIFEST = "octlm-sweep", 1, "sweep.json"
MAX_MANIFEST = 64 << 20


class ShippedSweep(TypedDict):
    """A shipped sweep's ``sweep.json``, as ``read_manifest`` has checked it: the sweep's row and its trials' rows
    (the columns ``SWEEP_FIELDS`` and ``TRIAL_FIELDS`` name, each checked for its type)."""

    format: str
    version: int
    sweep: SweepFields  # a sweep row's columns, spec included (specs.check_sweep)
    trials: list[TrialFields]  # trial rows' columns (specs.check_trial)


def pack(home: Home, name: str, output: Path, shards: int = 1) -> SweepPacked:
    """Write the sweep ``name`` to the folder ``output`` (in ``shards`` shard folders), then mark it shipped here,
    only if nothing changed it meanwhile (``Registry.ship``); what went where."""
    _outside_home(home, output)
    with Registry(home.registry, create=False) as registry:
        sweep = registry.sweep(name)
        if sweep is None:
            raise BadInput(f"unknown sweep {name}")
        trials, claims = registry.trials(sweep["id"]), len(registry.claims(sweep["id"]))
    spec = sweep["spec"] or {}
    asks = samplers.of(spec, f"{home.registry}: sweep {name}").asks  # a spec that names no sampler: refused
    if shards != 1 and (spec.get("halving") or asks):
        raise BadInput(
            f"--shards {shards}: sweep {name} decides across all its trials (halving, Optuna): ship it whole"
        )
    if not 1 <= shards <= max(1, len(trials)):
        raise BadInput(f"--shards {shards}: give 1 to {max(1, len(trials))} (one trial a shard at most)")
    folders = [output] if shards == 1 else [output / f"shard-{index}" for index in range(shards)]
    _check_places(folders, trials, output)
    for index, folder in enumerate(folders):
        _write_shard(home, sweep, trials[index::shards], folder, own_name=folder != output)
    ids = [t["experiment_id"] for t in trials]
    shipped: Shipped = {"to": str(output), "at": now(), "trials": ids}  # this home's, never in what it ships
    with Registry(home.registry) as registry:
        if not registry.ship(name, spec, claims, shipped):
            raise Refused(
                f"sweep {name} changed while it was being packed (extended or retried, or a worker here took a "
                f"trial): it was not marked shipped; pack it again (its folders are written again)"
            )
        kept.keep_sweep(home, registry, name)
    return {"sweep": name, "folders": [str(f) for f in folders], "trials": ids}


def _write_shard(home: Home, sweep: SweepRow, mine: list[QueuedTrial], folder: Path, own_name: bool) -> None:
    """One folder of a shipped sweep: each of its trials' packs, then ``sweep.json`` (last: a folder with it is
    whole)."""
    _make_folder(folder, own_name=own_name)
    for trial in mine:
        packing.pack(home, trial["experiment_id"], folder / f"{trial['experiment_id']}.tar", own_name=True)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "sweep": picked(sweep, SWEEP_FIELDS) | {"spec": _unmarked(sweep["spec"] or {})},  # the mark is this home's
        "trials": [picked(trial, TRIAL_FIELDS) for trial in mine],
    }
    write_output(folder / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode(), MANIFEST, own_name=True)


def _outside_home(home: Home, output: Path) -> None:
    """BadInput when ``-o`` is the home itself or inside one of the folders octlm keeps there: the packs would land
    among its own files, and the sweep would be marked shipped to itself."""
    resolved, root = output.resolve(), home.root.resolve()
    kept_here = [*home.own_folders(), home.root / "checkpoints", home.root / kept.FOLDER]
    where = "its root" if resolved == root else None
    for folder in kept_here:
        if where is None and resolved.is_relative_to(folder.resolve()):
            where = f"its {folder.name}/"
    if where is not None:
        raise BadInput(
            f"-o {output}: inside the home {home.root} ({where}), which octlm keeps: give a folder outside the home's "
            "own folders, where other homes can read it; nothing was written"
        )


def refuse_shipped(spec: SweepSpec, name: str, doing: str) -> None:
    """Refused while the sweep's trials are shipped to other homes (``sweep pack``) and not all merged back."""
    shipped = spec.get("shipped")
    if isinstance(shipped, dict) and shipped.get("trials"):
        raise Refused(
            f"sweep {name} is shipped to {shipped.get('to')} (sweep pack, {shipped.get('at')}): its trials run in "
            f"other homes, so it cannot be {doing} here; merge them back first (`octlm sweep unpack "
            f"{shipped.get('to')}`, each shard), nothing was changed"
        )


def left_alone(sweeps: list[SweepRow], say: Callable[[str], None]) -> set[str]:
    """The trials of ``sweeps`` shipped to other homes, which a worker here leaves alone (the queue never hands them
    out: ``Registry.claim``), each sweep said once in this process: trained here too, a trial would come back as
    two histories of one experiment."""
    away: set[str] = set()
    for sweep in sweeps:
        shipped = (sweep["spec"] or {}).get("shipped")
        if not isinstance(shipped, dict) or not shipped.get("trials"):
            continue
        away.update(shipped["trials"])
        if sweep["name"] not in _SAID:
            _SAID.add(sweep["name"])
            say(
                f"work: sweep {sweep['name']} is shipped to {shipped.get('to')} (sweep pack, {shipped.get('at')}): its "
                f"{len(shipped['trials'])} trials there run in other homes and are left alone here until `octlm sweep "
                "unpack` merges them back"
            )
    return away


_SAID: set[str] = set()


def _unshipped(spec: SweepSpec, merged: list[str]) -> SweepSpec:
    """The spec with the trials merged back taken off its ``shipped`` mark (the mark gone when none is left)."""
    shipped = spec.get("shipped")
    if not isinstance(shipped, dict):
        return spec
    left = [i for i in shipped.get("trials") or [] if i not in merged]
    return {**spec, "shipped": {**shipped, "trials": left}} if left else _unmarked(spec)


def _unmarked(spec: SweepSpec) -> SweepSpec:
    unmarked = spec.copy()
    unmarked.pop("shipped", None)
    return unmarked


def _check_places(folders: list[Path], trials: list[QueuedTrial], output: Path) -> None:
    """Every place a shipped sweep writes, checked before anything is written: a shard folder octlm names is no link,
    and no link, device or FIFO sits where a trial's pack or ``sweep.json`` goes (``fsutil.output_writer``)."""
    for index, folder in enumerate(folders):
        if folder != output and folder.is_symlink():
            raise Refused(f"{folder} is a symbolic link to {os.readlink(folder)}: remove it; nothing was written")
        for trial in trials[index :: len(folders)]:
            check_output(folder / f"{trial['experiment_id']}.tar", own_name=True)
        check_output(folder / MANIFEST, own_name=True)


def _make_folder(folder: Path, own_name: bool) -> None:
    """The folder a shipped sweep (or a shard) goes in; a shard folder octlm names is never a link (anyone who can
    write ``-o DIR`` could have planted one), and nothing in the way is written through."""
    if own_name and folder.is_symlink():  # planted since the check
        raise Refused(f"{folder} is a symbolic link to {os.readlink(folder)}: remove it; nothing was written there")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise Refused(f"{folder} exists and is not a folder: give another -o DIR; nothing was written there") from None
    except OSError as error:
        raise Refused(f"{folder} cannot be made: {error.strerror or error}; nothing was written there") from None


def read_manifest(folder: Path) -> ShippedSweep:
    """``sweep.json`` of a shipped sweep, checked; BadInput for a folder that is not one, Refused for a newer one."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(read_regular(path, max_bytes=MAX_MANIFEST))
    except FileNotFoundError:
        raise BadInput(
            f"{folder}: no {MANIFEST}: not a sweep written by `octlm sweep pack` (or not yet whole)"
        ) from None
    except (OSError, ValueError) as error:
        raise BadInput(f"{path}: cannot be read as a shipped sweep ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BadInput(f"{path}: not a shipped sweep (format {FORMAT!r} expected)")
    if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
        raise Refused(f"{path}: written by a newer octlm (version {manifest.get('version')}); upgrade octlm")
    sweep, trials = manifest.get("sweep"), manifest.get("trials")
    if not isinstance(sweep, dict) or not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        raise BadInput(f"{path}: malformed: expected a sweep and a list of trials")
    try:  # field by field, as every reader of a sweep checks one (``store/sweeps/specs``)
        samplers.of(specs.check_sweep(sweep, str(path)), f"{path}: sweep")  # a sampler of the table too
        for index, trial in enumerate(trials):
            specs.check_trial(trial, str(path), index)
    except BadInput as error:
        raise BadInput(f"{error}; nothing was changed") from None
    return cast(ShippedSweep, manifest)  # its sweep and trials checked above


def unpack(home: Home, folder: Path) -> SweepUnpacked:
    """Unpack a shipped sweep (or one shard of it) into ``home``: every trial's pack, then the sweep's rows."""
    manifest = read_manifest(folder)
    packs = [folder / f"{t['experiment_id']}.tar" for t in manifest["trials"]]
    hint = "sweep unpack keeps the trials' IDs: free this ID here, or unpack the sweep into another home"
    for pack in packs:  # every trial's pack checked (members, checksums, what it merges) before any is unpacked
        packing.unpack(home, pack, hint=hint, check_only=True, same=same_state)
    unpacked = [packing.unpack(home, pack, hint=hint, same=same_state) for pack in packs]
    with Registry(home.registry) as registry:
        merged = registry.merge_sweep(manifest["sweep"], manifest["trials"])
        registry.change_spec(manifest["sweep"]["name"], lambda spec: _unshipped(spec, list(merged)))
        kept.keep_sweep(home, registry, manifest["sweep"]["name"])
    return {
        "sweep": manifest["sweep"]["name"],
        "trials": merged,
        "changed": any(u["changed"] for u in unpacked) or any(v != "kept" for v in merged.values()),
    }


def same_state(here: Path, packed: Path) -> bool:
    """Whether two checkpoints of a step hold the same training state, bit for bit: weights, optimizer state and
    the sampler's position (a shipped trial trained here too, from the same config, as exactly as training is: its
    files differ only in timings and the box's record, and the trial merges back). Torch is loaded here only."""
    import torch

    from octlm.train import checkpoint

    try:
        mine, theirs = checkpoint.read(here), checkpoint.read(packed)
    except checkpoint.InvalidCheckpoint:
        return False
    a, b = _state(mine), _state(theirs)
    return (
        mine.step == theirs.step
        and mine.model.keys() == theirs.model.keys()
        and len(a) == len(b)
        and all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
            for x, y in zip(a, b, strict=True)
        )
    )


def _state(record: Record) -> list[Any]:
    """A checkpoint's training state as one list: its weights, its optimizer's state, its sampler's position."""
    optimizer = record.optimizer.get("state", {})
    moments = [value for _, values in sorted(optimizer.items()) for _, value in sorted(values.items())]
    return [*record.model.values(), *moments, record.sampler]
