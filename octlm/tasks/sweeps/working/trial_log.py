"""What a worker keeps of its trials (torch-free): each trial's log (``TrialLog``: ``runs/<ID>.log``, the last lines
kept for a failure) and the worker's tally of what it did (``Tally``), carried across a fresh start of the worker
(``TALLY_VARIABLE``: ``worker.restart``)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from octlm.core.errors import OK, TRIAL_FAILED
from octlm.core.records import RunRecord
from octlm.core.reporting import RunStart

TAIL_LINES = 20
Say = Callable[[str], None]
TALLY_VARIABLE = "OCTLM_WORK_TALLY"  # what a worker did before it started afresh (``restart``)


@dataclass
class Tally:
    """What a worker did (or a pool's workers, added up: ``total``): trials by outcome, the seconds spent outside
    training (claim, start, record) and in it, how the work ended (``empty``: no trial left to take; ``interrupted``:
    stopped by a signal) and by how many workers."""

    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    overhead_s: float = 0.0
    trained_s: float = 0.0
    status: str = "empty"
    workers: int = 1
    events: list[RayEvent] | None = None  # ``work --ray``: what the Ray path saw, in order (None elsewhere)

    @classmethod
    def resumed(cls) -> Tally:
        """A new tally, or the one a worker carried over when it started afresh (``restart``)."""
        carried = os.environ.pop(TALLY_VARIABLE, None)
        try:
            found = json.loads(carried) if carried else {}
        except ValueError:
            found = {}
        return cls(list(found.get("done", [])), list(found.get("failed", [])))

    @classmethod
    def total(cls, tallies: list[TallyJson]) -> Tally:
        """The tallies of a pool's workers as one: trials in the workers' order, seconds added up, ``interrupted``
        when any worker was."""
        interrupted = any(part["status"] == "interrupted" for part in tallies)
        return cls(
            [i for part in tallies for i in part["done"]],
            [i for part in tallies for i in part["failed"]],
            sum(part["overhead_s"] for part in tallies),
            sum(part["trained_s"] for part in tallies),
            "interrupted" if interrupted else "empty",
            sum(part["workers"] for part in tallies),
        )

    @property
    def exit_code(self) -> int:
        """``TRIAL_FAILED`` when a trial failed in this call (a script must not read the call as a success), else 0."""
        return TRIAL_FAILED if self.failed else OK

    def as_json(self) -> TallyJson:
        document: TallyJson = {
            "done": self.done,
            "failed": self.failed,
            "overhead_s": round(self.overhead_s, 3),
            "trained_s": round(self.trained_s, 3),
            "status": self.status,
            "workers": self.workers,
        }
        if self.events is not None:
            document["events"] = self.events
        return document

    def saw(self, event: str, trial: str | None, node: str = "", attempt: int | None = None, **more: object) -> None:
        """One event of the Ray path (``RayEvent``), stamped now; ``more``: its ``step`` and ``reason``."""
        if self.events is not None:
            step, reason = more.get("step"), more.get("reason")
            self.events.append(
                {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "event": event,
                    "trial": trial,
                    "node": node or None,
                    "attempt": attempt,
                    "step": step if isinstance(step, int) else None,
                    "reason": str(reason) if reason is not None else None,
                }
            )


class TallyJson(TypedDict):
    """What ``octlm work --json`` writes (one document, with ``--workers N`` too: every worker's added up): the
    trials done and failed in this call, the time spent training and around it, how the work ended (``empty``: no
    trial left to take; ``interrupted``: stopped by a signal, the running trials checkpointed and queued again) and
    by how many workers (with ``--ray``: how many trials the cluster trains at once). A failed trial makes the exit
    code 5. With ``--ray`` only: ``events``, what the Ray path saw, in order (each below)."""

    done: list[str]
    failed: list[str]
    overhead_s: float
    trained_s: float
    status: str
    workers: int
    events: NotRequired[list[RayEvent]]


class RayEvent(TypedDict):
    """One event of ``octlm work --ray``, as the driver saw it (``time``: ISO 8601, local). ``event``: ``lost`` (a
    trial's task lost with its node or its worker: ``node``, the try lost as ``attempt``, the newest checkpoint the
    driver holds of it as ``step``, Ray's error as ``reason``; when it was the last try the trial is in ``failed``),
    ``resubmitted`` (submitted again: the new try as ``attempt``, the checkpoint step it resumes from as ``step``),
    ``dropped`` (a checkpoint that came late, from an earlier try or of a step the driver holds: its ``step``,
    ``node``, ``attempt``, and why as ``reason``), ``stopped`` (a trial that checkpointed on its node at ``step``
    because the driver stopped, queued again) or ``halted`` (the driver stopped by a signal, named in ``reason``;
    ``trial`` null). A key that does not apply is null."""

    time: str
    event: str
    trial: str | None
    node: str | None
    attempt: int | None
    step: int | None
    reason: str | None


class TrialLog:
    """The reporter of a trial: timestamped lines to ``runs/<ID>.log`` (appended), the last ones kept for a failure,
    and each evaluation said on the worker's stderr."""

    interactive = False

    def __init__(self, path: Path, experiment_id: str, say: Say):
        self.path, self.id, self.say = path, experiment_id, say
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        path.parent.mkdir(parents=True, exist_ok=True)

    def line(self, text: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {text}"
        self.tail.append(stamped)
        with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as handle:
            handle.write(stamped + "\n")

    def phase(self, name: str, detail: str = "") -> None:
        if detail:
            self.line(f"{name}: {detail}")

    def start(self, info: RunStart) -> None:
        self.line(f"{info['kind']} {info['id']}: steps {info['start']} -> {info['until']} on {info['device']}")

    def step(self, step: int) -> None:
        pass

    def eval(self, record: RunRecord) -> None:
        losses = f"train loss {record.get('train_loss', 0):.4f}, eval loss {record.get('eval_loss', 0):.4f}"
        text = f"step {record.get('step')}: {losses}"
        self.line(text)
        self.say(f"{self.id} {text}")

    def checkpoint(self, step: int, path: Path) -> None:
        self.line(f"checkpoint {path.name}")

    def note(self, message: str) -> None:
        self.line(message)

    def warn(self, message: str, again: bool = False) -> None:
        self.line(f"warning: {message}")

    def finish(self) -> None:
        pass
