"""A sweep's trial on a Ray node (``octlm work --ray``; the driver is ``driver``): what a Ray task runs
(``train_trial``) and the mailbox its checkpoints travel to the driver through (``Mailbox``). Ray is imported only
inside these functions, on the ``--ray`` path.

- The task is given the trial's pack (``Job``), built by the driver from its home (its newest checkpoint, if any).
  It unpacks it into a scratch home of its own on the node (a temporary folder, removed at the end: no registry is
  shared, and only the driver opens the home's), pins the trial's determinism tier and octlm's own thread count
  before torch loads (Ray sets ``OMP_NUM_THREADS`` to the task's CPUs, or 1: a tier must not inherit that silently;
  the task is a fresh process, ``max_calls=1``), and resumes the trial to its target step as ``work`` does
  (``trials.train_to``), relative ``data.sources`` read from the driver's data root (the same path on every node),
  the token files cached in a folder the node's trials share (``node_cache``, unless ``OCTLM_CACHE_DIR`` names one).
- Each checkpoint, as the keeper writes it, is packed (``packing.pack``, the lock being the run's own) and put in
  the driver's mailbox (an actor on the driver's node, ``Shipment``) before the next step: a node lost after that
  leaves the driver holding the checkpoint, and the trial resumes from it elsewhere.
- The mailbox also says when the driver stops (SIGTERM, SIGINT): the task then sends itself SIGTERM, so that its
  session checkpoints at the next step and stops, as a worker's trial does on a signal.
- What it returns (``Outcome``): the trial's last pack, its metric's value, its log's lines, or why it failed.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.core.errors import Interrupted
from octlm.core.home import CACHE_VARIABLE, Home
from octlm.exchange import packing
from octlm.tasks.sweeps.working.trial_log import TrialLog

PROGRESS_S = 1.0  # how often a task tells the driver its step (and asks whether to stop)
LOG_LINES = 1000  # the lines of its log a task hands back, appended to the driver's ``runs/<ID>.log``
Heard = tuple[int, str, int]  # what a task said last: its try, its node and its step


@dataclass(frozen=True)
class Job:
    """What the driver gives a task: the trial, which claim and attempt it is, the metric, octlm's thread count, the
    driver's data root, and the trial's pack."""

    experiment_id: str
    claim_id: int
    attempt: int
    target_step: int
    metric: str
    threads: int
    data_root: str
    pack: bytes


@dataclass(frozen=True)
class Shipment:
    """A checkpoint on its way to the driver: whose (claim and attempt), where it was made, its step, its pack and
    what packing it cost the task (seconds)."""

    experiment_id: str
    claim_id: int
    attempt: int
    node: str
    step: int
    pack: bytes
    seconds: float


@dataclass(frozen=True)
class Outcome:
    """How a task ended: ``done`` (trained to its target), ``stopped`` (the driver stopped; checkpointed), or
    ``failed`` (``error``); its last pack (None when it failed before one could be made), its value and log."""

    experiment_id: str
    claim_id: int
    attempt: int
    node: str
    status: str
    pack: bytes | None
    value: float | None = None
    error: str | None = None
    log: list[str] = field(default_factory=list)


class Mailbox:
    """The driver's mailbox, a Ray actor on the driver's node (``cluster``): checkpoints put by the tasks and taken
    by the driver, each task's newest step, and the driver's word to stop."""

    def __init__(self) -> None:
        self.items: list[Shipment] = []
        self.steps: dict[int, Heard] = {}  # claim id -> its newest try's (attempt, node, step)
        self.stop = False

    def put(self, item: Shipment) -> bool:
        self.items.append(item)
        self.progress(item.claim_id, item.attempt, item.node, item.step)
        return self.stop

    def progress(self, claim_id: int, attempt: int, node: str, step: int) -> bool:
        if attempt >= self.steps.get(claim_id, (0, "", 0))[0]:  # a lost try's last words never hide the next's
            self.steps[claim_id] = (attempt, node, step)
        return self.stop

    def take(self) -> tuple[list[Shipment], dict[int, Heard]]:
        items, self.items = self.items, []
        return items, dict(self.steps)

    def halt(self) -> None:
        self.stop = True


def node_name() -> str:
    """This node as the driver's lines name it: its host and the first 8 digits of its Ray node id."""
    import ray

    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


