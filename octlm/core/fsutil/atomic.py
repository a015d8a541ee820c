"""Writing octlm's own files whole (torch-free): every file octlm creates is created exclusively
(``O_CREAT|O_EXCL|O_NOFOLLOW``) under a random temporary name in its target folder, written, flushed, fsynced and
renamed over the target, so a link planted at any name can never redirect a write, and the new file's mode follows
the umask (``0o666 & ~umask``). A file written here is either wholly the new content or wholly the old one.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

TEMPORARY_SUFFIX = ".tmp"


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(path: Path, mode: int = 0o666) -> int:
    """A new file at ``path`` (never an existing one, never through a link); its fd, for writing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, mode)


def create_temporary(folder: Path, name: str) -> tuple[int, Path]:
    """A new, exclusively created ``.{name}.{random}.tmp`` in ``folder``: (fd, path)."""
    for _ in range(100):
        candidate = folder / f".{name}.{secrets.token_hex(8)}{TEMPORARY_SUFFIX}"
        try:
            return create_exclusive(candidate), candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))


@contextmanager
def atomic_writer(path: Path, *, sync_dir: bool = False) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` atomically when the block ends without error."""
    fd, temporary = create_temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def atomic_write(path: Path, payload: bytes, *, sync_dir: bool = False) -> None:
    with atomic_writer(path, sync_dir=sync_dir) as handle:
        handle.write(payload)
