"""Time to the first step, cold and warm, and where torch.compile pays for itself.

Two measurements, each command in a fresh process, as a user meets them:

1. `octlm train ID --until 1` end to end (data preparation, tokenizer, token file, compile, one step) in a new
   home with an empty compile cache (cold), then for a second experiment of the same data, vocabulary and
   shape in the same home (warm: the tokenizer, the token file and the compiled graphs are reused).
2. `octlm bench --preset P --compile` and `--no-compile` with an empty and then a warm compile cache:
   the first step's time and the median step, and from them the break-even step count of compiling,
   (first compiled step - first eager step) / (eager step - compiled step).

    python benchmarks/first_step.py [--train-preset day2] [--bench-presets day1,day2] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def octlm(home: Path, cache: Path, *args: str) -> tuple[float, str]:
    """Run octlm in a fresh process with the given compile cache; (wall seconds, stdout)."""
    env = {**os.environ, "OCTLM_COMPILE_CACHE": str(cache), "NO_COLOR": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "--home", str(home), *args], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"octlm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return seconds, done.stdout


def train_to_first_step(preset: str, folder: Path) -> dict[str, float]:
    home, cache = folder / "home", folder / "graphs"
    home.mkdir()
    results = {}
    for experiment, label in (("EXP-001", "cold"), ("EXP-002", "warm")):
        octlm(home, cache, "new", experiment, "--preset", preset)
        results[label], _ = octlm(home, cache, "train", experiment, "--until", "1")
    return results


def bench(preset: str, compile: bool, cache: Path, steps: int) -> dict[str, float]:
    flag = "--compile" if compile else "--no-compile"
    _, out = octlm(cache.parent, cache, "bench", "--preset", preset, flag, "--steps", str(steps), "--json")
    row = json.loads(out)["results"][0]
    return {"first": row["first_step_fresh_seconds"], "step": row["ms_per_step"] / 1000}


def compile_break_even(preset: str, folder: Path, steps: int) -> dict[str, float]:
    cache = folder / f"graphs-{preset}"
    eager = bench(preset, False, cache, steps)
    cold = bench(preset, True, cache, steps)
    warm = bench(preset, True, cache, steps)
    saving = eager["step"] - warm["step"]
    return {
        "eager first s": eager["first"],
        "compiled first cold s": cold["first"],
        "compiled first warm s": warm["first"],
        "eager ms/step": eager["step"] * 1000,
        "compiled ms/step": warm["step"] * 1000,
        "break-even cold": (cold["first"] - eager["first"]) / saving if saving > 0 else float("inf"),
        "break-even warm": (warm["first"] - eager["first"]) / saving if saving > 0 else float("inf"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-preset", default="day2", help="preset timed end to end ('' to skip)")
    parser.add_argument("--bench-presets", default="day1,day2", help="presets for the break-even ('' to skip)")
    parser.add_argument("--steps", type=int, default=20, help="steps bench times for the median")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="octlm-first-step-") as temporary:
        folder = Path(temporary)
        if args.train_preset:
            times = train_to_first_step(args.train_preset, folder)
            print(f"octlm train --until 1, {args.train_preset}: cold {times['cold']:.1f} s, warm {times['warm']:.1f} s")
        for preset in filter(None, args.bench_presets.split(",")):
            row = compile_break_even(preset, folder, args.steps)
            print(f"{preset}: " + ", ".join(f"{name} {value:.2f}" for name, value in row.items()))


if __name__ == "__main__":
    main()
