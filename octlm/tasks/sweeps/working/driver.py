"""``octlm work --ray ADDRESS``: a sweep's trials trained on a Ray cluster, the home's registry still the one source
of truth. The driver runs on the box that holds the home and is the only process that opens ``registry.db``.

- It claims trials through the queue as any worker does (``Registry.claim``, under its own pid: a dead driver's
  claims are taken back by ``work`` or ``doctor --repair``, as a dead worker's), as many as the cluster has room for
  (``Cluster.capacity``: its CPUs over ``--threads``), packs each trial (``remote.pack_of``: its newest checkpoint)
  and submits it as a Ray task (``remote.train_trial``).
- Checkpoints come back as the trial trains (``remote.Relay``: each one packed on its node and put in the driver's
  mailbox), and the driver unpacks each into the home with the code ``unpack`` uses (``packing.unpack``, a run still
  training there brought up to date by each), keeping them by the keeper's rule (``keeper.retained``). The trial's
  last pack is merged the same way when its task ends, and its claim settled as a worker settles one
  (``trials.record_done``: halving's decisions, a sampler that asks topped up).
- A task lost with its node (any error of Ray's own) is submitted again (``MAX_TRIES`` in all), packed from the
  newest checkpoint the driver holds: the trial resumes there, exactly. A checkpoint from an earlier try of a trial
  that arrives late is dropped, with a line; so is one the driver holds already.
- SIGTERM, SIGINT or SIGHUP: no more trials are submitted, the running ones are told to checkpoint and stop
  (``Cluster.halt``), their packs merged and their claims released (queued again, as ``work`` leaves them), and the
  driver exits 143 (130, 129).
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.core import layout
from octlm.core.errors import BeingTrained, Interrupted
from octlm.core.home import Home
from octlm.core.liveness import start_time
from octlm.core.reporting import counted
from octlm.core.signals import SIGNAL_EXIT, handling
from octlm.store.registry import Registry
from octlm.store.sweeps.records import ClaimedTrial, Worker
from octlm.tasks.sweeps.working import inflight, remote, trials, worker
from octlm.tasks.sweeps.working.cluster import Cluster, Ended
from octlm.tasks.sweeps.working.stopping import hold
from octlm.tasks.sweeps.working.trial_log import Tally, TrialLog

POLL_S = 0.25
MAX_TRIES = 3  # a trial's tasks lost in a row before it is marked failed
STOP_WAIT_S = 300.0  # how long a stopped driver waits for its tasks' last checkpoints
Say = Callable[[str], None]
Show = Callable[[list[inflight.Flight]], None]  # the live view, given the trials in flight at each turn


def _unseen(flights: list[inflight.Flight]) -> None:
    pass


@dataclass(frozen=True)
class RayOptions:
    sweeps: tuple[str, ...] = ()  # names; none: every sweep of the home
    address: str = "local"  # HOST:PORT, ``auto`` (RAY_ADDRESS, else the Ray running here) or ``local`` (``cpus``)
    threads: int = 1  # each trial's threads, and the CPUs its task asks Ray for
    until_empty: bool = False
    cpus: int = 1


@dataclass
class Driver:
    """One ``work --ray`` call: its home, options, cluster, identity, the trials in flight and what it did."""

    home: Home
    options: RayOptions
    cluster: Cluster
    say: Say
    tally: Tally
    show: Show = _unseen
    flights: dict[int, inflight.Flight] = field(default_factory=dict)  # by claim id
    busy: set[int] = field(default_factory=set)
    shipped: inflight.Traffic = field(default_factory=inflight.Traffic)
    signum: int = 0

    @property
    def identity(self) -> Worker:
        pid = os.getpid()
        threads = self.options.threads
        return {
            "host": socket.gethostname(),
            "pid": pid,
            "pid_start": start_time(pid),
            "threads": threads,
            "device": "ray",
        }


def work(home: Home, options: RayOptions, say: Say, tally: Tally, show: Show = _unseen) -> Tally:
    """Train the queue's trials on Ray until the queue is empty (``until_empty``) or a signal stops the driver
    (``Interrupted``, once the running trials have checkpointed and been queued again); ``show`` is given the trials
    in flight at each turn (the live view: their node, step and ETA)."""
    with Registry(home.registry, create=False) as registry:  # an unknown sweep said before Ray starts
        worker.sweep_ids(registry, options.sweeps)
    cluster = Cluster.connect(options.address, options.cpus)
    driver = Driver(home, options, cluster, say, tally, show)
    tally.workers = cluster.capacity(options.threads)
    each = counted(options.threads, "thread")
    say(f"work: on Ray at {cluster.address}: {counted(tally.workers, 'trial')} at once, {each} each")

    def received(signum: int, frame: Any) -> None:
        hold()  # once stopping, the same signal again changes nothing
        driver.signum = driver.signum or signum

    try:
        with handling(received):
            _loop(driver)
        if driver.signum:
            _stop(driver)
    finally:
        if driver.shipped.count:
            say(driver.shipped.said())
        _release(driver)
        cluster.close()
    return tally


def _loop(driver: Driver) -> None:
    idle = False
    while not driver.signum:
        try:
            _fill(driver)
            if driver.flights:
                idle = False
                _turn(driver, POLL_S)
                continue
        except Interrupted as error:  # a signal while a pack was unpacked (``stopping_at_once``): the same stop
            driver.signum = driver.signum or error.exit_code - 128
            return
        driver.show([])  # nothing in flight: the view says so, rather than the last trial still training
        waiting = worker.waiting(driver.home, worker.Options(driver.options.sweeps), driver.say)
        if not waiting and driver.options.until_empty:
            return
        if not idle:
            driver.say("work: no trial to claim now; waiting for one (SIGTERM or Ctrl-C stops)")
        idle = True
        time.sleep(POLL_S)
        driver.busy.clear()  # a trial another process held may be free now


def _fill(driver: Driver) -> None:
    """Claim and submit trials while the cluster has room for them."""
    while not driver.signum and len(driver.flights) < driver.cluster.capacity(driver.options.threads):
        with Registry(driver.home.registry) as registry:
            ids = worker.sweep_ids(registry, driver.options.sweeps)
            trial = registry.claim(ids, driver.identity, skip=driver.busy | {f.trial["id"] for f in _all(driver)})
        if trial is None:
            return
        began = time.perf_counter()
        try:
            driver.flights[trial["claim_id"]] = _launch(driver, trial, 1)
        except Interrupted:
            trials.settle(driver.home, trial, "queued")
            raise
        except BeingTrained:  # another process holds the experiment: passed over, queued again
            driver.busy.add(trial["id"])
            trials.settle(driver.home, trial, "busy")
        except Exception as error:  # the trial fails (its sweep damaged, its pack refused), not the driver
            trials.record_failed(driver.home, trial, error, _log(driver, trial), driver.say, driver.tally)
        driver.tally.overhead_s += time.perf_counter() - began


def _all(driver: Driver) -> list[inflight.Flight]:
    return list(driver.flights.values())


def _launch(driver: Driver, trial: ClaimedTrial, attempt: int) -> inflight.Flight:
    """The trial packed from the home (its newest checkpoint) and submitted as a Ray task."""
    home, experiment_id = driver.home, trial["experiment_id"]
    metric = trials.metric_of(home, trial)  # its sweep's spec read (and checked) before anything is submitted
    with tempfile.TemporaryDirectory(prefix="octlm-ray-") as folder:
        data = remote.pack_of(home, experiment_id, Path(folder))
    root = os.environ.get("OCTLM_DATA_ROOT") or str(home.root)
    job = remote.Job(
        experiment_id, trial["claim_id"], attempt, trial["target_step"], metric, driver.options.threads, root, data
    )
    newest = layout.checkpoints(home.checkpoint_dir(experiment_id))
    step = newest[-1][0] if newest else 0
    if attempt == 1:
        driver.say(f"{experiment_id}: claimed (step {trial['target_step']}), submitted to Ray at step {step}")
    return inflight.Flight(trial, job, driver.cluster.submit(job), time.perf_counter(), step=step)


def _turn(driver: Driver, timeout: float) -> None:
    """Wait up to ``timeout`` for a task to end; merge the checkpoints shipped meanwhile, then each task's end."""
    ready = driver.cluster.ready([flight.ref for flight in _all(driver)], timeout)
    shipped, heard = driver.cluster.take()  # after ``ready``: a task's checkpoints were put before it ended
    for claim_id, (attempt, node, step) in heard.items():
        flight = driver.flights.get(claim_id)
        if flight is not None and flight.job.attempt == attempt:  # not what a lost try said last
            if flight.seen is None:
                driver.say(f"{flight.job.experiment_id}: training on node {node} (step {step}, try {attempt})")
            flight.heard(node, step)
    for item in shipped:
        merged = inflight.arrived(driver.home, driver.flights, item, driver.shipped, driver.say, driver.tally)
        driver.tally.overhead_s += merged
    driver.show(_all(driver))
    for ref in ready:
        flight = next((f for f in _all(driver) if f.ref == ref), None)
        if flight is not None:
            _ended(driver, flight, driver.cluster.ended(ref))


