"""``octlm work --workers N``: N workers on one box, each an ``octlm work`` process of its own, splitting the box.
Torch-free (the workers import it, not the pool).

Each worker gets its share of the cores this process may use (``cores // N``, at least 1, or ``--threads``):
``OMP_NUM_THREADS`` and ``--threads`` set to it, so it sets ``torch.set_num_threads`` and its claims record it.
On a box with GPUs (``CUDA_VISIBLE_DEVICES``, else the driver's list) worker i gets GPU i mod G alone. The
workers run in sessions of their own: a SIGTERM (SIGINT, SIGHUP) to the pool reaches each once, each running
trial checkpoints and releases its claim, and the pool exits with the signal's code (143, 130, 129); otherwise
with the highest code a worker ended with (0 when all ended well).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from octlm.core.signals import SIGNAL_EXIT, handled_signals
from octlm.runtime.load import cores

NVIDIA = Path("/proc/driver/nvidia/gpus")


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
    flags = ["--threads", str(threads), *(["--until-empty"] if until_empty else []), *(["-q"] if quiet else [])]
    return [sys.executable, "-m", "octlm", "--home", str(home), "work", *sweeps, *flags]


def run(home: Path, sweeps: Sequence[str], workers: int, threads: int, until_empty: bool, quiet: bool = False) -> int:
    """Start the workers, pass signals on, wait for them all; the exit code as the module says."""
    found, each = gpus(), share(workers, threads)
    children: list[subprocess.Popen[bytes]] = []
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in handled_signals()}
    try:
        for index in range(workers):
            env = {**os.environ, "OMP_NUM_THREADS": str(each)}
            if found:
                env["CUDA_VISIBLE_DEVICES"] = found[index % len(found)]
            command = worker_command(home, sweeps, each, until_empty, quiet)
            children.append(subprocess.Popen(command, env=env, start_new_session=True))
        codes = [_wait(child) for child in children]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        return SIGNAL_EXIT[signal.Signals(received[0])]
    return max(codes, default=0)


def _wait(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            code = child.wait()
        except InterruptedError:
            continue
        return 128 - code if code < 0 else code
