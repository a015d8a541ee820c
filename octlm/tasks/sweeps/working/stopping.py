"""How a worker stops on a signal (SIGTERM, SIGINT, SIGHUP): at once between trials and before a trial's session
takes the signals over (``stoppable``), the stop kept so that nothing that caught it on its way up lets the worker
train on (``stop_if_signalled``), the same signal again ignored while the worker leaves (``hold``), and the claims
it still holds released on its way out (``releasing``). A trial in training stops through its own session
(``trials.run``).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from octlm.core.errors import Interrupted
from octlm.core.home import Home
from octlm.core.signals import SIGNAL_EXIT, handled_signals, handling
from octlm.store.registry import Registry
from octlm.store.sweeps.records import Worker


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Between trials and before a trial's session takes the signals over: the first SIGTERM (SIGINT, SIGHUP)
    stops the worker at once (``Interrupted``). The stop is also kept (``_STOPPED``): code that caught it on its
    way up (a config read that turns errors into a verdict) cannot make the worker, which now ignores the signals,
    claim and train on; ``stop_if_signalled`` raises it again before every claim and every trial."""

    def stop(signum: int, frame: Any) -> None:
        hold()
        name = signal.Signals(signum).name
        _STOPPED.append(Interrupted(f"stopped by {name}", SIGNAL_EXIT[signal.Signals(signum)]))
        raise _STOPPED[0]

    _STOPPED.clear()
    with handling(stop):
        yield


_STOPPED: list[Interrupted] = []


def stop_if_signalled() -> None:
    """Raise the stop a signal asked for, if one did (see ``stoppable``)."""
    if _STOPPED:
        raise _STOPPED[0]


def hold() -> None:
    """Once stopping, the same signal again (a kill that reached the process twice: a scheduler's and its batch
    shell's) must not cut short the claim's release: the signals are ignored until the worker has left."""
    for signum in handled_signals():
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def releasing(home: Home, identity: Worker) -> Iterator[None]:
    """A signal between a claim's commit and its trial's start: the claims this worker still holds are released
    (its trial queued again) before it leaves, as a trial's own stop releases its claim."""
    try:
        yield
    except Interrupted:
        with Registry(home.registry) as registry:
            for claim_id in registry.open_claims(identity["host"], identity["pid"]):
                registry.settle_claim(claim_id, "queued")
        raise
