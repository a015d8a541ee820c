"""``octlm work``: one worker of the durable queue. It claims the next trial in the registry, trains it in this
process as ``resume`` would (``runner.resume``, to the trial's rung with ``--until`` semantics), records how it
ended, and claims the next. Torch is imported when the first trial trains.

- A killed worker's claim is taken over by the next worker that looks (``Registry.claim``: the claim's pid is
  gone on this host), and its trial resumes from its newest checkpoint, exactly.
- A trial that fails (bad data, a diverged run, any error) is marked failed with its message and the last lines
  of its log (``runs/<ID>.log``); the worker goes on with the next.
- SIGTERM (SIGINT, SIGHUP): a trial in training checkpoints at its next step and stops, its claim released
  (queued again, to resume later); an idle worker stops at once. Either way exit 143 (130, 129).
- ``until_empty``: stop once no trial of its sweeps is queued or running (it waits while other workers' trials
  run: halving may promote them; a trial claimed on another host is said once and not waited for); otherwise wait
  for new trials until stopped.
- A worker takes only trials it can run: once torch is loaded under one determinism tier, or a tier's pins or
  library are in the process, a trial of another (``local`` too) is left queued (``deferred``), and when nothing
  else is left the worker starts afresh in its own process (``exec``), where it pins the other tier (``restart``).
- Said as it happens: a trial taken over from a lost worker ("resuming at step N"); on a signal, what became of the
  trial (queued again, for the queue to continue; not ``octlm resume``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from octlm.core import layout
from octlm.core.errors import BadInput, Interrupted, OctlmError, Refused
from octlm.core.home import Home
from octlm.core.liveness import start_time
from octlm.core.reporting import counted
from octlm.core.signals import SIGNAL_EXIT, handled_signals, handling
from octlm.runtime import determinism
from octlm.store import experiments, kept
from octlm.store.registry import Registry
from octlm.store.sweeps.records import ClaimedTrial, Lost, SweepRow, Worker
from octlm.tasks.sweeps import halving, plan, shipping
from octlm.tasks.sweeps.trial_log import TALLY_VARIABLE, Tally, TrialLog

POLL_S = 0.5
Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    sweeps: tuple[str, ...] = ()  # names; none: every sweep of the home
    until_empty: bool = False
    threads: int = 0  # this worker's share of the cores (0: torch's default)
    device: str = "cpu"  # what the pool gave it: "cuda:0" (CUDA_VISIBLE_DEVICES holds one GPU) or "cpu"
    poll: float = POLL_S


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Between trials and before a trial's session takes the signals over: the first SIGTERM (SIGINT, SIGHUP)
    stops the worker at once (``Interrupted``). The stop is also kept (``_STOPPED``): code that caught it on its
    way up (a config read that turns errors into a verdict) cannot make the worker, which now ignores the signals,
    claim and train on; ``stop_if_signalled`` raises it again before every claim and every trial."""

    def stop(signum: int, frame: Any) -> None:
        hold()
        name = signal.Signals(signum).name
        _STOPPED.append(Interrupted(f"stopped by {name}", SIGNAL_EXIT[signal.Signals(signum)]))
        raise _STOPPED[0]

    _STOPPED.clear()
    with handling(stop):
        yield


_STOPPED: list[Interrupted] = []


def stop_if_signalled() -> None:
    """Raise the stop a signal asked for, if one did (see ``stoppable``)."""
    if _STOPPED:
        raise _STOPPED[0]


def hold() -> None:
    """Once stopping, the same signal again (a kill that reached the process twice: a scheduler's and its batch
    shell's) must not cut short the claim's release: the signals are ignored until the worker has left."""
    for signum in handled_signals():
        signal.signal(signum, signal.SIG_IGN)


