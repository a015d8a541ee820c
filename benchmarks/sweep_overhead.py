"""A sweep's overhead per trial (claim, start, record) against a bare ``octlm train`` of the same experiment.

In one home, alternating rounds: (a) ``octlm train`` of a fresh copy of a tiny experiment, one process a run;
(b) a one-trial sweep of the same config worked by ``octlm work --until-empty`` (one process: claim, train as
resume would, record, see the queue empty); (c) a sweep of K trials worked by one ``octlm work`` process, per
trial. Experiments and sweeps are made before each timing, outside it. Every process gets one thread.

    python benchmarks/sweep_overhead.py [--rounds N] [--steps N] [--batch K]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CONFIG = {
    "description": "sweep overhead",
    "data": {"sources": ["builtin:docs"], "validation_fraction": 0.1, "max_bytes": 200_000},
    "tokenizer": {"vocab_size": 300},
    "model": {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2},
    "training": {"warmup_steps": 1, "batch_size": 4, "eval_blocks": 4, "learning_rate": 0.003},
}


def octlm(home: Path, *args: str) -> tuple[float, bytes]:
    """Run one octlm process; its wall time in seconds and its stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "octlm", "--home", str(home), *args], env=env, capture_output=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"octlm {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return took, done.stdout


def made(home: Path, *args: str) -> list[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "--home", str(home), *args, "--json"], env=env, capture_output=True, check=True
    )
    found = json.loads(done.stdout)
    return [t["id"] for t in found["trials"]] if "trials" in found else [found["id"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="trials in the sweep one worker process runs")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="octlm-sweep-overhead-"))
    (home / "experiments").mkdir()
    config = {**CONFIG, "training": {**CONFIG["training"], "steps": args.steps, "eval_interval": args.steps}}
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump({"id": "EXP-001", **config}))
    octlm(home, "train", "EXP-001", "-q")  # warms the tokenizer's cache and the token file for everyone
    times: dict[str, list[float]] = {"train": [], "work 1": [], f"work {args.batch}, per trial": []}
    said: list[float] = []  # the worker's own count: claiming, recording and topping up, per trial
    work = ("--threads", "1", "--until-empty", "--json")
    for index in range(args.rounds):
        (twin,) = made(home, "new", "--from", "EXP-001")
        times["train"].append(octlm(home, "train", twin, "-q")[0])
        made(home, "sweep", "new", f"r{index}-one", "--from", "EXP-001", "--grid", "training.learning_rate=0.003")
        took, out = octlm(home, "work", f"r{index}-one", *work)
        times["work 1"].append(took)
        said.append(json.loads(out)["overhead_s"])
        made(home, "sweep", "new", f"r{index}-many", "--from", "EXP-001", "--seeds", str(args.batch))
        took, out = octlm(home, "work", f"r{index}-many", *work)
        times[f"work {args.batch}, per trial"].append(took / args.batch)
        said.append(json.loads(out)["overhead_s"] / args.batch)
    base = statistics.median(times["train"])
    print(f"{args.rounds} alternating rounds, {args.steps} steps a run; loadavg {Path('/proc/loadavg').read_text()}")
    for name, values in times.items():
        middle = statistics.median(values)
        print(f"{name:>20}: median {middle:.3f} s ({middle / base:.2f}x train), all {[round(v, 3) for v in values]}")
    print(f"the workers' own claim + record + top-up, per trial: median {statistics.median(said) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
