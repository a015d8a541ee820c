"""``octlm pack`` / ``unpack``: one experiment as one tar file, to move it to another home. Torch-free.

A pack holds, under ``octlm-pack/``: ``manifest.json`` (format, version, the experiment, the sha256 and size of
every other member), ``registry.jsonl`` (the experiment's records, as ``registry export`` writes them, with its
YAML and run files; only the packed checkpoints), ``tokenizer.json``, ``blocks.jsonl`` (its evaluations block by
block, where it has them), and ``checkpoints/step-NNNNNN.pt`` with their ``.sha256`` files. Members are sorted,
with fixed times, owners and modes, so the same state packs to the same bytes. ``unpack`` reads nothing but such
regular files (any other name, a link or a device is refused), verifies every checksum in a staging folder inside
the home before anything is registered, then places the files (``placing``) and merges the rows (``importing``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import IO, Literal, cast, overload

from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import file_sha256, open_regular, output_writer
from octlm.core.home import Home, validate_id
from octlm.core.provenance import __version__
from octlm.core.signals import stopping_at_once
from octlm.exchange import importing, placing, reading, tarcheck
from octlm.exchange import records as exchange
from octlm.exchange.records import ExportedExperiment, ExportRecord
from octlm.exchange.results import Checked, Manifest, Packed, Unpacked
from octlm.store.locking import held_for_reading
from octlm.store.merge import ExchangeRegistry
from octlm.store.runs import evalblocks

FORMAT, VERSION, ROOT, MANIFEST, RECORDS, TOKENIZER = (
    tarcheck.FORMAT,
    tarcheck.VERSION,
    tarcheck.ROOT,
    tarcheck.MANIFEST,
    tarcheck.RECORDS,
    tarcheck.TOKENIZER,
)

Source = Path | bytes


# ---------------------------------------------------------------- pack


def pack(
    home: Home,
    experiment_id: str,
    output: Path,
    *,
    step: int | None = None,
    every: bool = False,
    own_name: bool = False,
    held: bool = False,
) -> Packed:
    """Write the pack of ``experiment_id`` to ``output`` (atomically), under the experiment's lock; ``own_name``: a
    name octlm chose (``sweep pack``), written only as a regular file (``fsutil.output_writer``); ``held``: the
    caller is the run that holds the lock, between two steps (a trial on a Ray node packing each checkpoint as its
    keeper writes it, ``working/remote``), so the lock is not taken again."""
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: there is no folder {output.parent}")
    if not home.config_path(experiment_id).is_file():
        raise BadInput(f"unknown experiment {experiment_id}: {home.config_path(experiment_id)} does not exist")
    folder = home.checkpoint_dir(experiment_id)
    holding = contextlib.nullcontext() if held else held_for_reading(home.lock_path(experiment_id), experiment_id)
    with holding:  # no run trains it while it is read (but the caller's own, between two steps)
        chosen = _chosen(folder, experiment_id, step, every)
        members: dict[str, Source] = {}
        for _, path in chosen:
            members[f"checkpoints/{path.name}"] = path
            members[f"checkpoints/{layout.sidecar(path).name}"] = layout.sidecar(path)
        if (folder / TOKENIZER).is_file():
            members[TOKENIZER] = folder / TOKENIZER
        blocks = evalblocks.path_for(home.run_file(experiment_id))
        if blocks.is_file():  # so that a moved run can still be paired with the runs of its new home
            members[tarcheck.BLOCKS] = blocks
        digests = {name: _digest(source) for name, source in members.items()}
        for _, path in chosen:
            _check_sidecar(path, digests[f"checkpoints/{path.name}"][0])
        members[RECORDS] = _records(home, experiment_id, chosen, digests)
        digests[RECORDS] = _digest(members[RECORDS])
        files = {name: {"sha256": digest, "size": size} for name, (digest, size) in sorted(digests.items())}
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "experiment": experiment_id,
            "octlm": __version__,
            "files": files,
        }
        members[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        written = _write_tar(output, members, own_name)
    return {
        "schema_version": exchange.SCHEMA_VERSION,
        "file": str(output),
        "experiment": experiment_id,
        "steps": [number for number, _ in chosen],
        "bytes": written,
    }


def _chosen(folder: Path, experiment_id: str, step: int | None, every: bool) -> list[tuple[int, Path]]:
    found = layout.checkpoints(folder)
    if step is not None:
        found = [(number, path) for number, path in found if number == step]
        if not found:
            raise BadInput(f"{experiment_id} has no checkpoint at step {step}")
    return found if every or step is not None else found[-1:]


def _digest(source: Source) -> tuple[str, int]:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest(), len(source)
    return file_sha256(source)


def _check_sidecar(path: Path, digest: str) -> None:
    if not _matches_sidecar(path, digest):
        raise Refused(f"{path.name}: its bytes do not match its .sha256 file (corrupted?): not packed")


def _matches_sidecar(path: Path, digest: str) -> bool:
    """Whether a checkpoint's sidecar names ``digest``."""
    return layout.read_sidecar(path) == digest


def _records(
    home: Home, experiment_id: str, chosen: list[tuple[int, Path]], digests: dict[str, tuple[str, int]]
) -> bytes:
    """The experiment's records with only the packed checkpoints (a file without a row gets a plain record)."""
    paths = {str(path.relative_to(home.root)) for _, path in chosen}
    with ExchangeRegistry(home.registry, create=False) as registry:
        if registry.experiment(experiment_id) is None:
            raise Refused(f"{experiment_id} is not in the registry: run `octlm doctor --repair` first")
        found = exchange.records(home, registry, [experiment_id], keep=lambda row: row["path"] in paths)
    have = {item["step"] for item in found if item["type"] == "checkpoint"}
    key = next(item["uuid"] for item in found if item["type"] == "experiment")  # the first record
    for number, path in chosen:
        if number not in have:
            digest, size = digests[f"checkpoints/{path.name}"]
            found.append(
                exchange.record("checkpoint", {"experiment_uuid": key, "step": number, "sha256": digest, "size": size})
            )
    return exchange.json_lines(found, home).encode("utf-8")  # in a fixed order: rows, columns


