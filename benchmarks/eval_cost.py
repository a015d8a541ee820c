"""What the evaluation costs: the default budget of new experiments (``training.eval_tokens: 8192``) against the old
default (the first 16 validation blocks), for day1 and day2, measured in one run.

For each preset, two experiments of the same shape and data differ only in the evaluation; each trains
``--until`` a few evaluations' worth of steps in a fresh process, alternating old and new for ``--rounds`` rounds
(the tokenizer and the token file are prepared first, so no round pays for them). Reported per round: the
training seconds and the evaluation's seconds from the run's own summary, the ratio new/old of the whole run, and
the load average beside each.

    python benchmarks/eval_cost.py [--presets day1,day2] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = {"day1": 200, "day2": 60}  # day1 whole; day2: enough for a few evaluations at a shortened interval
EVAL_INTERVAL = {"day1": 20, "day2": 20}
WARMUP = {"day1": 20, "day2": 10}  # day2's own 200 warmup steps exceed the shortened run


def octlm(home: Path, *args: str) -> str:
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "--home", str(home), *args], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"octlm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def make(home: Path, preset: str, experiment: str, evaluation: list[str]) -> None:
    steps = STEPS[preset]
    settings = {
        "training.steps": steps,
        "training.eval_interval": EVAL_INTERVAL[preset],
        "training.warmup_steps": WARMUP[preset],
        "checkpoint.interval": steps,
        "training.compile": "false",
    }
    shape = [part for key, value in settings.items() for part in ("--set", f"{key}={value}")]
    octlm(home, "new", experiment, "--preset", preset, *shape, *evaluation)


def round_of(home: Path, experiment: str) -> dict[str, float]:
    summary = json.loads(octlm(home, "train", experiment, "--restart", "--yes", "--json", "-q"))
    return {"seconds": summary["seconds"], "eval_seconds": summary["eval_seconds"], "load": os.getloadavg()[0]}


def measure(preset: str, rounds: int, folder: Path) -> dict[str, object]:
    home = folder / preset
    home.mkdir()
    make(home, preset, "EXP-001", ["--set", "training.eval_tokens=0", "--set", "training.eval_blocks=16"])
    make(home, preset, "EXP-002", ["--set", "training.eval_tokens=8192"])
    octlm(home, "prepare", "EXP-001")  # tokenizer and token file, shared by both
    found: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(rounds):
        found["old"].append(round_of(home, "EXP-001"))
        found["new"].append(round_of(home, "EXP-002"))
    ratios = [n["seconds"] / o["seconds"] for o, n in zip(found["old"], found["new"], strict=True)]
    return {
        "preset": preset,
        "steps": STEPS[preset],
        "eval_interval": EVAL_INTERVAL[preset],
        "rounds": found,
        "new_over_old": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "eval_share": {
            label: statistics.median(r["eval_seconds"] / r["seconds"] for r in runs) for label, runs in found.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="day1,day2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="octlm-eval-cost-") as folder:
        results = [measure(preset, args.rounds, Path(folder)) for preset in args.presets.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for result in results:
        share, ratio = result["eval_share"], result["new_over_old"]
        print(
            f"{result['preset']}: {result['steps']} steps, evaluating every {result['eval_interval']}: "
            f"new/old run time {ratio['median']:.3f} (min {ratio['min']:.3f}, max {ratio['max']:.3f}); "
            f"evaluation's share {share['old']:.1%} old, {share['new']:.1%} new"
        )
        for label in ("old", "new"):
            rows = [f"{r['seconds']:.1f} s (load {r['load']:.2f})" for r in result["rounds"][label]]
            print(f"  {label}: " + ", ".join(rows))


if __name__ == "__main__":
    main()
