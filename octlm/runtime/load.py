"""How busy the box is, torch-free: its cores (this process's affinity), the 1-minute load average, and the cores that
other processes keep busy, read from ``/proc/stat`` over a window less what this process and its children spent
(``Meter``). From these: the threads a command that may choose takes from the cores free at its start
(``free_threads``: ``verify-resume``, whose sides are compared only with each other), and the warning for a run that
asks for more threads than the box has free (``oversubscribed``; torch's threads spin and wait for each other:
measured 12-15x slower than one thread on 2 busy cores).

A training process starts its meter once, before it prepares its data (``begin``), and the session asks at its first
step what other processes did meanwhile (``others_since_begin``): seconds of real use, not the 1-minute average,
which still holds a process that ended just before (verify-resume's previous segment).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from octlm.core.reporting import counted

LOAD_CHECK_VARIABLE = "OCTLM_NO_LOAD_CHECK"  # "1": never warn about a busy box (the test suite sets it)
SLACK = 0.5  # of a core: other processes' use below it does not make a thread wait
SAMPLE_S = 0.5  # how long free_threads watches the box
FALLBACK_SLACK = 1.5  # with only the load average to go by: it lags, and still holds a process that just ended


def cores() -> int:
    """The processors this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def busy_seconds() -> float | None:
    """CPU seconds the whole box has spent busy (``/proc/stat``: user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process and of its children that it waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@dataclass(frozen=True)
class Busy:
    """How busy the box was over a window: the highest 1-minute load average seen at its start and end, and the
    cores that processes other than this one and its children kept busy on average (None: not measurable here)."""

    load_average: float
    others: float | None


class Meter:
    """Started at the beginning of a window, ``stop``-ped at its end (children waited for first)."""

    def __init__(self) -> None:
        self.load = load_average() or 0.0
        self.wall, self.own, self.box = time.monotonic(), own_seconds(), busy_seconds()

    def stop(self) -> Busy:
        wall = max(time.monotonic() - self.wall, 1e-9)
        box, load = busy_seconds(), max(self.load, load_average() or 0.0)
        if box is None or self.box is None:
            return Busy(round(load, 2), None)
        others = max(0.0, (box - self.box) - (own_seconds() - self.own)) / wall
        return Busy(round(load, 2), round(min(others, float(cores())), 2))


@dataclass(frozen=True)
class Choice:
    """The threads a command takes, and why: ``chosen`` (from the free cores), ``asked`` (set by the user) or
    ``recorded`` (a run's, which ``verify-run`` replays at the count its checkpoint recorded)."""

    threads: int
    how: str  # "chosen" | "asked" | "recorded"
    others: float | None = None  # the cores other processes kept busy when it was chosen

    def said(self) -> str:
        """``2 threads (2 of 2 cores free)``, ``1 thread (1.6 of 2 cores busy with other work)``."""
        count = counted(self.threads, "thread")
        if self.how in ("asked", "recorded"):
            return f"{count} ({'as asked' if self.how == 'asked' else 'as the run trained'})"
        if self.others is None:
            return f"{count} (this box's cores)"
        if self.others >= SLACK:
            return f"{count} ({self.others:.1f} of {counted(cores(), 'core')} busy with other work at the start)"
        return f"{count} ({cores()} of {counted(cores(), 'core')} free)"


def free_threads(sample_s: float = SAMPLE_S) -> Choice:
    """As many threads as the box has cores free now (at least 1): its cores less what other processes keep busy
    over ``sample_s`` seconds (else the 1-minute load average), rounded to the nearest core."""
    meter = Meter()
    time.sleep(sample_s)
    busy = meter.stop()
    others = busy.others if busy.others is not None else busy.load_average
    return Choice(max(1, min(cores(), int(cores() - others + SLACK))), "chosen", others)


_BEGUN: list[Meter] = []  # the meter of this training process, from before its data was prepared


def begin() -> None:
    """Start this process's meter (once): what other processes do from now until the first step."""
    if not _BEGUN:
        _BEGUN.append(Meter())


def others_since_begin() -> float | None:
    """The cores other processes kept busy since ``begin`` (None: not begun, or not measurable here)."""
    return _BEGUN[0].stop().others if _BEGUN else None


def oversubscribed(threads: int, others: float | None = None, how: str = "") -> str | None:
    """A one-line warning when other processes keep busy enough of the box that a run of ``threads`` threads will wait
    on its own threads (``others``: their cores, measured; else the 1-minute load average is read), or None. ``how``
    the count came where it cannot change the bits (canonical pieces): ``chosen`` from the cores free at the start (the
    box got busier since: a resume takes the cores free then), ``asked`` (a resume may ask for fewer); "" where the
    count is part of the run's bits (a resume under another one is not bit-exact)."""
    if threads < 2 or os.environ.get(LOAD_CHECK_VARIABLE) == "1":
        return None
    available = cores()
    if others is not None:
        busy = threads + others > available + SLACK
        shown = f"other processes keep {others:.1f} of its {counted(available, 'core')} busy"
    else:
        load = load_average()
        if load is None:
            return None
        busy = load + threads > available + FALLBACK_SLACK  # the average still holds a process that just ended
        shown = f"load {load:.1f} on {counted(available, 'core')}"
    if not busy:
        return None
    slower = f"this box is busy ({shown}) and this run uses {counted(threads, 'thread')}: it may run many times slower"
    return f"{slower} than it should; {REMEDIES[how]}"


REMEDIES = {  # what a busy box's warning asks, by how the run's thread count came (``oversubscribed``)
    "": "give it fewer (training.threads: 1, or OMP_NUM_THREADS=1) before the run starts (a resume under another "
    "thread count is not bit-exact), or wait until the box is quieter",
    "chosen": "the box got busier since its start chose them; stop it (Ctrl-C) and resume: the resume takes the cores "
    "free then, and canonical pieces train the same bits at any thread count",
    "asked": "give it fewer (training.threads: 1, or OMP_NUM_THREADS=1) and resume it: canonical pieces train the same "
    "bits at any thread count (or leave both unset, and each start takes the cores free then)",
}
