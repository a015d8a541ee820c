"""``octlm work --workers N``: N workers on one box, each an ``octlm work`` process of its own, splitting the box.
Torch-free (the workers import it, not the pool).

Each worker gets its share of the cores this process may use (``cores // N``, at least 1, or ``--threads``):
``OMP_NUM_THREADS`` and ``--threads`` set to it, so it sets ``torch.set_num_threads`` and its claims record it.
On a box with GPUs (``CUDA_VISIBLE_DEVICES``, else the driver's list) worker i gets GPU i mod G alone. The
workers run in sessions of their own: a SIGTERM (SIGINT, SIGHUP) to the pool reaches each once, each running
trial checkpoints and releases its claim, and the pool exits with the signal's code (143, 130, 129); otherwise
with the highest code a worker ended with (0 when all ended well; 5 when a trial failed; 137 for a worker SIGKILLed,
whose trial the pool queues again and names). A worker dies with its pool: the pool killed, each worker is sent SIGTERM
(``PR_SET_PDEATHSIG``), checkpoints its trial and releases its claim. Each worker writes its tally (``work --json``)
to a file the pool reads once it has ended, so that the pool says one total for all of them (and ``--json`` writes one
document), not a line of each worker's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from octlm.core.signals import SIGNAL_EXIT, handled_signals
from octlm.runtime.load import cores
from octlm.tasks.sweeps.working.trial_log import Tally, TallyJson

NVIDIA = Path("/proc/driver/nvidia/gpus")
PR_SET_PDEATHSIG = 1  # from linux/prctl.h
Say = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


def share(workers: int, threads: int = 0) -> int:
    """Each worker's threads: ``threads`` when given, else the cores split between the workers (at least 1)."""
    return threads or max(1, cores() // max(workers, 1))


def gpus() -> list[str]:
    """The GPUs a worker may be given: ``CUDA_VISIBLE_DEVICES`` when set, else one per entry of the driver's list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [item.strip() for item in visible.split(",") if item.strip() and item.strip() != "-1"]
    try:
        return [str(index) for index in range(len(list(NVIDIA.iterdir())))]
    except OSError:
        return []


def worker_command(home: Path, sweeps: Sequence[str], threads: int, until_empty: bool, quiet: bool) -> list[str]:
    """A worker's command line: ``--json``, whose document (its tally) the pool reads back and adds up."""
    flags = ["--threads", str(threads), *(["--until-empty"] if until_empty else []), *(["-q"] if quiet else [])]
    return [sys.executable, "-m", "octlm", "--home", str(home), "work", *sweeps, *flags, "--json"]


def run(
    home: Path,
    sweeps: Sequence[str],
    workers: int,
    threads: int,
    until_empty: bool,
    quiet: bool = False,
    say: Say = _quiet,
) -> tuple[int, Tally | None]:
    """Start the workers, pass signals on, wait for them all; the exit code as the module says, and the workers'
    tallies added up (None when no worker wrote one: each stopped on an error, said on its own). A signal that arrives
    while the workers start reaches every worker started (and no more start); a worker killed by a signal is said
    (which, and its trial, queued again to resume from its newest checkpoint)."""
    each, found = share(workers, threads), gpus()
    command = worker_command(home, sweeps, each, until_empty, quiet)
    children: list[subprocess.Popen[bytes]] = []
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in handled_signals()}
    with contextlib.ExitStack() as files:  # each worker's stdout: a file, never a pipe a long tally could fill
        outputs = [files.enter_context(tempfile.TemporaryFile()) for _ in range(workers)]
        try:
            for index, output in enumerate(outputs):
                if received:
                    break  # stopped while starting: the ones started have the signal, no more start
                children.append(_start(command, _environment(index, each, found), output))
                if received:  # the signal came while this one started
                    children[-1].send_signal(received[0])
            codes = [_wait(home, index, child, say, received) for index, child in enumerate(children)]
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        tally = _total(outputs[: len(children)])
    return (SIGNAL_EXIT[signal.Signals(received[0])] if received else max(codes, default=0)), tally


def _environment(index: int, threads: int, found: list[str]) -> dict[str, str]:
    """Worker ``index``'s environment: its share of the cores, and GPU ``index`` mod G where there are G."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if found:
        env["CUDA_VISIBLE_DEVICES"] = found[index % len(found)]
    return env


def _total(outputs: Sequence[IO[bytes]]) -> Tally | None:
    """The tallies the workers wrote (``work --json``), as one; a worker killed or stopped on an error wrote none."""
    found: list[TallyJson] = []
    for output in outputs:
        output.seek(0)
        with contextlib.suppress(ValueError):
            found.append(json.loads(output.read()))
    return Tally.total(found) if found else None


def _start(command: list[str], env: dict[str, str], output: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """A worker in a session of its own (a signal to the pool reaches it once, passed on), dying with the pool;
    ``output``: where its stdout goes (its tally; default: the pool's)."""
    return subprocess.Popen(command, env=env, stdout=output, start_new_session=True, preexec_fn=_dies_with(os.getpid()))


def _dies_with(parent: int) -> Callable[[], None]:
    """In a worker before it runs: SIGTERM when the pool dies (SIGKILL too): the worker then checkpoints its trial and
    releases its claim, as on any SIGTERM, rather than go on training unwatched."""

    def arrange() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the pool died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return arrange


def _wait(home: Path, index: int, child: subprocess.Popen[bytes], say: Say, received: list[int]) -> int:
    while True:
        try:
            code = child.wait()
        except InterruptedError:
            continue
        if code < 0:
            _killed(home, index, child.pid, signal.Signals(-code), say, received)
        return 128 - code if code < 0 else code


def _killed(home: Path, index: int, pid: int, signum: signal.Signals, say: Say, received: list[int]) -> None:
    """A worker killed by a signal (not the pool's own, passed on): its claims go back to the queue, said."""
    from octlm.core.home import Home
    from octlm.store import kept
    from octlm.store.registry import Registry

    if signum in received:
        return
    with Registry(Home(home).registry) as registry:
        held = registry.claims_held(socket.gethostname(), pid)
        for claim in held:
            registry.settle_claim(claim["id"], "lost")
            kept.keep_sweep_by_id(Home(home), registry, claim["sweep_id"])
    trials = ", ".join(claim["experiment_id"] for claim in held)
    what = (
        f"while training {trials}: queued again, it resumes from its newest checkpoint" if held else "holding no trial"
    )
    say(f"work: worker {index + 1} (pid {pid}) was killed by {signum.name} {what}")
