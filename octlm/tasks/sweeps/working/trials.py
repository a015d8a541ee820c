"""One claimed trial, trained and its end recorded (``run``): resumed to its target step in this process as ``resume``
would (``train_trial``: torch is imported here, when the first trial trains), then its claim settled with halving's
decisions (``settle``: done, failed, released on a signal, busy when another process holds its lock) and its sweep
topped up (``planning/plan.top_up``: a sampler that asks as trials finish).

- A trial that fails (bad data, a diverged run, any error) is marked failed with its message and the last lines
  of its log (``runs/<ID>.log``); the worker goes on with the next.
- A settle that fails marks the trial failed with why and releases its claim (never a claim left to be taken over
  and refused again by every worker).
- Its sweep is read (and checked: a damaged spec, an unknown sampler) before anything trains, so a damaged sweep
  fails its trials in one line instead of killing the worker.
- Said as it happens: a trial taken over from a lost worker ("resuming at step N"); on a signal, what became of the
  trial (queued again, for the queue to continue; not ``octlm resume``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from octlm.core import layout
from octlm.core.errors import BadInput, BeingTrained, Interrupted
from octlm.core.home import Home
from octlm.core.reporting import Reporter, counted
from octlm.store import experiments, kept
from octlm.store.registry import Registry
from octlm.store.sweeps.records import ClaimedTrial, Lost, SweepRow
from octlm.tasks.sweeps.planning import plan, samplers
from octlm.tasks.sweeps.working import halving
from octlm.tasks.sweeps.working.stopping import hold, stop_if_signalled
from octlm.tasks.sweeps.working.trial_log import Tally, TrialLog

Say = Callable[[str], None]


def run(home: Home, trial: ClaimedTrial, say: Say, tally: Tally, busy: set[int], threads: int = 0) -> None:
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
        settle(home, trial, "queued")
        say(f"{experiment_id}: stopped; its claim is released and it resumes from its checkpoint later")
        raise _requeued(experiment_id, error) from None
    except BeingTrained:  # another process holds the experiment: passed over, queued again
        busy.add(trial["id"])
        if reason := settle(home, trial, "busy"):
            _unrecorded(trial, reason, log, say, tally)
        return None
    except Exception as error:  # any failure of one trial: recorded, and the sweep goes on
        return record_failed(home, trial, error, log, say, tally)
    tally.trained_s += (settled := time.perf_counter()) - began
    record_done(home, trial, value, log, say, tally)
    tally.overhead_s += time.perf_counter() - settled
    return None


def record_done(home: Home, trial: ClaimedTrial, value: float | None, log: TrialLog, say: Say, tally: Tally) -> None:
    """A trial trained to its target: recorded done (with halving's decisions), then its sweep topped up. Its sweep
    damaged since it was claimed (a spec key, a sampler not in the table) is said, and the worker goes on: its other
    trials fail with that line before they train (``train_trial``)."""
    experiment_id = trial["experiment_id"]
    if reason := settle(home, trial, "done", value=value):
        return _unrecorded(trial, reason, log, say, tally)
    tally.done.append(experiment_id)
    done = f"{experiment_id}: done at step {trial['target_step']}"
    try:
        sweep = sweep_of(home, trial)
    except BadInput as error:
        say(f"{done}; its sweep is not topped up: {error}")
        return None
    metric = (sweep["spec"] or {}).get("metric") if sweep else None
    say(done + (f", {metric or 'eval_loss'} {value:.4f}" if value is not None else ""))
    if sweep:
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

    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)

    metric = metric_of(home, trial)  # its sweep's spec read (and checked) before anything trains
    return train_to(home, trial["experiment_id"], trial["target_step"], metric, log)


def train_to(home: Home, experiment_id: str, target: int, metric: str, log: Reporter) -> float | None:
    """Resume ``experiment_id`` to step ``target`` as ``resume`` would (nothing to train when its checkpoint is there
    already); its ``metric`` there (a worker's trial, and a trial on a Ray node: ``remote``)."""
    from octlm.run import runner  # imports torch

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


def metric_of(home: Home, trial: ClaimedTrial) -> str:
    sweep = sweep_of(home, trial)
    metric = (sweep["spec"] or {}).get("metric") if sweep else None
    return metric or "eval_loss"


def sweep_of(home: Home, trial: ClaimedTrial) -> SweepRow | None:
    """The trial's sweep, its spec checked (``Registry.sweep``) and its sampler one of the table's (``samplers.of``):
    a damaged one fails the trial in one line."""
    with Registry(home.registry, create=False) as registry:
        name = next((row["name"] for row in registry.sweeps() if row["id"] == trial["sweep_id"]), None)
        sweep = registry.sweep(name) if name is not None else None
    if sweep is not None:
        samplers.of(sweep["spec"], f"{home.registry}: sweep {name}")
    return sweep


def record_failed(home: Home, trial: ClaimedTrial, error: BaseException, log: TrialLog, say: Say, tally: Tally) -> None:
    message = str(error) or type(error).__name__
    log.line(f"failed: {message}")
    reason = settle(home, trial, "failed", error="\n".join(log.tail))
    tally.failed.append(trial["experiment_id"])
    say(f"{trial['experiment_id']}: failed: {reason or message} (its log: {log.path})")


def _unrecorded(trial: ClaimedTrial, reason: str, log: TrialLog, say: Say, tally: Tally) -> None:
    """A trial whose end could not be recorded: marked failed by ``settle``, said so, and the worker goes on."""
    log.line(f"failed: {reason}")
    tally.failed.append(trial["experiment_id"])
    say(f"{trial['experiment_id']}: failed: {reason} (its log: {log.path})")


def settle(home: Home, trial: ClaimedTrial, status: str, **fields: Any) -> str | None:
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
