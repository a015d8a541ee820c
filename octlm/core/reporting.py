"""How a run tells the user what happens: the ``Reporter`` protocol that the CLI implements.

Use cases and sessions report through it and never print; ``QuietReporter`` says nothing. A reporter
never raises because its output cannot be delivered (a closed pipe, a hung-up terminal): it falls
silent, and the run it reports on goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypedDict

from octlm.core.records import RunRecord


class RunStart(TypedDict):
    """What a session tells its reporter as training starts (``Reporter.start``)."""

    id: str
    kind: str  # train, resume, overfit
    start: int  # the step it starts from
    until: int  # the step it trains to
    parameters: int
    device: str
    precision: str
    ranks: int


class Reporter(Protocol):
    interactive: bool  # a live display on a terminal

    def phase(self, name: str, detail: str = "") -> None:
        """Long work named ``name`` begins now (the previous phase ends), or, called again with the same
        name, what is now known about it (``detail``). A spinner on a terminal; elsewhere one timestamped
        line for each call that carries a detail."""

    def start(self, info: RunStart) -> None: ...
    def step(self, step: int) -> None: ...
    def eval(self, record: RunRecord) -> None: ...
    def checkpoint(self, step: int, path: Path) -> None: ...
    def note(self, message: str) -> None: ...
    def warn(self, message: str, again: bool = False) -> None:
        """A warning, on its own line (never inside a live display); ``again``: it explains why the run is slower
        than it should be, so the command says it again after its summary."""

    def finish(self) -> None: ...


class QuietReporter:
    interactive = False

    def phase(self, name: str, detail: str = "") -> None:
        pass

    def start(self, info: RunStart) -> None:
        pass

    def step(self, step: int) -> None:
        pass

    def eval(self, record: RunRecord) -> None:
        pass

    def checkpoint(self, step: int, path: Path) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def warn(self, message: str, again: bool = False) -> None:
        pass

    def finish(self) -> None:
        pass


class Segments(Protocol):
    """How ``verify-resume`` shows its runs: each segment in a child process, and each line it says."""

    def begin(self, label: str, start: int, until: int) -> None: ...
    def line(self, label: str, text: str) -> None: ...
    def end(self, label: str) -> None: ...


class QuietSegments:
    def begin(self, label: str, start: int, until: int) -> None:
        pass

    def line(self, label: str, text: str) -> None:
        pass

    def end(self, label: str) -> None:
        pass


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun in the number the count asks for, thousands separated: ``1 thread``, ``2 threads``,
    ``1 process`` and ``3 processes`` (``plural``: where adding ``s`` is not it), ``1,024 blocks``. The one way octlm
    says how many of something there are, so that no message says ``1 threads`` or ``trial(s)``."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
