"""Opening only regular files (torch-free): ``open_regular`` / ``read_regular`` refuse anything that is not a
regular file (devices, FIFOs, sockets) before opening it in a way that could block, refuse files over a size cap,
and, for octlm's own files (``follow=False``), refuse a final path component that is a symbolic link (a linked folder
above it is fine); ``open_append`` appends to a regular file only, never through a link. The refusals are
``UnsafeFile`` (an ``OSError`` whose ``strerror`` says why), which each caller turns into its own one-line error.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


class UnsafeFile(OSError):
    """A path octlm will not read or write: not a regular file, a link, or over a size cap."""

    def __init__(self, path: Path, reason: str, *, too_large: bool = False):
        super().__init__(errno.EINVAL, reason, str(path))
        self.too_large = too_large


def open_append(path: Path) -> int:
    """An fd appending to ``path`` (created if missing), never through a link, only to a regular file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        raise _explained(path, error) from None
    try:
        _require_regular(path, os.fstat(fd), None)
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _require_regular(path: Path, info: os.stat_result, max_bytes: int | None) -> os.stat_result:
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFile(path, f"not a regular file ({kind_of(info.st_mode)})")
    if max_bytes is not None and info.st_size > max_bytes:
        raise UnsafeFile(path, f"{info.st_size} bytes, larger than the cap of {max_bytes} bytes", too_large=True)
    return info


def _explained(path: Path, error: OSError) -> OSError:
    if error.errno == errno.ELOOP:
        return UnsafeFile(path, "a symbolic link (octlm does not follow links to its own files)")
    return error


def check_regular(path: Path, *, max_bytes: int | None = None, follow: bool = True) -> os.stat_result:
    """``path``'s status if it is a regular file within ``max_bytes``; never opens it."""
    info = os.stat(path, follow_symlinks=follow)
    return _require_regular(path, info, max_bytes)


def open_regular(path: Path, *, max_bytes: int | None, follow: bool = True) -> int:
    """A read-only fd of ``path``, checked to be a regular file within ``max_bytes`` before and
    after opening (opened non-blocking, so a FIFO swapped in between cannot hang the open)."""
    check_regular(path, max_bytes=max_bytes, follow=follow)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise _explained(path, error) from None
    try:
        _require_regular(path, os.fstat(fd), max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, *, max_bytes: int, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, never more than ``max_bytes`` (a file that grows
    past the cap while being read is refused too)."""
    fd = open_regular(path, max_bytes=max_bytes, follow=follow)
    try:
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 24, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UnsafeFile(path, f"larger than the cap of {max_bytes} bytes", too_large=True)
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_sha256(path: Path, *, follow: bool = False) -> tuple[str, int]:
    """(sha256, size) of the regular file ``path``, read in one pass (never through a final link unless
    ``follow``)."""
    with open(open_regular(path, max_bytes=None, follow=follow), "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        return digest, os.fstat(handle.fileno()).st_size