def _ended(driver: Driver, flight: inflight.Flight, ended: Ended) -> None:
    """A task's end: lost (submitted again, or failed after ``MAX_TRIES``), or its outcome merged and its claim
    settled: done, stopped (queued again) or failed."""
    trial, experiment_id = flight.trial, flight.job.experiment_id
    driver.flights.pop(trial["claim_id"], None)
    driver.tally.trained_s += time.perf_counter() - flight.began
    outcome, log = ended.outcome, _log(driver, trial)
    if outcome is None:
        return _lost(driver, flight, ended.lost or "lost", log)
    for line in outcome.log:
        log.tail.append(line)
    inflight.append_log(log.path, outcome.log)
    try:
        if outcome.pack is not None:
            inflight.merge_back(driver.home, experiment_id, outcome.pack)
    except Interrupted:
        raise
    except Exception as error:  # what came back cannot be merged: the trial fails, and the driver goes on
        return trials.record_failed(driver.home, trial, error, log, driver.say, driver.tally)
    if outcome.status == "done":
        return trials.record_done(driver.home, trial, outcome.value, log, driver.say, driver.tally)
    if outcome.status == "stopped":
        trials.settle(driver.home, trial, "queued")
        held = layout.checkpoints(driver.home.checkpoint_dir(experiment_id))
        driver.tally.saw("stopped", experiment_id, outcome.node, outcome.attempt, step=held[-1][0] if held else 0)
        driver.say(f"{experiment_id}: stopped on node {outcome.node}; its claim is released and it resumes later")
        return None
    return trials.record_failed(driver.home, trial, RuntimeError(outcome.error), log, driver.say, driver.tally)


