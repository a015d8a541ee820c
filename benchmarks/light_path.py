"""The light path against `python -c "import torch"`, in one run: `octlm --help`, `octlm show` over 1,000 and over
10,000 experiments, and `octlm sweep new` of 1,000 trials (each in a fresh process, as a user runs them).

python benchmarks/light_path.py [--rounds 5] [--against DIR]

Rounds alternate the commands (help, show 1k, show 10k, sweep new, import torch, then again), so a change of load
falls on all of them alike; each figure is the median of its rounds, beside the load average before and after.
Targets (issue 34): --help <= 0.25 s, show 1k <= 0.35 s, show 10k <= 2 s, sweep new 1k <= 3 s.

``--against DIR``: another checkout of octlm (``git worktree add DIR COMMIT``) whose every command runs right after
this one's in each round (``python -m octlm`` from DIR imports DIR's octlm): a column of this / that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from octlm import config as cfg
from octlm.config.presets import preset
from octlm.store.registry import Registry

LATEST = {"step": 200, "tokens": 204800, "train_loss": 5.0, "eval_loss": 5.1, "perplexity": 164.0, "bits_per_byte": 2.6}


def home_of(folder: Path, experiments: int) -> Path:
    """A home with ``experiments`` experiments, each with its YAML and a completed training run."""
    home = folder / f"home-{experiments}"
    (home / "experiments").mkdir(parents=True)
    config = cfg.from_dict(preset("day1"))
    ids = [f"EXP-{n:05d}" for n in range(1, experiments + 1)]
    for experiment_id in ids:
        (home / "experiments" / f"{experiment_id}.yaml").write_text(f"id: {experiment_id}\npreset: day1\n")
    with Registry(home / "registry.db") as registry:
        fields = {"preset": "day1", "config_json": config.canonical_json(), "config_hash": config.fingerprint}
        registry.add_experiments(
            [{"id": i, "description": f"experiment {i}", "yaml_path": f"experiments/{i}.yaml", **fields} for i in ids]
        )
        for experiment_id in ids:
            run = registry.start_run(experiment_id, "train", start_step=0, pid=1)
            registry.finish_run(run, "completed", end_step=200, latest_metrics=LATEST)
    return home


# As a user runs octlm: bytecode cached (a box that sets PYTHONDONTWRITEBYTECODE compiles every module at every start:
# 0.1-0.2 s more here), so the first round, which writes the cache, is not counted.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "NO_COLOR": "1"}
ROOT = Path(__file__).resolve().parents[1]  # `python -m octlm` run from here imports this checkout


def timed(command: list[str], cwd: Path | None = None) -> float:
    cwd = cwd or ROOT
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=ENV)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)[:200]} failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - started


def sweep_new(home: Path, octlm: list[str], cwd: Path | None = None) -> float:
    """``sweep new`` of 1,000 trials from EXP-00001 (the sweep and its trials removed afterwards, so each round
    makes the same 1,000)."""
    values = ",".join(f"{1e-4 + n * 1e-6:.6g}" for n in range(1000))
    scratch = home.parent / "sweep-home"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "experiments").mkdir(parents=True)
    shutil.copy(home / "experiments" / "EXP-00001.yaml", scratch / "experiments")
    return timed(
        [
            *octlm,
            "--home",
            str(scratch),
            "sweep",
            "new",
            "big",
            "--from",
            "EXP-00001",
            "--grid",
            f"training.learning_rate={values}",
        ],
        cwd,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout of octlm, run alternately with this one")
    args = parser.parse_args()
    octlm = [sys.executable, "-m", "octlm"]
    with tempfile.TemporaryDirectory() as folder:
        small, large = home_of(Path(folder), 1000), home_of(Path(folder), 10000)
        commands = {
            "octlm --help": lambda cwd: timed([*octlm, "--help"], cwd),
            "octlm show (1,000 experiments)": lambda cwd: timed([*octlm, "--home", str(small), "show"], cwd),
            "octlm show (10,000 experiments)": lambda cwd: timed([*octlm, "--home", str(large), "show"], cwd),
            "octlm sweep new (1,000 trials)": lambda cwd: sweep_new(small, octlm, cwd),
            'python -c "import torch"': lambda cwd: timed([sys.executable, "-c", "import torch"], cwd),
        }
        trees = [ROOT, *([args.against.resolve()] if args.against else [])]
        before = os.getloadavg()
        times: dict[tuple[str, Path], list[float]] = {(name, tree): [] for name in commands for tree in trees}
        for rounds in (1, args.rounds):  # the first: a warm-up (bytecode written, files in the page cache)
            for _ in range(rounds):
                for name, run in commands.items():
                    for tree in trees:
                        times[name, tree].append(run(tree))
            if rounds == 1:
                times = {key: [] for key in times}
        after = os.getloadavg()
    _report(times, trees, before[0], after[0], args.rounds)


def _report(
    times: dict[tuple[str, Path], list[float]], trees: list[Path], before: float, after: float, rounds: int
) -> None:
    torch_s = statistics.median(times['python -c "import torch"', trees[0]])
    print(f"load average before {before:.2f}, after {after:.2f}; {os.cpu_count()} cores; median of {rounds}")
    for name in dict.fromkeys(name for name, _ in times):
        median = statistics.median(times[name, trees[0]])
        line = f"{name:34} {median:7.3f} s   {median / torch_s:5.2f}x import torch"
        if len(trees) > 1:
            other = statistics.median(times[name, trees[1]])
            line += f"   {other:7.3f} s in {trees[1].name}: {median / other:5.2f}x of it"
        print(line)


if __name__ == "__main__":
    main()
