"""The standard streams of a command that trains, when nobody reads them any more: a pipe whose reader left
(``octlm train ID 2>&1 | head``), a terminal that hung up. Such a stream is pointed at /dev/null, so that later
writes by anyone (and Python's flush at exit) succeed instead of failing the command: output never stops training,
and a run that is recorded is never turned into a failure by its last line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
from collections.abc import Iterator

VANISHED = (errno.EPIPE, errno.EIO)  # the reader left; the terminal hung up


def _gone(fd: int) -> bool:
    """Nobody can read ``fd`` any more: a pipe without a reader (POLLERR), a hung-up terminal (POLLHUP)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(0)
    except OSError:
        return True
    return any(mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, mask in events)


def to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def release_vanished(fds: tuple[int, ...] = (1, 2)) -> bool:
    """Point each standard stream that nobody reads any more at /dev/null; True when one was."""
    gone = [fd for fd in fds if _gone(fd)]
    for fd in gone:
        to_devnull(fd)
    return bool(gone)


@contextlib.contextmanager
def hangup_safe() -> Iterator[None]:
    """Around a command that trains: however it ends, a vanished stream goes to /dev/null first, so the
    closing line (a summary, an error, "stopped by SIGTERM") cannot turn into a failure of its own."""
    try:
        yield
    finally:
        release_vanished()


@contextlib.contextmanager
def output_may_vanish() -> Iterator[None]:
    """For what a command prints once its work is done and recorded: if the reader left or the terminal
    hung up, the output is dropped and the command still succeeds."""
    try:
        yield
    except (OSError, SystemExit) as error:  # SystemExit: rich's answer to a broken pipe
        if isinstance(error, OSError) and error.errno not in VANISHED:
            raise
        if not release_vanished():
            to_devnull(1)
            to_devnull(2)
