"""``training.tensorboard``: the run's TensorBoard events written while it trains, to ``runs/tensorboard/<ID>/``
(``Home.live_events``): the events ``octlm export tensorboard`` writes from the run file afterwards
(``exchange.trackers.Events``: the config as hyperparameters, the fingerprints as text, then each logged record).

Never part of the run. The session hands each record to a queue (a copy of the record; ``put_nowait``, never a
wait), and a thread of its own imports tensorboard, builds the events and writes them; it never touches the loop's
tensors or random state, so a run's bits are the same with and without it. A failure of the writer (tensorboard
not installed, a folder that cannot be made, a full disk, a writer ``QUEUE`` records behind) is said once, as a
warning, and the events stop there; the run goes on. At the end the thread has ``CLOSE_S`` seconds to write what
is queued; a writer hung on its disk is left behind (a daemon thread), said once too. A file starts with a purge at
the first step the session takes, so TensorBoard hides what earlier files of the folder hold from that step on (a
resume cut the run file after its checkpoint's step too; a run started again from step 0 replaces them all).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from octlm.config import Config
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.data.fingerprints import Fingerprints
from octlm.exchange.trackers import Events

QUEUE = 10_000  # records a writer may fall behind by before it is given up on (a run logs every few steps)
CLOSE_S = 10.0  # what the writer has at the end to write what is queued
FLUSH_S = 5.0  # how often the event file is flushed, so that a TensorBoard open beside the run follows it
QueuedWrite = tuple[str, tuple[Any, ...]] | None  # ("header" | "record", its arguments); None: close


class LiveEvents:
    """One run's live events: ``record`` each logged record, ``close`` at the end (both from the session's thread)."""

    def __init__(self, folder: Path, start_step: int, warn: Callable[[str], None]):
        self.folder, self._warn = folder, warn
        self._queue: queue.Queue[QueuedWrite] = queue.Queue(QUEUE)
        self._failure: str | None = None  # set by the writer's thread, said by the session's
        self._said = False
        self._thread = threading.Thread(target=self._write, args=(start_step,), name="octlm-tensorboard", daemon=True)

    def start(self, config: Config, prints: Fingerprints) -> None:
        fingerprints = {"config": prints.config, "data": prints.data, "tokenizer": prints.tokenizer}
        self._put(("header", (config.id, config.to_dict(), fingerprints, time.time())))
        self._thread.start()

    def record(self, record: RunRecord) -> None:
        self._say()
        self._put(("record", (record.copy(), time.time())))

    def close(self) -> None:
        if self._thread.ident is None:  # never started
            return
        self._put(None)
        self._thread.join(CLOSE_S)
        if self._thread.is_alive() and self._failure is None:
            self._failure = f"the writer did not finish within {CLOSE_S:g} s; what it had not written is lost"
        self._say()

    def _put(self, item: QueuedWrite) -> None:
        if self._failure is not None:
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._failure = f"the writer fell {QUEUE:,} records behind"

    def _say(self) -> None:
        if self._failure is not None and not self._said:
            self._said = True
            self._warn(
                f"training.tensorboard: {self._failure}; no more events are written to {self.folder} "
                "(the run goes on, unchanged; `octlm export tensorboard` writes them all from its run file)"
            )

    def _write(self, start_step: int) -> None:
        """The writer's thread: every item in order, until ``close``'s None; any failure ends it, kept to be said."""
        try:
            events = Events(self.folder, purge_step=start_step + 1, flush_secs=FLUSH_S)  # the start's record is kept
            while (item := self._queue.get()) is not None:
                kind, arguments = item
                (events.header if kind == "header" else events.record)(*arguments)
            events.close()
        except ModuleNotFoundError as error:
            self._failure = f"{error.name} is not installed (pip install 'octlm[trackers]')"
        except OSError as error:
            self._failure = f"{error.filename or self.folder}: {error.strerror or error}"
        except Exception as error:  # whatever the writer raises, the run never sees it
            self._failure = f"{type(error).__name__}: {error}"


class Off:
    """A run without live events (``training.tensorboard: false``, or the overfit track): nothing to do."""

    def start(self, config: Config, prints: Fingerprints) -> None:
        pass

    def record(self, record: RunRecord) -> None:
        pass

    def close(self) -> None:
        pass


OFF = Off()


def live_events(
    config: Config, track: str, home_root: Path, start_step: int, warn: Callable[[str], None]
) -> LiveEvents | Off:
    """The live writer of a main track (``train``) whose config asks for it (``training.tensorboard``), else ``OFF``."""
    if not config.training.tensorboard or track != "train":
        return OFF
    return LiveEvents(Home(home_root).live_events(config.id), start_step, warn)
