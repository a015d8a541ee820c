"""The training reporter: a rich progress bar on an interactive stderr, plain lines otherwise.

Output must never stop training: when stderr stops taking writes (a pipe whose reader left, as in
``octlm train ID 2>&1 | head``, or a terminal that hung up), the reporter falls silent, and the
standard streams nobody reads any more are pointed at /dev/null, so that later writes by anyone
(and Python's flush at exit) succeed instead of failing the command.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from . import render

REFRESH_S = 0.1  # the bar is redrawn by the training thread at most this often (no refresh thread)
VANISHED = (errno.EPIPE, errno.EIO)  # the reader left; the terminal hung up


class _Console(render.PlainConsole):
    """The reporter's console: plain text only, and a closed pipe is an error to handle (rich's default
    answer is to exit the process, and to point stdout at /dev/null even when stderr broke)."""


def _gone(fd: int) -> bool:
    """Nobody can read ``fd`` any more: a pipe without a reader (POLLERR), a hung-up terminal (POLLHUP)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(0)
    except OSError:
        return True
    return any(mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, mask in events)


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def release_vanished(fds: tuple[int, ...] = (1, 2)) -> bool:
    """Point each standard stream that nobody reads any more at /dev/null; True when one was."""
    gone = [fd for fd in fds if _gone(fd)]
    for fd in gone:
        _to_devnull(fd)
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
            _to_devnull(1)
            _to_devnull(2)


class ConsoleReporter:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.silent = False  # stderr stopped taking writes: nothing more is printed
        self.console = _Console(stderr=True, highlight=False)
        self.interactive = self.console.is_terminal and not quiet
        self.progress: Progress | None = None
        self.task = TaskID(0)
        self.refreshed = 0.0

    def _safely(self, write: Callable[[], None]) -> None:
        if self.silent:
            return
        try:
            write()
        except OSError:
            self._fall_silent()

    def _fall_silent(self) -> None:
        self.silent = True
        self.console.quiet = True  # rich drops what it would still write (stopping the bar writes)
        if self.progress is not None:
            with contextlib.suppress(OSError):
                self.progress.stop()  # gives back sys.stdout and sys.stderr
            self.progress = None
        _to_devnull(2)  # the reporter writes only to stderr, so stderr is what failed
        release_vanished((1,))

    def _print(self, message: str, style: str | None = None) -> None:
        console = self.progress.console if self.progress else self.console
        console.print(message, markup=False, highlight=False, soft_wrap=True, style=style)

    def start(self, info: dict[str, Any]) -> None:
        self.note(
            f"{info['kind']} {info['id']}: steps {info['start']} -> {info['until']}, "
            f"{info['parameters']:,} parameters, {info['device']}, {info['precision']}"
        )
        if self.interactive:
            self._safely(lambda: self._start_bar(info))

    def _start_bar(self, info: dict[str, Any]) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[id]}"),  # an ID: letters, digits and dashes
            BarColumn(bar_width=12),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[metrics]}", markup=False),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            auto_refresh=False,  # every write happens here, in the training thread, where a failure is caught
        )
        self.task = self.progress.add_task(
            "train", total=info["until"], completed=info["start"], id=info["id"], metrics=""
        )
        self.progress.start()

    def step(self, step: int) -> None:
        if self.progress is not None:
            self._safely(lambda: self._advance(step))

    def _advance(self, step: int, force: bool = False) -> None:
        assert self.progress is not None
        self.progress.update(self.task, completed=step)
        now = time.monotonic()
        if force or now - self.refreshed >= REFRESH_S:
            self.progress.refresh()
            self.refreshed = now

    def eval(self, record: dict[str, Any]) -> None:
        self._safely(lambda: self._eval(record))

    def _eval(self, record: dict[str, Any]) -> None:
        if self.progress is not None:  # fits 80 columns beside the bar and the ETA
            self.progress.update(
                self.task,
                metrics=(
                    f"loss {record['train_loss']:.3f} eval {record['eval_loss']:.3f} lr {record['lr']:.1e} "
                    f"{record['tokens_per_second'] / 1000:.1f}k tok/s"
                ),
            )
            self._advance(record["step"], force=True)
            return
        text = (
            f"loss {record['train_loss']:.4f} eval {record['eval_loss']:.4f} "
            f"lr {record['lr']:.2e} {record['tokens_per_second']:,.0f} tok/s"
        )
        if not self.quiet:
            self._print(
                f"step {record['step']}: {text} ppl {record['perplexity']:.2f} bpb {record['bits_per_byte']:.4f}"
            )

    def checkpoint(self, step: int, path: Path) -> None:
        if self.progress is None and not self.quiet:
            self._safely(lambda: self._print(f"step {step}: checkpoint {path.name}"))

    def note(self, message: str) -> None:
        if not self.quiet:
            self._safely(lambda: self._print(message))

    def warn(self, message: str) -> None:
        self._safely(lambda: self._print(f"octlm: warning: {message}", style="yellow"))

    def finish(self) -> None:
        if self.progress is not None:
            self._safely(self._stop_bar)

    def _stop_bar(self) -> None:
        assert self.progress is not None
        progress, self.progress = self.progress, None
        progress.stop()