def work(home: Home, options: Options, say: Say, tally: Tally | None = None) -> Tally:
    """Claim and train trials until the queue is empty (``until_empty``) or a signal stops the worker
    (``Interrupted``); ``tally`` (default: a new one, ``Tally.resumed``) counts them as they end, so that the caller
    still holds what was done when a signal stops the worker."""
    identity, tally = _identity(options), Tally.resumed() if tally is None else tally
    busy, deferred, idle = set[int](), set[int](), False
    with stoppable(), releasing(home, identity):
        while True:
            stop_if_signalled()
            began = time.perf_counter()
            trial = _claim(home, options, identity, busy | deferred)
            if trial is not None and not runnable(home, trial):
                deferred.add(trial["id"])
                if reason := _settle(home, trial, "deferred"):
                    say(f"{trial['experiment_id']}: failed: {reason}")
                continue
            if trial is None:
                if deferred:  # trials of another determinism tier: a fresh process of this worker pins theirs
                    restart(tally, say, deferred)
                if not _waiting(home, options, say) and options.until_empty:
                    return tally
                if not idle:
                    say("work: no trial to claim now; waiting for one (SIGTERM or Ctrl-C stops)")
                idle = True
                time.sleep(options.poll)
                busy.clear()
                continue
            idle = False
            tally.overhead_s += time.perf_counter() - began
            _run(home, trial, say, tally, busy, options.threads)


def runnable(home: Home, trial: ClaimedTrial) -> bool:
    """Whether this process can train the trial: it holds the trial's determinism tier and nothing a tier pinned
    here that the trial's does not (``determinism.foreign``: a ``local`` trial after a ``cross-vendor`` one needs
    a fresh process, without its pins and its library), or can still pin it (torch not loaded yet). A trial whose
    config cannot be read is runnable: training it says what is wrong."""
    try:
        config = experiments.load(home, trial["experiment_id"])
    except Interrupted:
        raise
    except OctlmError:
        return True
    if determinism.foreign(config):
        return False
    if not determinism.unpinned(config.training.determinism, config.training.micro_batches > 0):
        return True
    if "torch" in sys.modules:
        return False
    determinism.pin(config)
    return True


def restart(tally: Tally, say: Say, deferred: set[int]) -> None:
    """Start this worker afresh in the same process (``exec``), its own pinned settings dropped, so that it can pin
    the tier of the trials it left queued; what it did so far goes along (``Tally.resumed``)."""
    queued = counted(len(deferred), "queued trial")
    need = "needs" if len(deferred) == 1 else "need"
    say(f"work: {queued} {need} another determinism tier than this process holds: starting afresh")
    for variable in determinism.pinned_here():
        os.environ.pop(variable, None)
    os.environ[TALLY_VARIABLE] = json.dumps(tally.as_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


@contextlib.contextmanager
def releasing(home: Home, identity: Worker) -> Iterator[None]:
    """A signal between a claim's commit and its trial's start: the claims this worker still holds are released
    (its trial queued again) before it leaves, as a trial's own stop releases its claim."""
    try:
        yield
    except Interrupted:
        with Registry(home.registry) as registry:
            for claim_id in registry.open_claims(identity["host"], identity["pid"]):
                registry.settle_claim(claim_id, "queued")
        raise


def _identity(options: Options) -> Worker:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start": start_time(pid),
        "threads": options.threads or None,
        "device": options.device,
    }


def sweep_ids(registry: Registry, names: tuple[str, ...]) -> list[int] | None:
    """The ids of the named sweeps (BadInput for an unknown one); None: every sweep."""
    if not names:
        return None
    found = {name: registry.sweep(name) for name in names}
    if missing := [name for name, row in found.items() if row is None]:
        raise BadInput(f"unknown sweep {missing[0]}: create it with `octlm sweep new {missing[0]} --from ID ...`")
    return [row["id"] for row in found.values() if row is not None]


def _claim(home: Home, options: Options, identity: Worker, busy: set[int]) -> ClaimedTrial | None:
    with Registry(home.registry) as registry:
        return registry.claim(sweep_ids(registry, options.sweeps), identity, skip=busy)


