"""What ``training.tensorboard`` costs a day1 step: the live TensorBoard writer (``run/live``) against none.

In one home, alternating rounds, each a pair of fresh day1 experiments that differ only by the key (bookkeeping: the
same fingerprint, the same bits), trained one process each, their order swapped every round so that neither always
runs first. Two figures, each as a ratio with to without inside a round, then the median over the rounds, with the
load average beside them: the session's own wall time per step (``train --json``'s ``seconds`` over its steps: from
the session's start to its end, evaluations, checkpoints and the writer's start, tensorboard's import included;
process start-up and data preparation not), which a busy box makes noisy; and the whole process's CPU time (user and
system, every thread: the writer's thread and its import included), which the load changes far less, with its
difference a run (the writer's whole cost, had it no core of its own) over the run's steps, as a share of a step.
Every process gets one thread for torch (``OMP_NUM_THREADS=1``), as a box shared by a few runs gives it.

Then the writer alone, which no load hides: a fresh process that has imported torch (as a training process has)
hands the records of one of those runs' run files to ``run.live.LiveEvents`` as a session does, and says the CPU
time of all its threads (the writer's thread, tensorboard's import, its own writer thread) and the wall time the
session's thread spent in ``start``, ``record`` and ``close``: three processes, the medians.

    python benchmarks/live_tracker.py [--rounds N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def octlm(home: Path, *args: str) -> dict[str, object]:
    """One octlm process with ``--json``; what it wrote."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "octlm", "--home", str(home), *args, "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"octlm {' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout)


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def trained(home: Path, live: bool, steps: int) -> tuple[float, float]:
    """A fresh day1 experiment (with or without the live writer) trained for ``steps``: (its session's seconds a step,
    the training process's CPU seconds)."""
    made = octlm(home, "new", "--preset", "day1", "--set", f"training.tensorboard={str(live).lower()}")
    before = cpu_of_children()
    result = octlm(home, "train", str(made["id"]), "--until", str(steps), "-q")
    cpu = cpu_of_children() - before
    if live and not any((home / "runs" / "tensorboard" / str(made["id"])).glob("*tfevents*")):
        raise SystemExit(f"{made['id']} wrote no events: is tensorboard installed?")
    return float(str(result["seconds"])) / steps, cpu


def alone(run_file: Path) -> None:
    """The writer fed a run file's records as a session feeds it, in this process (``--alone RUN_FILE``)."""
    import torch  # noqa: F401  (what a training process has loaded before its session starts)

    from octlm.config import from_dict, presets
    from octlm.data.fingerprints import Fingerprints
    from octlm.run.live import LiveEvents
    from octlm.store.runs import runfile

    config, records = from_dict({"id": "EXP-001", **presets.preset("day1")}, "day1"), runfile.read(run_file)
    cpu, hooks = time.process_time(), 0.0
    started = time.perf_counter()
    live = LiveEvents(Path(tempfile.mkdtemp(prefix="octlm-live-alone-")) / "EXP-001", 0, print)
    live.start(config, Fingerprints("0" * 64, "1" * 64, "2" * 64))
    hooks += time.perf_counter() - started
    for record in records:
        started = time.perf_counter()
        live.record(record)
        hooks += time.perf_counter() - started
        time.sleep(0.005)  # the steps between two records, which the writer's thread has to itself here
    started = time.perf_counter()
    live.close()
    hooks += time.perf_counter() - started
    print(json.dumps({"records": len(records), "cpu_s": time.process_time() - cpu, "hooks_s": hooks}))


def writer_alone(run_file: Path, times: int = 3) -> dict[str, float]:
    """``alone`` in ``times`` fresh processes: the medians."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    found = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--alone", str(run_file)],
                env=env,
                capture_output=True,
                check=True,
                text=True,
            ).stdout.splitlines()[-1]
        )
        for _ in range(times)
    ]
    return {key: statistics.median(item[key] for item in found) for key in found[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=200, help="day1's whole run")
    parser.add_argument("--alone", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alone is not None:
        alone(args.alone)
        return
    home = Path(tempfile.mkdtemp(prefix="octlm-live-tracker-"))
    trained(home, False, 5)  # the tokenizer and the token file made once, for every run after
    walls, cpus, extra, step_ms = [], [], [], []
    loads = [os.getloadavg()[0]]
    for index in range(args.rounds):
        order = (True, False) if index % 2 else (False, True)
        took = {live: trained(home, live, args.steps) for live in order}
        walls.append(took[True][0] / took[False][0])
        cpus.append(took[True][1] / took[False][1])
        extra.append(took[True][1] - took[False][1])
        step_ms.append(took[False][0] * 1000)
        loads.append(os.getloadavg()[0])
        print(
            f"round {index + 1}: ms/step with {took[True][0] * 1000:.2f}, without {step_ms[-1]:.2f} (ratio "
            f"{walls[-1]:.4f}); process CPU s with {took[True][1]:.2f}, without {took[False][1]:.2f} (ratio "
            f"{cpus[-1]:.4f}); load {loads[-1]:.2f}",
            flush=True,
        )
    share = statistics.median(extra) / args.steps / (statistics.median(step_ms) / 1000)
    print(
        f"{time.strftime('%Y-%m-%d')}: {args.rounds} alternating rounds of day1 x {args.steps} steps; with/without: "
        f"session wall a step median {statistics.median(walls):.4f} (min {min(walls):.4f}, max {max(walls):.4f}), "
        f"process CPU median {statistics.median(cpus):.4f} (min {min(cpus):.4f}, max {max(cpus):.4f}); the writer's "
        f"CPU a run {statistics.median(extra) * 1000:.0f} ms = {share:.2%} of a step's "
        f"{statistics.median(step_ms):.1f} ms; load average {min(loads):.2f} to {max(loads):.2f} on "
        f"{os.cpu_count()} cores"
    )
    last = max((home / "runs").glob("EXP-*[0-9].jsonl"), key=lambda p: p.stat().st_mtime)
    said = writer_alone(last)
    print(
        f"the writer alone, fed {said['records']:.0f} records of a {args.steps}-step run: CPU "
        f"{said['cpu_s'] * 1000:.0f} ms (all its threads, tensorboard's import included) = "
        f"{said['cpu_s'] / args.steps * 1000:.2f} ms a step; "
        f"the session's thread in it {said['hooks_s'] * 1000:.1f} ms; load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
