"""``octlm pack`` / ``unpack``: one experiment as one tar file, to move it to another home. Torch-free.

A pack holds, under ``octlm-pack/``: ``manifest.json`` (format, version, the experiment, the sha256 and size of
every other member), ``registry.jsonl`` (the experiment's records, as ``registry export`` writes them, with its
YAML and run files; only the packed checkpoints), ``tokenizer.json``, ``blocks.jsonl`` (its evaluations block by
block, where it has them), and ``checkpoints/step-NNNNNN.pt`` with their ``.sha256`` files. Members are sorted,
with fixed times, owners and modes, so the same state packs to the same bytes. ``unpack`` reads nothing but such
regular files (any other name, a link or a device is refused), verifies every checksum in a staging folder inside
the home before anything is registered, then places the files and merges the rows (``importing``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal, cast, overload

from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import create_exclusive, file_sha256, open_regular, output_writer
from octlm.core.home import Home, validate_id
from octlm.core.liveness import start_time
from octlm.core.provenance import __version__
from octlm.core.signals import stopping_at_once
from octlm.exchange import importing, reading, tarcheck
from octlm.exchange import records as exchange
from octlm.exchange.records import ExportedExperiment, Record
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
Same = Callable[[Path, Path], bool]  # (a checkpoint here, the pack's of its step, staged): the same training state?


# ---------------------------------------------------------------- pack


def pack(
    home: Home,
    experiment_id: str,
    output: Path,
    *,
    step: int | None = None,
    every: bool = False,
    own_name: bool = False,
) -> Packed:
    """Write the pack of ``experiment_id`` to ``output`` (atomically), under the experiment's lock; ``own_name``: a
    name octlm chose (``sweep pack``), written only as a regular file (``fsutil.output_writer``)."""
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: there is no folder {output.parent}")
    if not home.config_path(experiment_id).is_file():
        raise BadInput(f"unknown experiment {experiment_id}: {home.config_path(experiment_id)} does not exist")
    folder = home.checkpoint_dir(experiment_id)
    with held_for_reading(home.lock_path(experiment_id), experiment_id):  # no run trains it while it is read
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
    return "".join(json.dumps(item) + "\n" for item in found).encode("utf-8")  # in a fixed order: rows, columns


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
    same: Same | None = None,
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
    same: Same | None = None,
) -> Checked: ...


def unpack(
    home: Home,
    path: Path,
    as_id: str | None = None,
    *,
    allow_outside_sources: bool = False,
    hint: str = "unpack it under another ID with --as NEW-ID",
    check_only: bool = False,
    same: Same | None = None,
) -> Checked | Unpacked:
    """Verify the pack at ``path``, then place its files and merge its rows into ``home`` (see the module).
    ``hint``: the way out of an ID taken here; ``check_only``: verify everything (members, checksums, what merging
    would do) and write nothing (``sweep unpack`` checks every trial's pack before it unpacks one); ``same``: whether
    a checkpoint here and the pack's of its step hold the same training state, so that one here with other bytes is
    kept rather than refused (``_kept``)."""
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
            kept = _kept(home, (tar, members, manifest, path), home.checkpoint_dir(target), same)
            if check_only:
                tarcheck.verify_members(tar, members, manifest, path)
                return {"experiment": target, "from": source["id"], "uuid": source["uuid"], "checked": True}
            moves, rows = _place_all(home, registry, chosen, target, kept, (tar, members, manifest, path))
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


Opened = tuple[tarfile.TarFile, dict[str, tarfile.TarInfo], Manifest, Path]  # the pack, its members and manifest


def _place_all(
    home: Home, registry: ExchangeRegistry, chosen: importing.Plan, target: str, kept: set[str], pack: Opened
) -> tuple[list[tuple[Path, Path]], dict[str, int]]:
    """Every file of the pack staged and verified in a folder inside the home, then placed (but those ``kept`` here,
    whose rows stay as they are too) and the rows merged; (what moved where, {table: rows written})."""
    tar, members, manifest, path = pack
    chosen.merge.checkpoints = [
        row
        for row in chosen.merge.checkpoints
        if row["experiment_id"] != target or layout.checkpoint_name(row["step"]) not in kept
    ]
    staging = _staging(home)  # doctor tells a live one by its name
    try:
        staged = _extract(tar, members, manifest, staging, path)
        blocks = [p for p in staged if p.name == tarcheck.BLOCKS]
        moves = _moves(home.checkpoint_dir(target), [p for p in staged if p not in blocks and p.name not in kept])
        moves += _blocks_move(home, target, blocks)
        if not (chosen.changed or moves):
            return moves, {}
        return moves, importing.apply(home, registry, chosen, before=lambda placed: _place(moves, placed))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _staging(home: Home) -> Path:
    """A staging folder at the home's root, named for this process (``layout.staging_prefix``)."""
    prefix = layout.staging_prefix(os.getpid(), start_time(os.getpid()))
    return Path(tempfile.mkdtemp(prefix=prefix, dir=home.root))


def _kept(home: Home, pack: Opened, folder: Path, same: Same | None) -> set[str]:
    """The names of the checkpoint files here, at a step the pack holds too but with other bytes, that ``same`` says
    hold the training state of the pack's (a trial shipped to another home and trained here too, exactly as there):
    kept as they are, with their sidecars and rows. One that does not is refused here, before anything is written
    (the pack's checkpoint is compared from a staging folder, removed at once). Without ``same``, nothing (``_moves``
    refuses any file here with other bytes)."""
    if same is None:
        return set()
    tar, members, manifest, path = pack
    places = {n: folder / Path(n).name for n in manifest["files"] if layout.step_of(Path(n).name) is not None}
    clashes = [n for n, here in sorted(places.items()) if here.is_file() and not _same_bytes(here, manifest, n)]
    if not clashes:
        return set()
    kept, staging = set[str](), _staging(home)
    try:
        for name in clashes:
            here, sidecar = places[name], str(layout.sidecar(Path(name)))
            _extract(tar, {k: members[k] for k in (name, sidecar) if k in members}, manifest, staging, path)
            if not same(here, staging / here.name):
                raise Refused(f"{here} is here with another training state than the pack's: nothing was changed")
            kept |= {here.name, Path(sidecar).name}
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return kept


def _same_bytes(here: Path, manifest: Manifest, name: str) -> bool:
    return file_sha256(here)[0] == manifest["files"][name]["sha256"]


def _read_pack(tar: tarfile.TarFile, path: Path) -> tuple[dict[str, tarfile.TarInfo], Manifest, list[Record]]:
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


def _extract(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], manifest: Manifest, staging: Path, path: Path
) -> list[Path]:
    """The tokenizer and checkpoint files, copied into ``staging`` and each verified against the manifest, and each
    checkpoint against its ``.sha256`` file."""
    staged, digests = [], {}
    for name, info in sorted(members.items()):
        if name in (MANIFEST, RECORDS):
            continue
        target = staging / Path(name).name
        digest, size = _copy(tar, info, target, path, manifest["files"][name]["size"])
        tarcheck.verify(name, digest, size, manifest, path)
        staged.append(target)
        digests[target.name] = digest
    for target in staged:
        if target.suffix == ".pt" and not _matches_sidecar(target, digests[target.name]):
            raise Refused(f"{path}: {target.name} does not match its .sha256 file: nothing was registered")
    return staged


