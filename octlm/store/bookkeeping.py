"""The registry as a training run writes to it: ``Bookkeeping`` defers writes while another program holds
the registry locked, so that bookkeeping never stops training."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from octlm.core.errors import Refused
from octlm.core.records import RunRecord
from octlm.core.reporting import Reporter, counted
from octlm.store.registry import BUSY_TIMEOUT_S, Registry

BOOKKEEPING_TIMEOUT_S = 2.0  # the longest one registry write during training waits for another process
BACKOFF_S = (2.0, 60.0)  # the first and the longest pause before deferred writes are tried again
RETRY_TIMEOUT_S = 0.05  # how long a retry of deferred writes waits: the lock was held for seconds already
SETTLE_TIMEOUT_S = 2 * BUSY_TIMEOUT_S  # how long a finished run waits to record itself


class Bookkeeping(Registry):
    """The registry as a training run writes to it, so that a lock held elsewhere (a DB browser's open
    transaction) never stops training: a write waits at most ``BOOKKEEPING_TIMEOUT_S``; while the
    registry stays locked, writes are kept in order and retried with backoff at the next write, and at
    the end (``settle``) for as long as any write would wait. What still cannot be written is left to
    ``octlm doctor --repair``, which rebuilds rows from the files."""

    def __init__(self, path: Path, reporter: Reporter, timeout: float = BOOKKEEPING_TIMEOUT_S):
        super().__init__(path)
        self.reporter, self.timeout = reporter, timeout
        self.pending: list[Callable[[], None]] = []
        self.retry_at, self.backoff = 0.0, BACKOFF_S[0]
        self._wait(timeout)

    def _wait(self, seconds: float) -> None:
        self.set_busy_timeout(seconds)

    def start_run(self, experiment_id: str, kind: str, **fields: Any) -> int:
        """The run row is needed before training starts: this one write waits like any other command's."""
        self._wait(BUSY_TIMEOUT_S)
        try:
            return super().start_run(experiment_id, kind, **fields)
        finally:
            self._wait(self.timeout)

    def update_run(self, run_id: int, **fields: Any) -> None:
        self._write(lambda: Registry.update_run(self, run_id, **fields))

    def add_checkpoint(self, **row: Any) -> None:
        self._write(lambda: Registry.add_checkpoint(self, **row))

    def remove_checkpoint(self, path: str) -> None:
        self._write(lambda: Registry.remove_checkpoint(self, path))

    def add_metrics(self, experiment_id: str, track: str, run_id: int | None, record: RunRecord) -> None:
        self._write(lambda: Registry.add_metrics(self, experiment_id, track, run_id, record))

    def cut_metrics(self, experiment_id: str, track: str, step: int) -> None:
        self._write(lambda: Registry.cut_metrics(self, experiment_id, track, step))

    def _write(self, write: Callable[[], None]) -> None:
        self.pending.append(write)
        if time.monotonic() >= self.retry_at:
            self.flush()

    def flush(self, wait: float | None = None) -> bool:
        """Write what is pending, oldest first; True when nothing is left. Each write waits ``wait`` seconds for
        the lock; by default a retry of deferred writes barely waits (``RETRY_TIMEOUT_S``), so a registry locked
        for minutes costs training one ``timeout``, not one per retry."""
        retrying = self.backoff != BACKOFF_S[0]
        self._wait(wait if wait is not None else RETRY_TIMEOUT_S if retrying else self.timeout)
        try:
            while self.pending:
                try:
                    self.pending[0]()
                except (Refused, sqlite3.OperationalError) as error:  # locked, busy: keep it for later
                    if not retrying:
                        self.reporter.warn(f"bookkeeping deferred, training goes on: {error}")
                    self.retry_at, self.backoff = time.monotonic() + self.backoff, min(2 * self.backoff, BACKOFF_S[1])
                    return False
                self.pending.pop(0)
        finally:
            self._wait(self.timeout)
        if self.backoff != BACKOFF_S[0]:
            self.reporter.note("the registry is writable again: deferred bookkeeping recorded")
        self.backoff = BACKOFF_S[0]
        return True

    def settle(self, seconds: float) -> None:
        """The last chance at the end of a run: wait up to ``seconds`` for the lock, then leave the rest to doctor."""
        if not self.pending:
            return
        self.reporter.note(
            f"waiting up to {seconds:.0f} s for the registry to record the run (checkpoints are written)"
        )
        if not self.flush(wait=seconds):
            self.reporter.warn(
                f"{counted(len(self.pending), 'registry write')} could not be made; `octlm doctor --repair` rebuilds "
                + ("it" if len(self.pending) == 1 else "them")
            )