def _lost(driver: Driver, flight: inflight.Flight, reason: str, log: TrialLog) -> None:
    """A task Ray lost (its node died, its worker crashed): the trial submitted again from the newest checkpoint the
    driver holds, or failed after ``MAX_TRIES`` tries."""
    experiment_id, attempt = flight.job.experiment_id, flight.job.attempt + 1
    where = f" on node {flight.node}" if flight.node else ""
    driver.tally.saw("lost", experiment_id, flight.node, flight.job.attempt, step=flight.step, reason=reason)
    if attempt > MAX_TRIES or driver.signum:
        if driver.signum:
            trials.settle(driver.home, flight.trial, "queued")
            return None
        error = RuntimeError(f"its task was lost {MAX_TRIES} times, the last{where}: {reason}")
        return trials.record_failed(driver.home, flight.trial, error, log, driver.say, driver.tally)
    log.line(f"its task was lost{where}: {reason}; submitted again (try {attempt} of {MAX_TRIES})")
    try:
        resumed = _launch(driver, flight.trial, attempt)
    except Interrupted:
        trials.settle(driver.home, flight.trial, "queued")
        raise
    except Exception as error:  # it cannot be packed again (its sweep damaged meanwhile): the trial fails
        return trials.record_failed(driver.home, flight.trial, error, log, driver.say, driver.tally)
    driver.flights[flight.trial["claim_id"]] = resumed
    driver.tally.saw("resubmitted", experiment_id, attempt=attempt, step=resumed.step)
    driver.say(
        f"{experiment_id}: its task{where} was lost ({reason}): submitted again, resuming at step {resumed.step} "
        f"(try {attempt} of {MAX_TRIES})"
    )
    return None


def _log(driver: Driver, trial: ClaimedTrial) -> TrialLog:
    return TrialLog(driver.home.runs / f"{trial['experiment_id']}.log", trial["experiment_id"], driver.say)


def _stop(driver: Driver) -> None:
    """On a signal: the running trials told to checkpoint and stop, their packs merged and their claims released as
    they end (``STOP_WAIT_S`` at most), then ``Interrupted``."""
    name = signal.Signals(driver.signum).name
    driver.tally.status = "interrupted"
    driver.tally.saw("halted", None, reason=name)
    if driver.flights:
        driver.say(f"work: stopped by {name}: the {len(driver.flights)} running trials checkpoint and are queued again")
        driver.cluster.halt()
    deadline = time.monotonic() + STOP_WAIT_S
    while driver.flights and time.monotonic() < deadline:
        _turn(driver, POLL_S)
    running = ", ".join(f.job.experiment_id for f in _all(driver))
    more = f"; {running} queued again" if running else ""
    raise Interrupted(
        f"stopped by {name}{more}: the next `octlm work` on the sweep continues each trial from its newest checkpoint",
        SIGNAL_EXIT[signal.Signals(driver.signum)],
    )


def _release(driver: Driver) -> None:
    """The claims still held (trials whose tasks did not answer in time, or the driver failing): released, each
    queued again to resume from the newest checkpoint the home holds."""
    for flight in _all(driver):
        trials.settle(driver.home, flight.trial, "queued")
    driver.flights.clear()
