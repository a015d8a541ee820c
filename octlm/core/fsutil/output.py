"""A file the user named (torch-free): every output file (``-o FILE`` of ``report``, ``pack``, ``registry export``,
and the files ``sweep pack`` names in its folder) is written by ``output_writer``.

The target is looked at with ``lstat`` first: nothing there or a regular file is replaced atomically (``atomic``).
A file the user named may also be a character device or a FIFO, or a link to one (``/dev/stdout``, ``/dev/null``),
written in place, as the user means (a FIFO without a reader is refused at once rather than waited on). A link to a
regular file is refused (anyone who can write the folder could have planted it to have octlm overwrite its target),
but for the links the system makes for a process's own files (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
``/proc/self/fd/N``: ``-o /dev/stdout`` with stdout redirected to a file). No link is followed that another user
could have planted: one in a folder that others can write (group- or world-writable, the sticky ``/tmp`` and
``/dev/shm`` included) or that belongs to someone else, or a link owned by another user, is refused whatever it
points to (a link to ``/dev/null`` in the user's own folder is written through). A file octlm names itself
(``own_name``: a trial's pack in ``sweep pack``'s folder) is written only as a regular file: any link, device or FIFO
there is refused. A folder, a socket, a block device or a link to nothing is always refused. Every refusal and every
failed write is ``Refused``: one line naming the path, what it is and why; nothing is written then.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from octlm.core.errors import Refused
from octlm.core.fsutil.atomic import create_temporary
from octlm.core.fsutil.regular import kind_of


class Output:
    """What ``output_writer`` yields: ``write`` (every byte, or ``Refused``), ``tell`` and ``written`` (the bytes
    written so far: a FIFO cannot tell), ``flush``."""

    def __init__(self, path: Path, what: str, kind: str, write: Callable[[bytes], object] | None = None):
        self.path, self.what, self.kind, self.written = path, what, kind, 0
        self._write = write

    def bind(self, write: Callable[[bytes], object]) -> None:
        self._write = write

    def write(self, data: bytes) -> int:
        assert self._write is not None, "bound by output_writer"
        try:
            self._write(data)
        except OSError as error:
            raise self.failed(error) from None
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        """Every write is handed on at once (in place) or at the end (a temporary file)."""

    def failed(self, error: OSError) -> Refused:
        left = "what was written is incomplete" if self.kind != "a regular file" else "nothing was written"
        reason = error.strerror or str(error)
        return Refused(f"cannot write {self.what} to {self.path} ({self.kind}): {reason}; {left}")


@contextmanager
def output_writer(path: Path, what: str, *, own_name: bool = False) -> Iterator[Output]:
    """``what`` ("the report") written to ``path``: atomically over a regular file or nothing; in place to a character
    device or a FIFO (or a link to one) the user named; Refused for anything else (and, with ``own_name``, for
    anything but a regular file or nothing), and for a write that fails (see the module). An error of the caller's
    own between the writes passes through as it is."""
    target, kind = _output_target(path, own_name)
    if kind != "a regular file":
        fd = _open_in_place(path, kind, what)
        try:
            yield Output(path, what, kind, lambda data: _write_all(fd, data))
        finally:
            os.close(fd)
        return
    out = Output(path, what, kind)
    try:
        fd, temporary = create_temporary(target.parent, target.name)
    except OSError as error:
        raise out.failed(error) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            out.bind(handle.write)
            yield out
            try:
                handle.flush()
                os.fsync(handle.fileno())
                os.replace(temporary, target)
            except OSError as error:
                raise out.failed(error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_output(path: Path, payload: bytes, what: str, *, own_name: bool = False) -> int:
    """``payload`` written as ``output_writer`` writes; the bytes written."""
    with output_writer(path, what, own_name=own_name) as out:
        out.write(payload)
    return out.written


def check_output(path: Path, *, own_name: bool = False) -> None:
    """Refused now when ``output_writer`` would refuse ``path`` (a caller writing many files checks them all first)."""
    _output_target(path, own_name)


# The links the system makes for a process's own files; the rest of /dev and /proc is not exempt (/dev/shm is
# world-writable: anyone can plant a link there).
KERNEL_LINKS = re.compile(r"/dev/(stdout|stderr|fd/[0-9]+)|/proc/self/fd/[0-9]+")


def _refuse_planted(path: Path, link: os.stat_result) -> None:
    """Refused: a link another user could have planted at ``path``: its folder can be written by others (group- or
    world-writable, sticky or not) or is someone else's, or the link itself is (only the user and root count)."""
    folder = Path(os.path.abspath(path)).parent
    try:
        where = os.stat(folder)
    except OSError as error:
        raise Refused(f"cannot write to {path}: {folder}: {error.strerror or error}; nothing was written") from None
    ours = (0, os.geteuid())
    if where.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"its folder {folder} can be written by others (mode {stat.filemode(where.st_mode)})"
    elif where.st_uid not in ours:
        why = f"its folder {folder} belongs to another user (uid {where.st_uid})"
    elif link.st_uid not in ours:
        why = f"the link belongs to another user (uid {link.st_uid})"
    else:
        return
    raise Refused(
        f"{path} is a symbolic link to {os.readlink(path)} and {why}: anyone there could have planted it, so octlm "
        "does not write through it; give a path in a folder of your own; nothing was written"
    )


