"""A sweep on this box: ``octlm work --workers 2`` against ``octlm work --ray local`` (a local Ray of the box's cores),
the same 6-trial day1 sweep with few steps, in alternating rounds, the load printed with each.

Each round makes two fresh homes with the same sweep (``new --preset day1 --set training.steps=S`` and a checkpoint
every ``S/4`` steps, ``sweep new --seeds 6``), outside the timing, then times ``work --until-empty`` in each, the
order alternating between rounds. For the Ray path it also reads from the driver's own lines: when Ray had started
(``work: on Ray at local``), and the checkpoint shipping's cost (``work: N checkpoints shipped ...``: packed on the
node, merged by the driver). Every trial trains on one thread.

    python benchmarks/ray_sweep.py [--rounds N] [--steps S] [--trials K]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHIPPED = re.compile(r"(\d+) checkpoints shipped to the driver, (\d+) kB each: packed in ([\d.]+) s .* in ([\d.]+) s")


def octlm(home: Path, *args: str) -> tuple[float, list[tuple[float, str]]]:
    """One octlm process: its wall time and its stderr lines, each with the seconds since it started."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    began = time.perf_counter()
    command = [sys.executable, "-m", "octlm", "--home", str(home), *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines = [(time.perf_counter() - began, line.rstrip()) for line in process.stderr]
    took = time.perf_counter() - began
    if process.wait() != 0:
        raise SystemExit(f"octlm {' '.join(args)}: exit {process.returncode}: {lines[-5:]}")
    return took, lines


def home_with_sweep(root: Path, steps: int, trials: int) -> Path:
    every = max(1, steps // 4)
    sets = [f"training.steps={steps}", f"training.eval_interval={steps // 2}", f"checkpoint.interval={every}"]
    octlm(root, "new", "--preset", "day1", *[x for s in sets for x in ("--set", s)])
    octlm(root, "sweep", "new", "s", "--from", "EXP-001", "--seeds", str(trials))
    return root


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="octlm-ray-sweep-"))
    walls: dict[str, list[float]] = {"workers": [], "ray": []}
    started, shipped = [], []
    for index in range(args.rounds):
        order = ("workers", "ray") if index % 2 == 0 else ("ray", "workers")
        for mode in order:
            home = home_with_sweep(root / f"{index}-{mode}", args.steps, args.trials)
            flags = ["--workers", "2", "--threads", "1"] if mode == "workers" else ["--ray", "local", "--threads", "1"]
            before = load()
            took, lines = octlm(home, "work", "s", "--until-empty", *flags)
            walls[mode].append(took)
            line = f"round {index + 1} {mode:8s} {took:6.2f} s  (load before {before}, after {load()})"
            if mode == "ray":
                up = next(t for t, text in lines if text.startswith("work: on Ray at"))
                found = next(m for _, text in lines if (m := SHIPPED.search(text)))
                started.append(up)
                shipped.append((int(found[1]), int(found[2]), float(found[3]), float(found[4])))
                line += f"  Ray up after {up:.2f} s; {found[0]}"
            print(line, flush=True)
    work, ray = statistics.median(walls["workers"]), statistics.median(walls["ray"])
    up = statistics.median(started)
    print(f"median: work --workers 2 {work:.2f} s, --ray local {ray:.2f} s ({ray / work:.2f}x)")
    print(f"Ray's start {up:.2f} s; per trial beyond it: {(ray - up - work) / args.trials:+.2f} s")
    packed = statistics.median(s[2] for s in shipped)
    merged = statistics.median(s[3] for s in shipped)
    print(
        f"a checkpoint shipped: {shipped[0][1]} kB, packed on its node {packed:.3f} s, "
        f"merged by the driver {merged:.3f} s"
    )


if __name__ == "__main__":
    main()
