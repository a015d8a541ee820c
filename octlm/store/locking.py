"""One writer per experiment: an advisory ``flock`` on ``locks/<ID>.lock`` at the home root.

The lock lives outside ``checkpoints/<ID>`` so deleting that folder mid-run cannot let a second
writer in. It is opened without following a link and without truncating anything before the
lock is held (``O_NOFOLLOW|O_CREAT``; only a regular file of this user with one link), and once ``flock``
succeeds the path must still name the locked inode (else the file was replaced: retry, then
refuse). The kernel drops the lock when its holder dies, so a lock left by a dead process never
blocks; the file's text (pid and host) only serves the refusal message. The holder re-checks that the path still
names its inode (``check``: a run does at each evaluation and checkpoint): after ``rm -rf locks`` a second writer
could lock a new file, so the holder stops instead.

A command that only reads an experiment's files (``pack``) takes the same lock through ``held_for_reading``; where
this user cannot write the lock file (another user's home, a read-only medium) it takes a shared lock on the lock
file opened read-only instead, which keeps a run from starting there while it reads and refuses while one trains
(without a lock file, no run has ever held it: nothing to take, and this user cannot make one).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from octlm.core.errors import BeingTrained, Refused

ATTEMPTS = 5


class Unwritable(Refused):
    """The lock file cannot be opened for writing here: the home (or its ``locks``) is read-only to this user."""


_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class ExperimentLock:
    def __init__(self, path: Path, experiment_id: str):
        self.path = path  # the lock file itself: ``Home.lock_path(ID)``
        self.experiment_id = experiment_id
        self.fd: int | None = None

    def __enter__(self) -> ExperimentLock:
        for _ in range(ATTEMPTS):
            fd = self._open()
            if self._lock(fd):
                self.fd = fd
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
                return self
        raise Refused(f"{self.path} keeps being replaced while {self.experiment_id} is locked: is another tool in it?")

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, _FLAGS, 0o666)
        except OSError as error:
            reason = "it is a symbolic link" if error.errno == errno.ELOOP else error.strerror
            unwritable = error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
            raise (Unwritable if unwritable else Refused)(f"cannot open the lock file {self.path}: {reason}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
            os.close(fd)
            raise Refused(f"{self.path} is not octlm's lock file (a regular file of yours with one link): remove it")
        return fd

    def _lock(self, fd: int) -> bool:
        """True when ``fd`` is locked and still the file at the path; False to retry; refuses when held."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _printable(os.pread(fd, 200, 0).decode("utf-8", "replace")) or "unknown"
            os.close(fd)
            raise BeingTrained(
                f"{self.experiment_id} is already being trained by {holder}: "
                "wait for it to finish or stop it (SIGTERM checkpoints and exits)"
            ) from None
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return True
        os.close(fd)  # replaced or removed between open and flock: the lock guards nothing
        return False

    def check(self) -> None:
        """Refused when the lock file was removed or replaced since it was taken: another writer could then lock a
        file of its own at the path, so the holder must stop writing."""
        if self.fd is None:
            return
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        held = os.fstat(self.fd)
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise Refused(
                f"the lock file {self.path} was {'removed' if now is None else 'replaced'} while {self.experiment_id} "
                "was being trained, so another writer could get in: the run stops here, its checkpoints so far "
                f"intact; `octlm resume {self.experiment_id}` once no other process trains it"
            )

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _printable(text: str) -> str:
    return "".join(c for c in text if c.isprintable()).strip()


@contextmanager
def held_for_reading(path: Path, experiment_id: str) -> Iterator[None]:
    """The experiment held still while its files are only read: its lock as a writer takes it, or, where this user
    cannot write the lock file, a shared lock on it (see the module)."""
    writer = ExperimentLock(path, experiment_id)
    try:
        writer.__enter__()
    except Unwritable:
        with _shared(path, experiment_id):
            yield
        return
    try:
        yield
    finally:
        writer.__exit__()


@contextmanager
def _shared(path: Path, experiment_id: str) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        yield  # no run has held it here, and none of this user's can: there is no lock to take
        return
    except OSError as error:
        raise Refused(
            f"cannot open the lock file {path} to see whether {experiment_id} is being trained: "
            f"{'it is a symbolic link' if error.errno == errno.ELOOP else error.strerror}; nothing was written"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{path} is not octlm's lock file (a regular file): nothing was written")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _printable(os.pread(fd, 200, 0).decode("utf-8", "replace")) or "unknown"
            raise BeingTrained(f"{experiment_id} is being trained by {holder}: wait for it to finish") from None
        yield
    finally:
        os.close(fd)