def _output_target(path: Path, own_name: bool = False) -> tuple[Path, str]:
    """Where to write and what it is: (a path to replace atomically, "a regular file"), or (``path``, "a character
    device" / "a FIFO", possibly through a link); Refused for anything else (see the module)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path, "a regular file"
    except OSError as error:
        raise Refused(f"cannot write to {path}: {error.strerror or error}") from None
    if stat.S_ISREG(info.st_mode):
        return path, "a regular file"
    linked = stat.S_ISLNK(info.st_mode)
    if linked and own_name:
        raise Refused(
            f"{path} is a symbolic link to {os.readlink(path)}: octlm writes the files it names only as files of "
            "their own, never through a link; remove it; nothing was written"
        )
    if linked:
        _refuse_planted(path, info)
        try:
            info = os.stat(path)
        except OSError:
            raise Refused(f"{path} is a symbolic link to nothing ({os.readlink(path)}): nothing was written") from None
    if stat.S_ISREG(info.st_mode):
        resolved = Path(os.path.realpath(path))
        if not KERNEL_LINKS.fullmatch(os.path.abspath(path)):
            raise Refused(
                f"{path} is a symbolic link to the file {resolved}: octlm does not write through a link (anyone who "
                f"can write its folder could have planted it); give the file itself; nothing was written"
            )
        return resolved, "a regular file"  # -o /dev/stdout redirected to a file: that file is replaced
    kind = kind_of(info.st_mode)
    if own_name:
        raise Refused(
            f"{path} is {kind}: octlm writes the files it names only as regular files; remove it; nothing was written"
        )
    if stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode):
        return path, kind
    shown = f"a symbolic link to {kind}" if linked else kind
    hint = "give a file name in it" if stat.S_ISDIR(info.st_mode) else "give a file, a character device or a FIFO"
    raise Refused(f"{path} is {shown}: {hint}; nothing was written")


def _open_in_place(path: Path, kind: str, what: str) -> int:
    """An fd writing to the device or FIFO at ``path`` (a reader must be there already), blocking once open."""
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ENXIO and kind == "a FIFO":
            raise Refused(f"{path} is a FIFO with no reader: start its reader first; nothing was written") from None
        raise Refused(f"cannot write {what} to {path} ({kind}): {error.strerror or error}") from None
    info = os.fstat(fd)
    if not (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        os.close(fd)  # replaced since it was looked at: never written in place
        raise Refused(f"{path} changed while it was opened (now {kind_of(info.st_mode)}); nothing was written")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
