"""The signals a training process stops for (SIGHUP, SIGINT, SIGTERM), the exit codes they end with
(128 + the signal's number), and the guard that turns the first one into a stop at the next step."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from octlm.core.errors import SIGNALLED, STOPPING, Interrupted

SIGNAL_EXIT = {signum: SIGNALLED + signum for signum in STOPPING}  # 129, 130, 143


def handled_signals() -> list[signal.Signals]:
    """SIGHUP, SIGINT and SIGTERM; SIGHUP not when it is ignored (``nohup``: the run outlives the terminal)."""
    return [s for s in SIGNAL_EXIT if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN]


@contextmanager
def handling(handler: Any) -> Iterator[None]:
    """Within: ``handler`` for each of ``handled_signals()``; after: the handlers that were there before."""
    previous = {signum: signal.signal(signum, handler) for signum in handled_signals()}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


@contextmanager
def stopping_at_once(what: str) -> Iterator[None]:
    """Within: SIGHUP, SIGINT or SIGTERM raise ``Interrupted`` at once (exit 129/130/143), so the ``finally``
    blocks of a command that is no training run (``unpack``) take back what it wrote; ``what`` names it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        name = signal.Signals(signum)
        raise Interrupted(f"{what} stopped by {name.name}: nothing was changed", SIGNAL_EXIT[name])

    with handling(stop):
        yield


class SignalGuard:
    """First SIGHUP/SIGINT/SIGTERM: finish the step, checkpoint, exit 129/130/143. Second: stop at once,
    except the same signal again within ``REPEAT_S``: one kill that reached the process twice (a
    launcher forwarding it, and ``docker stop`` or systemd signalling the whole group)."""

    REPEAT_S = 1.0

    def __init__(self) -> None:
        self.received: int | None = None
        self.received_at = 0.0
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        for signum in handled_signals():
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.received == signum and now - self.received_at < self.REPEAT_S:
            return
        if self.received is not None:
            raise Interrupted(
                f"stopped at once by a second {signal.Signals(signum).name}; the previous checkpoint is intact",
                SIGNAL_EXIT[signal.Signals(signum)],
            )
        self.received, self.received_at = signum, now

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @property
    def stop_requested(self) -> bool:
        return self.received is not None
