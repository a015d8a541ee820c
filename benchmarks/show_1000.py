"""`octlm show` with 1,000 experiments in the registry, against `python -c "import torch"`.

python benchmarks/show_1000.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from octlm import config as cfg
from octlm.config.presets import preset
from octlm.store.registry import Registry


def wall(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--experiments", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        (home / "experiments").mkdir()
        registry = Registry(home / "registry.db")
        config = cfg.from_dict(preset("day1"))
        for n in range(1, args.experiments + 1):
            experiment_id = f"EXP-{n:04d}"
            (home / "experiments" / f"{experiment_id}.yaml").write_text("preset: day1\n")
            registry.add_experiment(
                experiment_id,
                description=f"experiment {n}",
                preset="day1",
                yaml_path=f"experiments/{experiment_id}.yaml",
                config_json=config.canonical_json(),
                config_hash=config.fingerprint,
            )
            run = registry.start_run(experiment_id, "train", start_step=0, pid=1)
            registry.finish_run(
                run,
                "completed",
                end_step=200,
                latest_metrics={
                    "step": 200,
                    "tokens": 204800,
                    "train_loss": 5.0,
                    "eval_loss": 5.1,
                    "perplexity": 164.0,
                    "bits_per_byte": 2.6,
                },
            )
        registry.close()
        octlm = [sys.executable, "-m", "octlm", "--home", str(home)]
        rows = len(
            json.loads(subprocess.run([*octlm, "show", "--json"], capture_output=True, check=True).stdout)[
                "experiments"
            ]
        )
        show = wall([*octlm, "show"], args.runs)
        show_json = wall([*octlm, "show", "--json"], args.runs)
        torch_import = wall([sys.executable, "-c", "import torch"], args.runs)
    print(f"experiments listed: {rows}")
    print(f"octlm show:          {show:.3f} s (median of {args.runs})")
    print(f"octlm show --json:   {show_json:.3f} s")
    print(f'python -c "import torch": {torch_import:.3f} s')
    print(f"show / import torch: {show / torch_import:.3f} (target <= 0.25)")


if __name__ == "__main__":
    main()