def _waiting(home: Home, options: Options, say: Say) -> bool:
    """Whether a trial of the worker's sweeps is queued or running on this host; a trial claimed on another host (a
    copied home, a container restarted under another name) is said once and not waited for, and so is a sweep
    shipped to other homes (``shipping.left_alone``: the queue never hands out its trials)."""
    with Registry(home.registry, create=False) as registry:
        ids = sweep_ids(registry, options.sweeps) or [row["id"] for row in registry.sweeps()]
        away = shipping.left_alone([row for row in registry.sweeps() if row["id"] in ids], say)
        trials = [
            t
            for i in ids
            for t in registry.trials(i)
            if t["status"] in ("queued", "running") and t["experiment_id"] not in away
        ]
    here = socket.gethostname()
    foreign = [t for t in trials if t["status"] == "running" and t["host"] not in (None, here)]
    for trial in foreign:
        if trial["id"] not in _FOREIGN_SAID:
            _FOREIGN_SAID.add(trial["id"])
            say(
                f"{trial['experiment_id']} is claimed by host {trial['host']} (another box, or this home copied): not "
                "waited for; `octlm doctor --repair --other-hosts` releases its claim"
            )
    return len(trials) > len(foreign)


_FOREIGN_SAID: set[int] = set()


def _run(home: Home, trial: ClaimedTrial, say: Say, tally: Tally, busy: set[int], threads: int = 0) -> None:
    """Train one claimed trial and settle its claim: done, failed, released (a signal) or busy (locked)."""
    experiment_id = trial["experiment_id"]
    log = TrialLog(home.runs / f"{experiment_id}.log", experiment_id, say)
    say(
        f"{experiment_id}: claimed (step {trial['target_step']}, "
        f"{counted(trial['threads'], 'thread') if trial['threads'] else 'default threads'})"
    )
    if lost := trial["taken_over"]:
        say(_taken_over(home, experiment_id, lost))
    began = time.perf_counter()
    try:
        stop_if_signalled()
        value = train_trial(home, trial, log, threads)
    except Interrupted as error:
        hold()
        _settle(home, trial, "queued")
        say(f"{experiment_id}: stopped; its claim is released and it resumes from its checkpoint later")
        raise _requeued(experiment_id, error) from None
    except Refused as error:
        if "already being trained" not in str(error):
            return _failed(home, trial, error, log, say, tally)
        busy.add(trial["id"])
        if reason := _settle(home, trial, "busy"):
            _unrecorded(trial, reason, log, say, tally)
        return None
    except Exception as error:  # any failure of one trial: recorded, and the sweep goes on
        return _failed(home, trial, error, log, say, tally)
    tally.trained_s += (settled := time.perf_counter()) - began
    _done(home, trial, value, log, say, tally)
    tally.overhead_s += time.perf_counter() - settled
    return None


def _done(home: Home, trial: ClaimedTrial, value: float | None, log: TrialLog, say: Say, tally: Tally) -> None:
    """A trial trained to its target: recorded done (with halving's decisions), then its sweep topped up."""
    experiment_id = trial["experiment_id"]
    if reason := _settle(home, trial, "done", value=value):
        return _unrecorded(trial, reason, log, say, tally)
    tally.done.append(experiment_id)
    say(
        f"{experiment_id}: done at step {trial['target_step']}"
        + (f", {_metric(home, trial)} {value:.4f}" if value is not None else "")
    )
    if sweep := _sweep_of(home, trial):
        plan.top_up(home, sweep)
    return None


def _taken_over(home: Home, experiment_id: str, lost: Lost) -> str:
    steps = layout.checkpoints(home.checkpoint_dir(experiment_id))
    where = f"pid {lost['pid']} on {lost['host']}" if lost["pid"] else "no process recorded"
    return f"{experiment_id}: taken over from a lost worker ({where}), resuming at step {steps[-1][0] if steps else 0}"


