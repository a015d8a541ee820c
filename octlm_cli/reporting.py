"""How a run tells the user what happens: the ``Reporter`` protocol that the CLI implements.

Use cases and sessions report through it and never print; ``QuietReporter`` says nothing. A reporter
never raises because its output cannot be delivered (a closed pipe, a hung-up terminal): it falls
silent, and the run it reports on goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Reporter(Protocol):
    def start(self, info: dict[str, Any]) -> None: ...
    def step(self, step: int) -> None: ...
    def eval(self, record: dict[str, Any]) -> None: ...
    def checkpoint(self, step: int, path: Path) -> None: ...
    def note(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def finish(self) -> None: ...


class QuietReporter:
    def start(self, info: dict[str, Any]) -> None:
        pass

    def step(self, step: int) -> None:
        pass

    def eval(self, record: dict[str, Any]) -> None:
        pass

    def checkpoint(self, step: int, path: Path) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def finish(self) -> None:
        pass