class CheckpointRelay(TrialLog):
    """The trial's reporter on the node: its log (``TrialLog``, in the scratch home), each checkpoint shipped to the
    driver's mailbox as it is written, its step told every ``PROGRESS_S``, and a stop the driver asked for turned
    into this process's own SIGTERM (the session then checkpoints and stops)."""

    def __init__(self, home: Home, job: Job, mailbox: Any, node: str, spare: Path):
        super().__init__(home.runs / f"{job.experiment_id}.log", job.experiment_id, lambda _: None)
        self.home, self.job, self.mailbox, self.node, self.spare = home, job, mailbox, node, spare
        self.told, self.stopping = 0.0, False

    def step(self, step: int) -> None:
        import ray

        if time.monotonic() - self.told >= PROGRESS_S:
            self.told = time.monotonic()
            job = self.job
            self._stop_if(ray.get(self.mailbox.progress.remote(job.claim_id, job.attempt, self.node, step)))

    def checkpoint(self, step: int, path: Path) -> None:
        import ray

        super().checkpoint(step, path)
        began = time.perf_counter()
        data = pack_of(self.home, self.job.experiment_id, self.spare, held=True)
        job, spent = self.job, time.perf_counter() - began
        item = Shipment(job.experiment_id, job.claim_id, job.attempt, self.node, step, data, spent)
        self._stop_if(ray.get(self.mailbox.put.remote(item)))

    def _stop_if(self, stop: bool) -> None:
        if stop and not self.stopping:
            self.stopping = True
            os.kill(os.getpid(), signal.SIGTERM)  # the session's own stop: a checkpoint at the next step


def node_cache() -> Path | None:
    """The token cache the trials on this node share (``OCTLM_CACHE_DIR``, which the scratch homes read): a folder of
    this user's alone in the node's temporary folder, made private; None when something else holds its name."""
    folder = Path(tempfile.gettempdir()) / f"octlm-ray-cache-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = folder.lstat()
    except OSError:
        return None
    mine = stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077
    return folder if mine else None


def pack_of(home: Home, experiment_id: str, folder: Path, held: bool = False) -> bytes:
    """The experiment's pack (its newest checkpoint) as bytes, written in ``folder`` and removed."""
    path = folder / f"{experiment_id}.tar"
    packing.pack(home, experiment_id, path, own_name=True, held=held)
    try:
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def train_trial(job: Job, mailbox: Any) -> Outcome:
    """A Ray task's body: the trial unpacked into a scratch home, trained to its target (checkpoints shipped as they
    are written), packed back; see the module."""
    os.environ["OMP_NUM_THREADS"] = str(job.threads)  # octlm's own count, not Ray's, before torch loads
    os.environ["OCTLM_DATA_ROOT"] = job.data_root
    if not os.environ.get(CACHE_VARIABLE) and (cache := node_cache()) is not None:
        os.environ[CACHE_VARIABLE] = str(cache)  # the node's trials tokenize their data once, not once each
    node = node_name()
    with tempfile.TemporaryDirectory(prefix="octlm-ray-") as scratch:
        home, spare = Home(Path(scratch) / "home"), Path(scratch)
        log = CheckpointRelay(home, job, mailbox, node, spare)
        status, value, error = "done", None, None
        try:
            value = _train(home, job, log, spare)
        except Interrupted:
            status = "stopped"
        except Exception as failure:  # the trial fails, not the driver: said with its log's tail
            status, error = "failed", str(failure) or type(failure).__name__
        pack = None
        if home.checkpoint_dir(job.experiment_id).is_dir():
            try:
                pack = pack_of(home, job.experiment_id, spare)
            except Exception as failure:  # noqa: BLE001 - said as the trial's failure
                status, error = "failed", error or f"its end could not be packed: {failure}"
        lines = log.path.read_text("utf-8", "replace").splitlines()[-LOG_LINES:] if log.path.is_file() else []
        return Outcome(job.experiment_id, job.claim_id, job.attempt, node, status, pack, value, error, lines)


def _train(home: Home, job: Job, log: CheckpointRelay, spare: Path) -> float | None:
    """Unpack the driver's pack, pin the trial's tier and threads, train it to its target; its metric's value."""
    from octlm.runtime import determinism
    from octlm.store import experiments

    source = spare / "driver.tar"
    source.write_bytes(job.pack)
    packing.unpack(home, source, allow_outside_sources=True)
    source.unlink()
    determinism.pin(experiments.load(home, job.experiment_id))
    import torch

    from octlm.tasks.sweeps.working import trials

    torch.set_num_threads(job.threads)
    return trials.train_to(home, job.experiment_id, job.target_step, job.metric, log)
