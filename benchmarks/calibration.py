"""How often `octlm show A B` calls two runs different: on pairs of one config that differ only in the seed (where a
verdict about the configuration should say "different" at most at its stated rate), and on pairs whose learning
rate is 3x off (its power). Each pair is trained in a fresh experiment of one home, from the same base (day1's model
on builtin:docs, shortened), and compared as `show A B --json` compares it: the paired test (the same validation
blocks), the unpaired test (the two errors combined as if independent), and, over the null runs taken as replicate
groups, the seed-level test (Welch's error over the seeds).

python benchmarks/calibration.py [--pairs 40] [--steps 30] [--json]
python benchmarks/calibration.py --groups 40 --group-size 3 [--steps 20] [--json]

With --groups N: the seed-level verdict alone, on N comparisons of two disjoint groups of --group-size seeds of one
config, and N of a group of the base config against a group 3x off in the learning rate (the base groups reused):
(2N + N) x --group-size runs.

Prints one table (and with --json the figures); the measured table with its date, machine and load is in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from octlm.cli.app import app
from octlm.config.presets import preset
from octlm.core.home import Home
from octlm.views import side_by_side
from octlm.views.sweeps import replicates

NOISE = 2.0  # the unpaired test's fixed threshold of two standard errors, as it was measured


def base_config(steps: int, eval_tokens: int) -> dict:
    """day1 (EXP-008's preset) shortened: ``steps`` steps, an evaluation at the end on ``eval_tokens`` tokens."""
    config = preset("day1")
    config["training"].update(
        {"steps": steps, "warmup_steps": max(1, steps // 10), "eval_interval": steps, "eval_tokens": eval_tokens}
    )
    config["training"].pop("eval_blocks", None)
    config["checkpoint"] = {**config.get("checkpoint", {}), "interval": steps, "keep": 1}
    return config


def train(home: Path, experiment_id: str, config: dict) -> None:
    (home / "experiments" / f"{experiment_id}.yaml").write_text(yaml.safe_dump({"id": experiment_id, **config}))
    result = CliRunner().invoke(app, ["--home", str(home), "train", experiment_id, "-q"], catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"{experiment_id}: {result.stderr}")


def verdicts(home: Path, first: str, other: str) -> dict:
    """What `show A B --json` says of the pair: the paired and the unpaired test's verdict."""
    versus = side_by_side.compare(Home(home), [first, other])["versus"][0]
    paired = versus["paired"]
    assert paired is not None, f"{first} and {other} were not evaluated on the same blocks"
    unpaired_beyond = abs(versus["eval_loss_difference"]) > NOISE * versus["combined_se"]
    return {
        "difference": paired["eval_loss_difference"],
        "paired_se": paired["eval_loss_se"],
        "unpaired_se": versus["combined_se"],
        "paired_different": versus["within_noise"] is False,
        "unpaired_different": unpaired_beyond,
    }


def seed_level(finals: list[float], group: int) -> tuple[int, int]:
    """Disjoint replicate groups of ``group`` null runs, compared two by two with Welch's error over the seeds:
    (comparisons, how many said beyond seed noise)."""
    groups = [finals[i : i + group] for i in range(0, len(finals) - group + 1, group)]
    said = 0
    for a, b in zip(groups[0::2], groups[1::2], strict=False):
        left, right = replicates.spread(a), replicates.spread(b)
        within, _ = replicates.difference(left, right)
        said += within is False
    return len(groups) // 2, said


def groups_mode(home: Path, base: dict, count: int, size: int) -> dict:
    """The seed-level verdict (``replicates.difference``: Welch's error, Student's t) on ``count`` same-config
    comparisons of disjoint groups of ``size`` seeds, and ``count`` comparisons of a base group against a group 3x
    off in the learning rate."""
    rate, finals = base["training"]["learning_rate"], {}
    runs = [(f"EXP-{n + 1:04d}", n + 1, rate) for n in range(2 * count * size)]
    runs += [(f"EXP-{len(runs) + n + 1:04d}", 10_000 + n, rate * 3) for n in range(count * size)]
    for index, (experiment_id, seed, learning_rate) in enumerate(runs):
        train(home, experiment_id, _with(base, seed=seed, learning_rate=learning_rate))
        records = (home / "runs" / f"{experiment_id}.jsonl").read_text().splitlines()
        finals[experiment_id] = next(
            r["eval_loss"] for r in map(json.loads, reversed(records)) if r.get("eval_loss") is not None
        )
        if index % 10 == 9:
            print(f"run {index + 1}/{len(runs)}", file=sys.stderr)
    values = [finals[e] for e, _, _ in runs]
    base_groups = [values[i : i + size] for i in range(0, 2 * count * size, size)]
    off_groups = [values[2 * count * size + i : 2 * count * size + i + size] for i in range(0, count * size, size)]
    same = [_said(base_groups[2 * i], base_groups[2 * i + 1]) for i in range(count)]
    off = [_said(base_groups[2 * i], off_groups[i]) for i in range(count)]
    return {"comparisons": count, "group": size, "same_config_different": sum(same), "rate_3x_different": sum(off)}


def _said(a: list[float], b: list[float]) -> bool:
    within, _ = replicates.difference(replicates.spread(a), replicates.spread(b))
    return within is False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=40, help="pairs of each kind (default 40)")
    parser.add_argument("--steps", type=int, default=30, help="training steps of each run (default 30)")
    parser.add_argument("--eval-tokens", type=int, default=8192, help="training.eval_tokens (default: new's 8192)")
    parser.add_argument("--groups", type=int, default=0, help="seed-level mode: comparisons of replicate groups")
    parser.add_argument("--group-size", type=int, default=3, help="seeds a group, with --groups (default 3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OCTLM_NO_LOAD_CHECK", "1")
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    if args.groups:
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "experiments").mkdir()
            found = groups_mode(Path(folder), base_config(args.steps, args.eval_tokens), args.groups, args.group_size)
        found |= {
            "date": time.strftime("%Y-%m-%d"),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "seconds": round(time.perf_counter() - started, 1),
            "steps": args.steps,
            "eval_tokens": args.eval_tokens,
        }
        print(json.dumps(found, indent=2) if args.json else found)
        return
    rows: dict[str, list[dict]] = {"same config, other seed": [], "learning rate 3x off": []}
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        (home / "experiments").mkdir()
        base = base_config(args.steps, args.eval_tokens)
        rate = base["training"]["learning_rate"]
        for index in range(args.pairs):  # pair i: EXP-(4i+1) and EXP-(4i+2) the same config, then the 3x pair
            for offset, (kind, other_rate) in enumerate(zip(rows, (rate, rate * 3), strict=True)):
                first, other = (f"EXP-{index * 4 + 2 * offset + n:03d}" for n in (1, 2))
                train(home, first, _with(base, seed=2 * index + 1, learning_rate=rate))
                train(home, other, _with(base, seed=2 * index + 2, learning_rate=other_rate))
                rows[kind].append(verdicts(home, first, other))
            print(f"pair {index + 1}/{args.pairs}", file=sys.stderr)
        null_finals = _null_finals(home, args.pairs)
    compared, beyond = seed_level(null_finals, 3)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "seconds": round(time.perf_counter() - started, 1),
        "steps": args.steps,
        "eval_tokens": args.eval_tokens,
        "rows": {kind: _summary(found) for kind, found in rows.items()},
        "seed_level": {"comparisons": compared, "different": beyond, "group": 3},
    }
    print(json.dumps(report, indent=2) if args.json else _table(report))


