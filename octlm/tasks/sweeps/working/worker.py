"""``octlm work``: one worker of the durable queue, its claim loop. It claims the next trial in the registry, has it
trained in this process as ``resume`` would and its end recorded (``trials.run``), and claims the next. Torch is
imported when the first trial trains.

- A killed worker's claim is taken over by the next worker that looks (``Registry.claim``: the claim's pid is
  gone on this host), and its trial resumes from its newest checkpoint, exactly.
- SIGTERM (SIGINT, SIGHUP): a trial in training checkpoints at its next step and stops, its claim released
  (queued again, to resume later); an idle worker stops at once (``stopping``). Either way exit 143 (130, 129).
- ``until_empty``: stop once no trial of its sweeps is queued or running (it waits while other workers' trials
  run: halving may promote them; a trial claimed on another host is said once and not waited for); otherwise wait
  for new trials until stopped.
- A worker takes only trials it can run: once torch is loaded under one determinism tier, or a tier's pins or
  library are in the process, a trial of another (``local`` too) is left queued (``deferred``), and when nothing
  else is left the worker starts afresh in its own process (``exec``), where it pins the other tier (``restart``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from octlm.core.errors import BadInput, Interrupted, OctlmError
from octlm.core.home import Home
from octlm.core.liveness import start_time
from octlm.core.reporting import counted
from octlm.runtime import determinism
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.store.sweeps.records import ClaimedTrial, Worker
from octlm.tasks.sweeps.planning import samplers
from octlm.tasks.sweeps.upkeep import shipping
from octlm.tasks.sweeps.working import trials
from octlm.tasks.sweeps.working.stopping import releasing, stop_if_signalled, stoppable
from octlm.tasks.sweeps.working.trial_log import TALLY_VARIABLE, Tally

POLL_S = 0.5
Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    sweeps: tuple[str, ...] = ()  # names; none: every sweep of the home
    until_empty: bool = False
    threads: int = 0  # this worker's share of the cores (0: torch's default)
    device: str = "cpu"  # what the pool gave it: "cuda:0" (CUDA_VISIBLE_DEVICES holds one GPU) or "cpu"
    poll: float = POLL_S


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
                if reason := trials.settle(home, trial, "deferred"):
                    say(f"{trial['experiment_id']}: failed: {reason}")
                continue
            if trial is None:
                if deferred:  # trials of another determinism tier: a fresh process of this worker pins theirs
                    restart(tally, say, deferred)
                if not waiting(home, options, say) and options.until_empty:
                    return tally
                if not idle:
                    say("work: no trial to claim now; waiting for one (SIGTERM or Ctrl-C stops)")
                idle = True
                time.sleep(options.poll)
                busy.clear()
                continue
            idle = False
            tally.overhead_s += time.perf_counter() - began
            trials.run(home, trial, say, tally, busy, options.threads)


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
    """The ids of the named sweeps (BadInput for an unknown one, or one whose spec is damaged or names no sampler of
    the table); None: every sweep."""
    if not names:
        return None
    found = {name: registry.sweep(name) for name in names}
    if missing := [name for name, row in found.items() if row is None]:
        raise BadInput(f"unknown sweep {missing[0]}: create it with `octlm sweep new {missing[0]} --from ID ...`")
    rows = [row for row in found.values() if row is not None]
    for row in rows:
        samplers.of(row["spec"], f"{registry.path}: sweep {row['name']}")
    return [row["id"] for row in rows]


def _claim(home: Home, options: Options, identity: Worker, busy: set[int]) -> ClaimedTrial | None:
    with Registry(home.registry) as registry:
        return registry.claim(sweep_ids(registry, options.sweeps), identity, skip=busy)


def waiting(home: Home, options: Options, say: Say) -> bool:
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