def _requeued(experiment_id: str, error: Interrupted) -> Interrupted:
    """A worker's last word on a signal: not `octlm resume` (the queue continues the trial), but what became of it."""
    name = signal.Signals(error.exit_code - 128).name
    return Interrupted(
        f"stopped by {name}; {experiment_id} checkpointed and is queued again: the next `octlm work` on its sweep "
        "continues it",
        error.exit_code,
    )


def train_trial(home: Home, trial: ClaimedTrial, log: TrialLog, threads: int = 0) -> float | None:
    """Resume the trial to its target step (nothing to train when its checkpoint is there already); its metric there."""
    import torch

    from octlm.run import runner  # imports torch

    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)

    experiment_id, target = trial["experiment_id"], trial["target_step"]
    metric = _metric(home, trial)  # its sweep's spec read (and checked) before anything trains
    config = experiments.load(home, experiment_id)
    newest = layout.checkpoints(home.checkpoint_dir(experiment_id))
    summary = None
    if not newest or newest[-1][0] < target:
        until = None if target >= config.training.steps else target
        summary = runner.resume(home, experiment_id, until=until, reporter=log, config=config)
    if summary is not None and summary.end_step == target and summary.metrics.get(metric) is not None:
        return float(summary.metrics[metric])  # type: ignore[literal-required]
    with Registry(home.registry, create=False) as registry:
        return registry.rung_value(experiment_id, target, metric)


def _metric(home: Home, trial: ClaimedTrial) -> str:
    sweep = _sweep_of(home, trial)
    metric = (sweep["spec"] or {}).get("metric") if sweep else None
    return metric or "eval_loss"


def _sweep_of(home: Home, trial: ClaimedTrial) -> SweepRow | None:
    """The trial's sweep, its spec checked (``Registry.sweep``: a damaged one fails the trial in one line)."""
    with Registry(home.registry, create=False) as registry:
        name = next((row["name"] for row in registry.sweeps() if row["id"] == trial["sweep_id"]), None)
        return registry.sweep(name) if name is not None else None


def _failed(home: Home, trial: ClaimedTrial, error: BaseException, log: TrialLog, say: Say, tally: Tally) -> None:
    message = str(error) or type(error).__name__
    log.line(f"failed: {message}")
    reason = _settle(home, trial, "failed", error="\n".join(log.tail))
    tally.failed.append(trial["experiment_id"])
    say(f"{trial['experiment_id']}: failed: {reason or message} (its log: {log.path})")


def _unrecorded(trial: ClaimedTrial, reason: str, log: TrialLog, say: Say, tally: Tally) -> None:
    """A trial whose end could not be recorded: marked failed by ``_settle``, said so, and the worker goes on."""
    log.line(f"failed: {reason}")
    tally.failed.append(trial["experiment_id"])
    say(f"{trial['experiment_id']}: failed: {reason} (its log: {log.path})")


def _settle(home: Home, trial: ClaimedTrial, status: str, **fields: Any) -> str | None:
    """Close the trial's claim as ``status`` (with halving's decisions) and keep its sweep's record. A settle that
    fails (anything the registry or a decision refused) marks the trial failed with why, and releases its claim:
    a claim left open would be taken over, trained to the same end and refused again by every worker that took it
    (issue 45). Why it failed, or None."""
    with Registry(home.registry) as registry:
        try:
            registry.settle_claim(trial["claim_id"], status, decide=halving.decide, **fields)
            reason = None
        except Interrupted:
            raise
        except Exception as error:  # the trial fails, not the worker
            reason = f"its end ({status}) could not be recorded: {str(error) or type(error).__name__}"
            said = [str(fields["error"])] if fields.get("error") else []
            stamp = time.strftime("%H:%M:%S")
            registry.settle_claim(trial["claim_id"], "failed", error="\n".join([*said, f"{stamp} failed: {reason}"]))
        kept.keep_sweep_by_id(home, registry, trial["sweep_id"])  # what survives the registry's loss
    return reason
