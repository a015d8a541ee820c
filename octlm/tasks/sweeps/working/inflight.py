"""The trials a Ray driver has in flight (``driver``; ``Flight``: which claim, which try, where, the newest
checkpoint the driver holds) and what comes back of them: each checkpoint a task ships (``arrived``) and each task's
last pack merged into the home with the code ``unpack`` uses (``merge_back``: ``packing.unpack``, a run still
training on its node brought up to date by each), the home keeping its checkpoints by the keeper's rule
(``keeper.retained``, so that it holds what a ``work`` run leaves); the task's log appended to the trial's
(``append_log``); and what the shipping cost (``Traffic``). A checkpoint from an earlier try of a trial (its task lost
and submitted again), or of a step the driver holds already, is dropped with a line (and an event of ``--json``'s).
Each flight also keeps the step its task said last and the rate since the first, for the live view (``Flight.eta_s``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.core import layout
from octlm.core.home import Home
from octlm.exchange import packing
from octlm.store import experiments
from octlm.store.locking import ExperimentLock
from octlm.store.registry import Registry
from octlm.store.sweeps.records import ClaimedTrial
from octlm.tasks.sweeps.upkeep import shipping
from octlm.tasks.sweeps.working import remote
from octlm.tasks.sweeps.working.trial_log import Tally

Say = Callable[[str], None]


@dataclass
class Flight:
    """A trial the driver has submitted: its claim, the try it is on, where it trains and the newest checkpoint the
    driver holds of it."""

    trial: ClaimedTrial
    job: remote.Job
    ref: Any
    began: float
    node: str = ""
    step: int = 0
    live: int = 0  # the step its task said last (``remote.PROGRESS_S``), for the live view
    seen: tuple[float, int] | None = None  # when its task first said a step, and which

    def heard(self, node: str, step: int) -> None:
        """What its task said last: its node and step (the first step heard starts the clock of ``eta_s``)."""
        self.node, self.live = node, max(step, self.live)
        if self.seen is None:
            self.seen = (time.monotonic(), step)

    def eta_s(self) -> float | None:
        """The seconds left to its target at the rate its steps came since the first one heard; None before two."""
        if self.seen is None or self.live <= self.seen[1]:
            return None
        rate = (self.live - self.seen[1]) / max(time.monotonic() - self.seen[0], 1e-6)
        return max(self.job.target_step - self.live, 0) / rate


@dataclass
class Traffic:
    """The checkpoints shipped back to the driver in this call: how many, their bytes, and the seconds spent packing
    them on the nodes and merging them here."""

    count: int = 0
    bytes: int = 0
    packed_s: float = 0.0
    merged_s: float = 0.0

    def said(self) -> str:
        each = max(self.count, 1)
        return (
            f"work: {self.count} checkpoints shipped to the driver, {self.bytes / each / 1e3:.0f} kB each: packed in "
            f"{self.packed_s / each:.3f} s on its node, merged here in {self.merged_s / each:.3f} s"
        )


def arrived(
    home: Home, flying: dict[int, Flight], item: remote.Shipment, traffic: Traffic, say: Say, tally: Tally
) -> float:
    """A checkpoint shipped by a task: merged into the home, unless it comes from an earlier try or the driver holds
    it already (dropped, with a line and a ``dropped`` event). The seconds merging it took."""
    flight = flying.get(item.claim_id)
    if flight is None or flight.job.attempt != item.attempt or item.step <= flight.step:
        why = "an earlier try of the trial" if flight is None or flight.job.attempt != item.attempt else "a step held"
        say(f"{item.experiment_id}: a checkpoint of step {item.step} from {item.node} came late ({why}): dropped")
        tally.saw("dropped", item.experiment_id, item.node, item.attempt, step=item.step, reason=why)
        return 0.0
    began = time.perf_counter()
    merge_back(home, item.experiment_id, item.pack)
    spent = time.perf_counter() - began
    flight.step, flight.node = item.step, item.node
    traffic.count += 1
    traffic.bytes += len(item.pack)
    traffic.packed_s += item.seconds
    traffic.merged_s += spent
    say(f"{item.experiment_id}: step {item.step} on node {item.node}, its checkpoint held by the driver")
    return spent


def merge_back(home: Home, experiment_id: str, data: bytes) -> None:
    """A pack from a node unpacked into the home (``packing.unpack``, as ``unpack`` does), then the experiment's
    checkpoints kept by the keeper's rule."""
    from octlm.run.keeper import retained

    with tempfile.TemporaryDirectory(prefix="octlm-ray-") as folder:
        path = Path(folder) / f"{experiment_id}.tar"
        path.write_bytes(data)
        packing.unpack(home, path, hint="the trial came back under its own ID", same=shipping.same_state)
    config = experiments.load(home, experiment_id)
    with ExperimentLock(home.lock_path(experiment_id), experiment_id), Registry(home.registry) as registry:
        found = layout.checkpoints(home.checkpoint_dir(experiment_id))
        keep = retained([step for step, _ in found], config)
        for step, path in found:
            if step not in keep:
                registry.remove_checkpoint(str(path.relative_to(home.root)))
                layout.remove(path)


def append_log(path: Path, lines: list[str]) -> None:
    """A task's log lines (stamped on its node) appended to the trial's log in the home (``runs/<ID>.log``)."""
    if lines:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