def _with(base: dict, *, seed: int, learning_rate: float) -> dict:
    config = json.loads(json.dumps(base))
    config["training"].update({"seed": seed, "learning_rate": learning_rate, "min_learning_rate": learning_rate / 10})
    return config


def _null_finals(home: Path, pairs: int) -> list[float]:
    """The final eval loss of every run of the base config (both runs of each same-config pair)."""
    found = []
    for index in range(pairs):
        for offset in (1, 2):
            experiment_id = f"EXP-{index * 4 + offset:03d}"
            records = [json.loads(line) for line in (home / "runs" / f"{experiment_id}.jsonl").read_text().splitlines()]
            found.append(next(r["eval_loss"] for r in reversed(records) if r.get("eval_loss") is not None))
    return found


def _summary(found: list[dict]) -> dict:
    ratios = [f["paired_se"] / f["unpaired_se"] for f in found if f["unpaired_se"]]
    return {
        "pairs": len(found),
        "paired_different": sum(f["paired_different"] for f in found),
        "unpaired_different": sum(f["unpaired_different"] for f in found),
        "median_paired_over_unpaired_se": round(statistics.median(ratios), 3) if ratios else None,
        "median_abs_difference": round(statistics.median(abs(f["difference"]) for f in found), 4),
    }


def _table(report: dict) -> str:
    lines = [
        f"calibration: {report['steps']} steps, eval_tokens {report['eval_tokens']}, {report['date']}, "
        f"{report['machine']}, load {report['load_average'][0]} -> {report['load_average'][1]}, "
        f"{report['seconds']} s",
        "pairs                      n   'different' paired  'different' unpaired  paired se / unpaired se  |diff|",
    ]
    for kind, row in report["rows"].items():
        lines.append(
            f"{kind:<26} {row['pairs']:<3} {row['paired_different']:>3} ({row['paired_different'] / row['pairs']:.0%})"
            f"{'':>10} {row['unpaired_different']:>3} ({row['unpaired_different'] / row['pairs']:.0%})"
            f"{'':>12} {row['median_paired_over_unpaired_se']:<24} {row['median_abs_difference']}"
        )
    seed = report["seed_level"]
    lines.append(
        f"seed level: {seed['comparisons']} comparisons of two groups of {seed['group']} seeds of the same config, "
        f"{seed['different']} called beyond seed noise"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