def _copy(tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path, path: Path, declared: int) -> tuple[str, int]:
    """The member copied to ``target``, never more than ``declared`` bytes (its manifest's size); (sha256, size)."""
    digest, size = hashlib.sha256(), 0
    try:
        source: IO[bytes] | None = tar.extractfile(info)
        with os.fdopen(create_exclusive(target), "wb") as out:
            while source is not None and (chunk := source.read(min(1 << 20, declared - size + 1))):
                size += len(chunk)
                if size > declared:
                    raise Refused(f"{path}: {info.name} holds more than its manifest's {declared} bytes: altered")
                digest.update(chunk)
                out.write(chunk)
    except (tarfile.TarError, EOFError) as error:
        raise BadInput(f"{path}: truncated or damaged tar ({error})") from None
    return digest.hexdigest(), size


def _moves(folder: Path, staged: list[Path]) -> list[tuple[Path, Path]]:
    """(staged file, its place) of each file not here yet, ``.sha256`` files before their checkpoints; Refused
    when a file is here with other bytes."""
    moves = []
    for source in sorted(staged, key=lambda p: (p.stem, p.suffix == ".pt")):
        place = folder / source.name
        if not place.exists():
            moves.append((source, place))
        elif _digest(place)[0] != _digest(source)[0]:
            raise Refused(f"{place} is here with other bytes than the pack's: nothing was changed")
    return moves


def _blocks_move(home: Home, target: str, staged: list[Path]) -> list[tuple[Path, Path]]:
    """The pack's evaluations block by block, to ``runs/<target>-blocks.jsonl`` unless this home has that file
    already (its own evaluations, perhaps past the pack's: kept as they are)."""
    place = evalblocks.path_for(home.run_file(target))
    return [(source, place) for source in staged if not place.exists()]


def _place(moves: list[tuple[Path, Path]], placed: list[Path]) -> None:
    for source, place in moves:
        place.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, place)  # never over a file that appeared meanwhile
        placed.append(place)
