"""``verify-resume``'s children as they run: a bar per segment on a terminal, prefixed lines elsewhere.

Each child is an ``octlm train`` or ``resume`` whose stderr is a pipe, so it speaks in plain lines
(timestamped lines: phases, ``HH:MM:SS step N: ...`` at each evaluation); the bar follows those steps and shows the
newest line beside it.

The bars are drawn on ``render.err``, the console every other message of the command goes to (``render.info``,
``warn``): while they are live, rich puts whatever that console prints above them. A message written to the
terminal by another console would land beside the bars, which then redraw from where they believe they are: the
message is overwritten and the rows above the bars drawn twice (``scratch kept at`` after the last segment did so).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.progress import BarColumn, Progress, TaskID, TextColumn

from octlm.cli import render
from octlm.cli.live import bars
from octlm.cli.live.progress import STAMP, interactive_stderr, stamped

STEP = re.compile(f"(?:{STAMP})?" + r"step (\d+)[: ]")  # a child's step line, timestamped (it writes to a pipe)
WARNING = "octlm: warning: "
REPEATED = " (said at the start, and again here: it slowed this run)"  # how a segment's summary repeats a warning


class SegmentsView:
    """A bar per segment on a terminal (its newest line beside it), prefixed lines elsewhere; the segments' warnings
    on lines of their own, kept to be said again with the verdict."""

    def __init__(self, before: Callable[[], None] = lambda: None) -> None:
        self.before = before  # called once, before the first segment (the phases' display ends there)
        self.console = render.err  # one console for the bars and every other message (see above)
        self.progress: Progress | None = None
        self.tasks: dict[str, tuple[TaskID, int]] = {}  # label: its bar and its last step
        self.warnings: dict[str, list[str]] = {}  # what the segments warned of: message -> the segments that did
        if interactive_stderr(self.console):
            self.progress = Progress(
                TextColumn("{task.fields[label]}", markup=False),
                BarColumn(bar_width=12),
                TextColumn("{task.completed}/{task.total}"),
                bars.TimeElapsed(),
                TextColumn("{task.fields[said]}", markup=False),
                console=self.console,
                refresh_per_second=4,
            )

    def _say(self, message: str) -> None:
        try:
            self.console.print(render.plain(message), soft_wrap=not self.console.is_terminal)  # at words
        except OSError:
            pass

    def begin(self, label: str, start: int, until: int) -> None:
        self.before()
        self.before = lambda: None
        if self.progress is None:
            self._say(stamped(f"{label} steps {start} -> {until}"))
            return
        if not self.tasks:
            self.progress.start()
        task = self.progress.add_task(
            label, total=until - start, completed=0, label=f"{label} {start}->{until}", said=""
        )
        self.tasks[label] = (task, start)

    def line(self, label: str, text: str) -> None:
        if WARNING in text:  # its own line, above the bars, and kept for the summary (once: not its repetition)
            message = text.split(WARNING, 1)[1]
            if message.endswith(REPEATED):
                return
            self.warnings.setdefault(message, []).append(label)
            self._say(f"{label} {text}")
            return
        if self.progress is None:
            self._say(f"{label} {text}")
            return
        task, start = self.tasks[label]
        found = STEP.match(text)
        completed = int(found.group(1)) - start if found else None
        self.progress.update(task, completed=completed, said=bars.words(render.plain(text), self._room(label)))

    def _room(self, label: str) -> int:
        """A bar's room for the newest line: the terminal's width less the label, the bar, the steps and the time."""
        assert self.progress is not None
        task = next(t for t in self.progress.tasks if t.id == self.tasks[label][0])
        used = len(task.fields["label"]) + 1 + 12 + 1 + len(f"{task.total:.0f}") * 2 + 2 + bars.TimeElapsed.WIDTH + 1
        return self.console.width - used - 1

    def end(self, label: str) -> None:
        if self.progress is not None:
            task, _ = self.tasks[label]
            self.progress.update(task, completed=self.progress.tasks[task].total or 0, said="done")

    def close(self) -> None:
        if self.progress is not None and self.tasks:
            self.progress.stop()