def _write_tar(output: Path, members: dict[str, Source], own_name: bool = False) -> int:
    """The tar, written as ``fsutil.output_writer`` writes an output; its size."""
    with (
        output_writer(output, "the pack", own_name=own_name) as out,
        tarfile.open(fileobj=cast(IO[bytes], out), mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in sorted(members):
            source = members[name]
            info = tarfile.TarInfo(ROOT + name)
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = 0, 0o644, 0, 0, "", ""
            if isinstance(source, bytes):
                info.size = len(source)
                tar.addfile(info, io.BytesIO(source))
                continue
            with open(open_regular(source, max_bytes=None, follow=False), "rb") as file:
                info.size = os.fstat(file.fileno()).st_size
                tar.addfile(info, file)
    return out.written


# ---------------------------------------------------------------- unpack


@overload
def unpack(
    home: Home,
    path: Path,
    as_id: str | None = None,
    *,
    allow_outside_sources: bool = False,
    hint: str = ...,
    check_only: Literal[False] = False,
    same: placing.Same | None = None,
) -> Unpacked: ...


@overload
def unpack(
    home: Home,
    path: Path,
    as_id: str | None = None,
    *,
    allow_outside_sources: bool = False,
    hint: str = ...,
    check_only: Literal[True],
    same: placing.Same | None = None,
) -> Checked: ...


def unpack(
    home: Home,
    path: Path,
    as_id: str | None = None,
    *,
    allow_outside_sources: bool = False,
    hint: str = "unpack it under another ID with --as NEW-ID",
    check_only: bool = False,
    same: placing.Same | None = None,
) -> Checked | Unpacked:
    """Verify the pack at ``path``, then place its files and merge its rows into ``home`` (see the module).
    ``hint``: the way out of an ID taken here; ``check_only``: verify everything (members, checksums, what merging
    would do) and write nothing (``sweep unpack`` checks every trial's pack before it unpacks one); ``same``: whether
    a checkpoint here and the pack's of its step hold the same training state, so that one here with other bytes is
    kept rather than refused (``placing.kept``)."""
    if as_id is not None:
        validate_id(as_id)
    with stopping_at_once("unpack"), tarcheck.open_pack(path) as tar:
        members, manifest, found = _read_pack(tar, path)
        source = next(item for item in found if item["type"] == "experiment")
        home.ensure_writable()
        with ExchangeRegistry(home.registry) as registry:
            chosen = importing.plan(
                home,
                registry,
                found,
                lambda i: as_id or i,
                hint=hint,
                local=True,
                strict=as_id is not None,
                outside=allow_outside_sources,
            )
            target = chosen.targets[source["uuid"]]
            kept = placing.kept(home, (tar, members, manifest, path), home.checkpoint_dir(target), same)
            if check_only:
                tarcheck.verify_members(tar, members, manifest, path)
                return {"experiment": target, "from": source["id"], "uuid": source["uuid"], "checked": True}
            moves, rows = placing.place(home, registry, chosen, target, kept, (tar, members, manifest, path))
    steps = sorted(step for _, place in moves if (step := layout.step_of(place.name)) is not None)
    return {
        "schema_version": exchange.SCHEMA_VERSION,
        "file": str(path),
        "experiment": target,
        "from": source["id"],
        "uuid": source["uuid"],
        "changed": bool(chosen.changed or moves),
        "checkpoints": steps,
        "rows": rows,
    }


def _read_pack(tar: tarfile.TarFile, path: Path) -> tuple[dict[str, tarfile.TarInfo], Manifest, list[ExportRecord]]:
    """The members (checked), the manifest and the records, each checked against the others."""
    members = tarcheck.members(tar, path)
    for name in (MANIFEST, RECORDS):
        if name not in members:
            raise BadInput(f"{path}: not an octlm pack (no {ROOT}{name})")
    manifest = tarcheck.manifest(tarcheck.read_member(tar, members[MANIFEST], path), path)
    if set(manifest["files"]) != set(members) - {MANIFEST}:
        raise Refused(f"{path}: its members and its manifest disagree (truncated or altered): nothing was written")
    tarcheck.check_sizes(members, manifest, path)
    data = tarcheck.read_member(tar, members[RECORDS], path)
    tarcheck.verify(RECORDS, hashlib.sha256(data).hexdigest(), len(data), manifest, path)
    found = reading.parse(data, f"{path}: {RECORDS}")
    experiments: list[ExportedExperiment] = [item for item in found if item["type"] == "experiment"]
    if len(experiments) != 1 or experiments[0]["id"] != manifest["experiment"]:
        raise BadInput(f"{path}: {RECORDS} must hold exactly the one experiment {manifest['experiment']}")
    for item in found:
        if item["type"] != "checkpoint":
            continue
        entry = manifest["files"].get(f"checkpoints/{layout.checkpoint_name(item['step'])}")
        if entry is None or entry["sha256"] != item["sha256"]:
            raise Refused(
                f"{path}: the checkpoint of step {item['step']} is listed without its file or with another "
                "checksum: nothing was written"
            )
    return members, manifest, found
