"""A pack's files placed in a home (torch-free), for ``unpack`` (``packing``): every file is copied into a staging
folder inside the home (named for this process, so ``doctor`` tells a live one from a stale one), never more bytes
than its manifest says, and verified against the manifest and, for a checkpoint, its ``.sha256`` file; then each
file not here yet is linked into place (never over a file that appeared meanwhile) as ``importing.apply`` writes the
rows under the experiment's lock, and taken back if they fail. A checkpoint here with other bytes is refused, unless
the caller's ``same`` says it holds the pack's training state (a trial trained here too, exactly as there): kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import create_exclusive, file_sha256
from octlm.core.home import Home
from octlm.core.liveness import start_time
from octlm.exchange import importing, tarcheck
from octlm.exchange.results import Manifest
from octlm.store.merge import ExchangeRegistry
from octlm.store.runs import evalblocks

Same = Callable[[Path, Path], bool]  # (a checkpoint here, the pack's of its step, staged): the same training state?
Opened = tuple[tarfile.TarFile, dict[str, tarfile.TarInfo], Manifest, Path]  # the pack, its members and manifest


def place(
    home: Home, registry: ExchangeRegistry, chosen: importing.ImportPlan, target: str, kept: set[str], pack: Opened
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
        return moves, importing.apply(home, registry, chosen, before=lambda placed: _link(moves, placed))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _staging(home: Home) -> Path:
    """A staging folder at the home's root, named for this process (``layout.staging_prefix``)."""
    prefix = layout.staging_prefix(os.getpid(), start_time(os.getpid()))
    return Path(tempfile.mkdtemp(prefix=prefix, dir=home.root))


def kept(home: Home, pack: Opened, folder: Path, same: Same | None) -> set[str]:
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


def _extract(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], manifest: Manifest, staging: Path, path: Path
) -> list[Path]:
    """The tokenizer and checkpoint files, copied into ``staging`` and each verified against the manifest, and each
    checkpoint against its ``.sha256`` file."""
    staged, digests = [], {}
    for name, info in sorted(members.items()):
        if name in (tarcheck.MANIFEST, tarcheck.RECORDS):
            continue
        target = staging / Path(name).name
        digest, size = _copy(tar, info, target, path, manifest["files"][name]["size"])
        tarcheck.verify(name, digest, size, manifest, path)
        staged.append(target)
        digests[target.name] = digest
    for target in staged:
        if target.suffix == ".pt" and layout.read_sidecar(target) != digests[target.name]:
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
        elif file_sha256(place)[0] != file_sha256(source)[0]:
            raise Refused(f"{place} is here with other bytes than the pack's: nothing was changed")
    return moves


def _blocks_move(home: Home, target: str, staged: list[Path]) -> list[tuple[Path, Path]]:
    """The pack's evaluations block by block, to ``runs/<target>-blocks.jsonl`` unless this home has that file
    already (its own evaluations, perhaps past the pack's: kept as they are)."""
    place = evalblocks.path_for(home.run_file(target))
    return [(source, place) for source in staged if not place.exists()]


def _link(moves: list[tuple[Path, Path]], placed: list[Path]) -> None:
    for source, place in moves:
        place.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, place)  # never over a file that appeared meanwhile
        placed.append(place)
