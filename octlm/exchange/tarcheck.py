"""A pack's tar checked before anything in it is read or copied (``unpack``): its members (regular files with the
names a pack has, never sparse, a link, a device, an absolute or ``..`` name), each member's size against its
manifest entry, the manifest (format, version, the octlm that wrote it: a newer one is refused) and the checksums.
Torch-free.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import open_regular
from octlm.core.home import validate_id
from octlm.core.provenance import __version__
from octlm.exchange.results import Manifest

FORMAT, VERSION = "octlm-pack", 1
ROOT, MANIFEST, RECORDS, TOKENIZER = "octlm-pack/", "manifest.json", "registry.jsonl", "tokenizer.json"
BLOCKS = "blocks.jsonl"  # the evaluations block by block (``store.runs.evalblocks``), where the home had them
MEMBER = re.compile(rf"manifest\.json|registry\.jsonl|tokenizer\.json|blocks\.jsonl|checkpoints/{layout.FILE.pattern}")
RELEASE = re.compile(r"(\d+(?:\.\d+)*)(?:[.+-]?[a-z].*)?\Z")  # a PEP 440 release and whatever follows it
MAX_SMALL = 1 << 30  # the manifest, the records and the tokenizer are read whole


MAX_HEADERS = 1 << 20  # the bytes one member's headers may take; a pack's take one 512-byte block, or a few


class HeaderCap:
    """The pack file as ``tarfile`` reads it, with a budget of ``MAX_HEADERS`` bytes while it reads one member's
    headers (``_PackTar.next``): ``tarfile`` reads a PAX header, a GNU long name or a sparse map whole, by the size its
    block declares, before it could be looked at (a 300 MB PAX header took 952 MB before the pack was refused).
    A read that would pass the budget is refused before it is made."""

    def __init__(self, raw: BinaryIO, path: Path):
        self.raw, self.path, self.name, self.budget = raw, path, str(path), -1  # -1: reading a member's data

    def read(self, size: int = -1) -> bytes:
        if self.budget >= 0:
            if size < 0 or size > self.budget:
                raise Refused(
                    f"{self.path}: a member's tar headers (PAX records, a GNU long name or a sparse map) take more "
                    f"than {MAX_HEADERS:,} bytes ({size:,} more asked for): not an octlm pack's; nothing was read "
                    "further or written"
                )
            self.budget -= size
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.raw.close()


class _PackTar(tarfile.TarFile):
    """A tar whose every header is read within ``MAX_HEADERS`` (the first one too: ``TarFile`` reads it opening)."""

    def next(self) -> tarfile.TarInfo | None:
        cap = cast(HeaderCap, self.fileobj)
        cap.budget = MAX_HEADERS
        try:
            return super().next()
        finally:
            cap.budget = -1

    def close(self) -> None:
        try:
            super().close()
        finally:
            cast(HeaderCap, self.fileobj).close()


def open_pack(path: Path) -> tarfile.TarFile:
    try:
        raw = os.fdopen(open_regular(path, max_bytes=None), "rb")  # a FIFO or a device would block or flood the read
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror or error}") from None
    try:
        return _PackTar.open(fileobj=cast(IO[bytes], HeaderCap(raw, path)), mode="r:")
    except BaseException as error:
        raw.close()
        if isinstance(error, (tarfile.TarError, EOFError)):
            raise BadInput(f"{path}: not an octlm pack (not a tar file: {error})") from None
        if isinstance(error, OSError):
            raise BadInput(f"{path}: cannot be read: {error.strerror or error}") from None
        raise


MAX_MEMBERS = 3 + 2 * 10_000  # the manifest, the records, the tokenizer, and up to 10,000 checkpoints with sidecars


def _each(tar: tarfile.TarFile, path: Path) -> Iterator[tarfile.TarInfo]:
    """The members one header at a time (a pack of junk is refused at its first bad member, never read whole)."""
    for count in itertools.count(1):
        try:
            info = tar.next()
        except (tarfile.TarError, EOFError) as error:
            raise BadInput(f"{path}: truncated or damaged tar ({error})") from None
        if info is None:
            return
        if count > MAX_MEMBERS:
            raise Refused(f"{path}: more than {MAX_MEMBERS:,} members: not an octlm pack's; nothing was written")
        yield info


def members(tar: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """{name under octlm-pack/: member}; refuses any member but the regular files a pack holds."""
    out: dict[str, tarfile.TarInfo] = {}
    for info in _each(tar, path):
        name, shown = info.name, repr(info.name[:200])
        if name.startswith("/") or ".." in name.split("/"):
            raise Refused(f"{path}: member {shown} has an absolute or '..' name: refused, nothing was written")
        if info.sparse is not None:  # its map could expand a few bytes into any size: never read
            raise Refused(
                f"{path}: member {shown} is sparse (its map declares {info.size} bytes): a pack holds plain regular "
                "files only; nothing was written"
            )
        if not info.isreg():
            raise Refused(
                f"{path}: member {shown} is {_kind(info)}: a pack holds regular files only; nothing was written"
            )
        short = name[len(ROOT) :] if name.startswith(ROOT) else ""
        if not MEMBER.fullmatch(short) or short in out:
            raise Refused(f"{path}: unexpected member {shown}: not an octlm pack's; nothing was written")
        out[short] = info
    return out


def check_sizes(members: dict[str, tarfile.TarInfo], manifest: Manifest, path: Path) -> None:
    """Every member as large as its manifest entry says, before anything is read or copied."""
    for name, info in sorted(members.items()):
        entry = manifest["files"].get(name)
        declared = info.size if name == MANIFEST else entry["size"] if entry else None
        if info.size != declared:
            raise Refused(
                f"{path}: member {ROOT}{name} holds {info.size} bytes but its manifest entry's size is {declared} "
                "(altered): nothing was written"
            )


def _kind(info: tarfile.TarInfo) -> str:
    kinds = (
        (info.issym(), "a symbolic link"),
        (info.islnk(), "a hard link"),
        (info.isdir(), "a folder"),
        (info.isdev(), "a device or FIFO"),
    )
    return next((name for test, name in kinds if test), "not a regular file")


def read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path) -> bytes:
    if info.size > MAX_SMALL:
        raise Refused(f"{path}: {info.name} is {info.size} bytes, more than a pack's {info.name} holds")
    try:
        handle = tar.extractfile(info)
        data = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError) as error:
        raise BadInput(f"{path}: truncated or damaged tar ({error})") from None
    if len(data) != info.size:
        raise BadInput(f"{path}: truncated tar ({info.name} is cut short)")
    return data


def manifest(data: bytes, path: Path) -> Manifest:
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        raise BadInput(f"{path}: not an octlm pack (its manifest is not JSON)") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("version"), int)
    ):
        raise BadInput(f"{path}: not an octlm pack (no {FORMAT} manifest)")
    if manifest["version"] > VERSION:
        raise Refused(
            f"{path}: pack format version {manifest['version']} is newer than this octlm's ({VERSION}): "
            "upgrade octlm to unpack it; nothing was written"
        )
    _check_octlm(manifest.get("octlm"), path)
    files = manifest.get("files")
    valid = isinstance(files, dict) and all(
        isinstance(e, dict) and isinstance(e.get("sha256"), str) and isinstance(e.get("size"), int)
        for e in files.values()
    )
    if not valid or not isinstance(manifest.get("experiment"), str):
        raise BadInput(f"{path}: not an octlm pack (a manifest without its experiment and files)")
    validate_id(manifest["experiment"])
    return cast(Manifest, manifest)  # its keys and their types checked above


def _check_octlm(packed_by: Any, path: Path) -> None:
    """A pack names the octlm that wrote it (``octlm`` in the manifest); one newer than this octlm is refused."""
    release = _release(packed_by)
    if release is None:
        raise BadInput(
            f"{path}: not an octlm pack (its manifest's octlm version {str(packed_by)[:40]!r} is no version)"
        )
    if release > (_release(__version__) or ()):
        raise Refused(
            f"{path}: packed by octlm {packed_by}, newer than this octlm ({__version__}): upgrade octlm to unpack it; "
            "nothing was written"
        )


def _release(text: Any) -> tuple[int, ...] | None:
    """(1, 2, 3) of "1.2.3" (anything after the numbers, "1.2.3.dev4" or "1.2.3+local", is ignored)."""
    match = RELEASE.match(text) if isinstance(text, str) else None
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def verify(name: str, digest: str, size: int, manifest: Manifest, path: Path) -> None:
    entry = manifest["files"][name]
    if (digest, size) != (entry["sha256"], entry["size"]):
        raise Refused(f"{path}: {name} does not match its checksum (corrupted?): nothing was registered")


def verify_members(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], manifest: Manifest, path: Path) -> None:
    """Every file member's checksum against the manifest, read and hashed, never written anywhere."""
    for name, info in sorted(members.items()):
        if name in (MANIFEST, RECORDS):
            continue
        digest, size, declared = hashlib.sha256(), 0, manifest["files"][name]["size"]
        try:
            source = tar.extractfile(info)
            while source is not None and (chunk := source.read(min(1 << 20, declared - size + 1))):
                size += len(chunk)
                if size > declared:
                    raise Refused(f"{path}: {info.name} holds more than its manifest's {declared} bytes: altered")
                digest.update(chunk)
        except (tarfile.TarError, EOFError) as error:
            raise BadInput(f"{path}: truncated or damaged tar ({error})") from None
        verify(name, digest.hexdigest(), size, manifest, path)
