"""``octlm work --ray``'s live view. On a terminal, the table ``octlm watch`` draws (``watch.draw``: each trial's
step, losses and ETA, each sweep's queue and where its trials train), read from the home as ``watch`` reads it, the
trials in flight shown as the driver hears them from their nodes (``placed``): the node in place of the driver's
host and pid, the step their task said last (every ``remote.PROGRESS_S``, through the mailbox the checkpoints travel
by), the ETA at the rate of their steps since the first one heard; the driver's lines above it. Off a terminal (a
pipe, a log, ``TERM=dumb``) or with ``-q`` no table: the driver's lines, each timestamped as the training reporter's
are (``progress.stamped``). Drawing never stops the driver: a stderr that stops taking writes ends the view.

While the driver runs, whatever Ray itself writes to this process's stdout (its raylet's and workers' words, from
threads and from C++) goes to stderr (``stdout_to_stderr``): stdout is ``--json``'s document alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import sys
import time
from collections.abc import Iterator

from rich.live import Live

from octlm.cli import render
from octlm.cli.live import watch
from octlm.cli.live.progress import interactive_stderr, stamped
from octlm.core.home import Home
from octlm.tasks.sweeps.working.inflight import Flight
from octlm.views.estimate import duration
from octlm.views.sweeps import live

REDRAW_S = 0.5  # the table is read and drawn again at most this often (the driver turns every 0.25 s)
HEADING = ("octlm work --ray", "Ctrl-C stops: the trials checkpoint and are queued again")


class RayView:
    """The driver's lines (``say``) and, on a terminal, the live table of its trials (``show``); ``close`` ends it."""

    def __init__(self, home: Home, sweeps: tuple[str, ...], quiet: bool = False) -> None:
        self.home, self.sweeps, self.quiet = home, sweeps, quiet
        self.console = render.err  # one console for the table and the lines: rich prints the lines above the table
        self.interactive = interactive_stderr(self.console) and not quiet
        self.shown: Live | None = None
        self.drawn = 0.0

    def say(self, message: str) -> None:
        if not self.quiet:
            render.info(message if self.interactive else stamped(message))

    def show(self, flights: list[Flight]) -> None:
        if not self.interactive or time.monotonic() - self.drawn < REDRAW_S:
            return
        self.drawn = time.monotonic()
        try:
            screen = placed(live.snapshot(self.home, self.sweeps), flights)
            table = watch.draw(screen, self.console.width, HEADING)
            if self.shown is None:
                self.shown = Live(table, console=self.console, auto_refresh=False, transient=True)
                self.shown.start()
            self.shown.update(table, refresh=True)
        except sqlite3.Error:
            return  # the registry busy for a moment: drawn at the next turn
        except OSError:
            self.interactive = False  # stderr stopped taking writes: no more drawing

    def close(self) -> None:
        """The table goes (the lines stay): what the trials came to is said by the driver's lines and its total."""
        if self.shown is not None:
            shown, self.shown = self.shown, None
            try:
                shown.stop()
            except OSError:
                pass


def placed(screen: live.Screen, flights: list[Flight]) -> live.Screen:
    """``screen`` with the trials in flight as the driver hears them: running, at the step their task said last (the
    home holds only the checkpoints shipped so far), the ETA at their rate, on their node."""
    flying = {flight.job.experiment_id: flight for flight in flights}

    def heard(row: live.Experiment) -> live.Experiment:
        flight = flying[row.id]
        eta = flight.eta_s()
        step = max(flight.live, row.step or 0)
        return dataclasses.replace(row, status="running", step=step, eta=None if eta is None else duration(eta))

    def where(trial: str, place: str) -> tuple[str, str]:
        node = flying[trial].node if trial in flying else ""
        return (trial, f"node {node}" if node else "Ray (no node yet)") if trial in flying else (trial, place)

    experiments = tuple(heard(row) if row.id in flying else row for row in screen.experiments)
    queues = tuple(dataclasses.replace(q, running=tuple(where(*pair) for pair in q.running)) for q in screen.sweeps)
    return live.Screen(experiments, queues, screen.unknown)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr's file while the block runs (Ray writes there, from threads and C++, when
    a node dies: ``(raylet) Raylet is terminated ...``), then given back, for ``--json``'s document."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
