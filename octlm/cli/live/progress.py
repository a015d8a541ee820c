"""The training reporter: a rich progress bar on an interactive stderr, plain timestamped lines otherwise.

Output must never stop training: when stderr stops taking writes (a pipe whose reader left, as in
``octlm train ID 2>&1 | head``, or a terminal that hung up), the reporter falls silent, and the
standard streams nobody reads any more are pointed at /dev/null (``streams``), so that later writes by anyone
(and Python's flush at exit) succeed instead of failing the command.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from octlm.cli import render
from octlm.cli.live import bars
from octlm.cli.live.streams import release_vanished, to_devnull
from octlm.core.records import RunRecord
from octlm.core.reporting import RunStart

REFRESH_S = 0.1  # the bar is redrawn by the training thread at most this often (no refresh thread)


class _Console(render.PlainConsole):
    """The reporter's console: plain text only, and a closed pipe is an error to handle (rich's default
    answer is to exit the process, and to point stdout at /dev/null even when stderr broke)."""


def interactive_stderr(console: render.PlainConsole) -> bool:
    """A terminal that can draw (``TERM=dumb`` gets plain lines, like a pipe)."""
    return console.is_terminal and not console.is_dumb_terminal


STAMP = r"\d\d:\d\d:\d\d "  # what ``stamped`` puts before a line, as a pattern (``segments`` reads children's lines)


def stamped(message: str) -> str:
    """A line as a log keeps it: the wall-clock time first (``HH:MM:SS``)."""
    return f"{time.strftime('%H:%M:%S')} {message}"


class ConsoleReporter:
    """Phases as spinners with their elapsed time, then a bar, on a terminal; timestamped lines elsewhere.

    On a terminal a ticker thread redraws the spinners (and the bar until its first step) while the
    work blocks; every write, from either thread, holds ``lock``."""

    def __init__(self, quiet: bool = False, estimate: Callable[[int, int], str | None] | None = None):
        self.quiet, self.estimate = quiet, estimate
        self.silent = False  # stderr stopped taking writes: nothing more is printed
        self.console = _Console(stderr=True, highlight=False)
        self.interactive = interactive_stderr(self.console) and not quiet
        self.progress: Progress | None = None
        self.task = TaskID(0)
        self.refreshed = 0.0
        self.phases: Progress | None = None  # the live spinners of the phases so far
        self.current: tuple[str, TaskID, float] | None = None  # the phase under way: name, row, start
        self.lock = threading.RLock()
        self.ticker: threading.Thread | None = None
        self.plain = ("", "")  # off a terminal: the phase under way, and what it found, not yet said
        self.repeated: list[str] = []  # the warnings that explain a slow run: said again after the summary

    def _safely(self, write: Callable[[], None]) -> None:
        with self.lock:
            if self.silent:
                return
            try:
                write()
            except OSError:
                self._fall_silent()

    def _fall_silent(self) -> None:
        self.silent = True
        self.console.quiet = True  # rich drops what it would still write (stopping the bar writes)
        if self.phases is not None:
            with contextlib.suppress(OSError):
                self.phases.stop()
            self.phases = None
        if self.progress is not None:
            with contextlib.suppress(OSError):
                self.progress.stop()  # gives back sys.stdout and sys.stderr
            self.progress = None
        to_devnull(2)  # the reporter writes only to stderr, so stderr is what failed
        release_vanished((1,))

    def _print(self, message: str, style: str | None = None) -> None:
        live = self.progress or self.phases
        console = live.console if live else self.console
        console.print(message, markup=False, highlight=False, soft_wrap=not console.is_terminal, style=style)  # words

    def _line(self, message: str) -> None:
        """A line of the run's own (a note, an evaluation, a checkpoint): off a terminal timestamped, as the phases'
        lines are, so that a log says when each step was reached; on one, above the bar that shows the time."""
        self._print(message if self.interactive else stamped(message))

    # ------------------------------------------------------------ phases

    def phase(self, name: str, detail: str = "") -> None:
        if self.quiet:
            return
        if not self.interactive:
            self._safely(lambda: self._plain_phase(name, detail))
            return
        self._safely(lambda: self._phase(name, detail))

    def _plain_phase(self, name: str, detail: str) -> None:
        """A phase's line: at once when it begins with a detail; what it found (a detail that comes later)
        once the next phase begins or the run starts, so that a failure stays one line on its own."""
        if name == self.plain[0]:
            self.plain = (name, stamped(f"{name}: {detail}") if detail else self.plain[1])
            return
        self._said_found()
        self.plain = (name, "")
        if detail:
            self._print(stamped(f"{name}: {detail}"))

    def _said_found(self) -> None:
        if self.plain[1]:
            self._print(self.plain[1])
        self.plain = (self.plain[0], "")

    def _phase(self, name: str, detail: str) -> None:
        text = render.plain(f"{name}: {detail}" if detail else name)
        if self.current is not None and self.current[0] == name and self.phases is not None:
            self.phases.update(self.current[1], description=text)
            return
        self._end_phase()
        if self.phases is None:
            self.phases = Progress(
                SpinnerColumn(finished_text="✓"),
                TextColumn("{task.description}", markup=False),
                TimeElapsedColumn(),
                console=self.console,
                auto_refresh=False,
            )
            self.phases.start()
        self.current = (name, self.phases.add_task(text, total=1), time.monotonic())
        self.phases.refresh()
        self._tick()

    def _end_phase(self) -> None:
        if self.current is not None and self.phases is not None:
            self.phases.update(self.current[1], completed=1)
            self.phases.stop_task(self.current[1])
        self.current = None

    def _freeze(self, drop_current: bool = False) -> None:
        """Stop drawing the phases: their rows stay on the screen as last drawn (but the current one's,
        with ``drop_current``: it goes on elsewhere, or it failed)."""
        if self.phases is None:
            return
        if drop_current and self.current is not None:
            self.phases.remove_task(self.current[1])
        phases, self.phases = self.phases, None
        phases.stop()

    def _tick(self) -> None:
        """Redraw the spinners, or the bar before its first step, while the work blocks."""
        if self.ticker is not None and self.ticker.is_alive():
            return

        def run() -> None:
            while not self.silent and self.current is not None:
                time.sleep(REFRESH_S)
                self._safely(self._redraw)

        self.ticker = threading.Thread(target=run, name="octlm-progress", daemon=True)
        self.ticker.start()

    def _redraw(self) -> None:
        if self.phases is not None:
            self.phases.refresh()
        elif self.progress is not None and self.current is not None:
            elapsed = time.monotonic() - self.current[2]
            self.progress.update(self.task, metrics=f"{self.current[0]} {elapsed:.0f} s")
            self.progress.refresh()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """No drawing while the user is asked something; the phase under way goes on afterwards."""
        with self.lock:
            current = self.current
            self._safely(lambda: self._freeze(drop_current=True))
            self.current = None
        try:
            yield
        finally:
            if current is not None:
                self.phase(current[0])

    def close(self) -> None:
        """However the command ends: no spinner is left running (a failed phase's row goes)."""
        self._safely(lambda: self._freeze(drop_current=True))
        self.current = None
        self.finish()

    # ------------------------------------------------------------ the run

    def start(self, info: RunStart) -> None:
        if not self.quiet:
            self._safely(self._said_found)
        self.note(
            f"{info['kind']} {info['id']}: steps {info['start']} -> {info['until']}, "
            f"{info['parameters']:,} parameters, {info['device']}, {info['precision']}"
        )
        line = self.estimate(info["start"], info["until"]) if self.estimate else None
        if line:
            self.note(line)
        if self.interactive:
            self._safely(lambda: self._start_bar(info))

    def _start_bar(self, info: RunStart) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[id]}"),  # an ID: letters, digits and dashes
            BarColumn(bar_width=12),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[metrics]}", markup=False),
            bars.TimeLeft(),
            console=self.console,
            transient=False,
            auto_refresh=False,  # every write happens here, in the training thread, where a failure is caught
        )
        self._freeze(drop_current=True)  # the phase under way (the first step) goes on in the bar
        waiting = f"{self.current[0]} 0 s" if self.current else ""
        self.task = self.progress.add_task(
            "train", total=info["until"], completed=info["start"], id=info["id"], metrics=waiting
        )
        self.progress.start()
        if self.current is not None:
            self._tick()

    def step(self, step: int) -> None:
        if self.current is not None:
            self._safely(self._first_step_done)
        if self.progress is not None:
            self._safely(lambda: self._advance(step))

    def _first_step_done(self) -> None:
        self.current = None
        if self.progress is not None:
            self.progress.update(self.task, metrics="")

    def _advance(self, step: int, force: bool = False) -> None:
        assert self.progress is not None
        self.progress.update(self.task, completed=step)
        now = time.monotonic()
        if force or now - self.refreshed >= REFRESH_S:
            self.progress.refresh()
            self.refreshed = now

    def eval(self, record: RunRecord) -> None:
        self._safely(lambda: self._eval(record))

    def _eval(self, record: RunRecord) -> None:
        if self.progress is not None:  # what fits beside the bar and the time left, whole items only
            items = (
                f"loss {record['train_loss']:.3f}",
                f"eval {record['eval_loss']:.3f}",
                f"lr {record['lr']:.1e}",
                f"{record['tokens_per_second'] / 1000:.1f}k tok/s",
            )
            self.progress.update(self.task, metrics=bars.parts(items, self._room()))
            self._advance(record["step"], force=True)
            return
        text = (
            f"loss {record['train_loss']:.4f} eval {record['eval_loss']:.4f} "
            f"lr {record['lr']:.2e} {record['tokens_per_second']:,.0f} tok/s"
        )
        if not self.quiet:
            self._line(
                f"step {record['step']}: {text} ppl {record['perplexity']:.2f} bpb {record['bits_per_byte']:.4f}"
            )

    def _room(self) -> int:
        """The bar's room for its metrics: the terminal's width less the ID, the bar, the steps and the time left."""
        assert self.progress is not None
        task = next(t for t in self.progress.tasks if t.id == self.task)
        steps = len(f"{task.total:.0f}") * 2 + 1
        return self.console.width - (len(task.fields["id"]) + 1 + 12 + 1 + steps + 1 + bars.TimeLeft.WIDTH + 1) - 1

    def checkpoint(self, step: int, path: Path) -> None:
        if self.progress is None and not self.quiet:
            self._safely(lambda: self._line(f"step {step}: checkpoint {path.name}"))

    def note(self, message: str) -> None:
        if not self.quiet:
            self._safely(lambda: self._line(message))

    def warn(self, message: str, again: bool = False) -> None:
        if again and message not in self.repeated:
            self.repeated.append(message)
        self._safely(lambda: self._print(f"octlm: warning: {message}", style="yellow"))

    def finish(self) -> None:
        self.current = None
        if self.progress is not None:
            self._safely(self._stop_bar)

    def _stop_bar(self) -> None:
        assert self.progress is not None
        progress, self.progress = self.progress, None
        progress.stop()
