"""octlm's plain training step side by side with nanoGPT's model and AdamW at the same shapes, alternating rounds.

The yardstick is not part of octlm: nanoGPT's ``model.py`` (MIT) and the script that times its step,
``tools/peer_nanogpt.py``, are read at run time from the shared folder beside the repository (``../shared``
from the repository root; ``--shared DIR`` for another). Nothing of it is copied into octlm. Where it is absent,
the script says so in one line and ends with exit 2.

Each round runs every side in a fresh process of its own, in alternating order (A B, B A, ...), each with the same
thread count (``--threads``, default every core), the same shapes (the preset's layers, heads, width, context,
vocabulary and batch) and the same timing: 2 warm-up steps, then the mean of ``--steps`` steps, as
``peer_nanogpt.py`` times nanoGPT's. octlm's side is ``train_step`` on synthetic tokens (``octlm bench``'s blocks),
the seed's one-process path: the guard, the optimizer, clipping, everything a training step pays.

    python benchmarks/nanogpt_side.py --preset day1 --rounds 5 --steps 20
    python benchmarks/nanogpt_side.py --preset day2 --rounds 5 --steps 4 --sides octlm-eager,nanogpt
    python benchmarks/nanogpt_side.py --preset day2 --rounds 5 --steps 4 --sides octlm-compiled,octlm-eager

Beside every round: the 1-minute load average (the highest at its start and end) and ``others_busy_cores``, the
cores processes other than this script and its children kept busy meanwhile (``octlm.runtime.load.Meter``, as
``octlm bench`` reports it). The summary is the median over the rounds of each side's tokens/s, the ratio of the
first side's to the second's, and the spread of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("octlm-eager", "octlm-compiled", "nanogpt")
WARM_UP_STEPS = 2


def fail(message: str) -> NoReturn:
    """One line on stderr, exit 2."""
    print(message, file=sys.stderr)
    sys.exit(2)


def shared_folder(given: str | None) -> Path:
    """The shared folder holding nanoGPT's model and the peer script, or one line and exit 2."""
    folder = Path(given) if given else ROOT.parent / "shared"
    peer, model = folder / "tools" / "peer_nanogpt.py", folder / "peers" / "nanogpt" / "model.py"
    if not (peer.is_file() and model.is_file()):
        missing = peer if not peer.is_file() else model
        fail(
            f"nanogpt_side: the yardstick is absent: no {missing}; pass --shared DIR (the folder holding "
            "tools/peer_nanogpt.py and peers/nanogpt/model.py)"
        )
    return folder


def shapes(preset: str) -> dict[str, int]:
    """The preset's shapes, as nanoGPT's script takes them."""
    from octlm.core.home import Home
    from octlm.tasks.bench import measure as bench

    config = bench.resolve_config(Home(Path.cwd()), None, preset)
    model = config.model
    return {
        "layers": model.n_layers,
        "heads": model.n_heads,
        "dim": model.d_model,
        "context": model.context_length,
        "batch": config.training.batch_size,
        "vocab": config.tokenizer.vocab_size,
    }


def octlm_child(preset: str, compiled: bool, steps: int, threads: int) -> None:
    """A side's process: octlm's plain step at the preset's shapes, timed as ``peer_nanogpt.py`` times nanoGPT's;
    one JSON line."""
    import torch

    from octlm.core.home import Home
    from octlm.runtime import machine as runtime
    from octlm.tasks.bench import measure as bench
    from octlm.tasks.bench import plan as bench_plan
    from octlm.train.loop import train_step
    from octlm.train.state import TrainState

    config = bench_plan.with_choices(bench.resolve_config(Home(Path.cwd()), None, preset), compiled)
    config = config.with_keys({"training.micro_batches": 0}, "nanogpt_side")  # the plain step, whatever the preset
    device = runtime.prepare_process(config)
    torch.set_num_threads(threads)  # the same count as nanoGPT's process, whatever the box's load says
    blocks = bench.synthetic_blocks(config)
    state = TrainState.fresh(config, device, len(blocks))
    for _ in range(WARM_UP_STEPS):  # kernels, allocator, optimizer state, compilation
        train_step(state, blocks, 3e-4)
    started = time.perf_counter()
    for _ in range(steps):
        train_step(state, blocks, 3e-4)
    seconds = (time.perf_counter() - started) / steps
    tokens = state.tokens_per_step
    print(
        json.dumps(
            {
                "ms_per_step": seconds * 1000,
                "tokens_per_second": tokens / seconds,
                "params": state.model.parameter_count(),
                "threads": torch.get_num_threads(),
            }
        )
    )


def command(side: str, preset: str, steps: int, threads: int, shared: Path) -> list[str]:
    if side == "nanogpt":
        options = [f"--{key}={value}" for key, value in shapes(preset).items()]
        return [sys.executable, str(shared / "tools" / "peer_nanogpt.py"), *options, f"--steps={steps}"]
    child = ["--child", side, "--preset", preset, "--steps", str(steps), "--threads", str(threads)]
    return [sys.executable, str(Path(__file__).resolve()), *child]


def run_side(argv: list[str], threads: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if done.returncode:
        fail(f"nanogpt_side: {argv[1]} ended with exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="day1")
    parser.add_argument("--sides", default="octlm-eager,nanogpt", help=f"two of {', '.join(SIDES)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side per round")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--shared", help="the folder with tools/peer_nanogpt.py and peers/nanogpt (../shared)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=SIDES[:2], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return octlm_child(args.preset, args.child == "octlm-compiled", args.steps, args.threads)
    sides = args.sides.split(",")
    if len(sides) != 2 or not set(sides) <= set(SIDES):
        fail(f"nanogpt_side: --sides takes two of {', '.join(SIDES)}, got {args.sides!r}")
    shared = shared_folder(args.shared) if "nanogpt" in sides else None
    sys.path.insert(0, str(ROOT))
    from octlm.runtime import load

    rounds = []
    for number in range(args.rounds):
        meter, figures = load.Meter(), {}
        for side in sides if number % 2 == 0 else sides[::-1]:
            figures[side] = run_side(command(side, args.preset, args.steps, args.threads, shared or ROOT), args.threads)
        busy = meter.stop()
        ratio = figures[sides[0]]["tokens_per_second"] / figures[sides[1]]["tokens_per_second"]
        rounds.append({"figures": figures, "ratio": ratio, "load": busy.load_average, "others_busy_cores": busy.others})
        if not args.json:
            cells = "  ".join(f"{side} {figures[side]['ms_per_step']:9.1f} ms" for side in sides)
            loads = f"load {busy.load_average}  others_busy_cores {busy.others}"
            print(f"round {number + 1}: {cells}  ratio {ratio:.3f}  {loads}")
    summary = summarise(args, sides, rounds)
    print(json.dumps(summary, indent=2) if args.json else render(summary))


def summarise(args: argparse.Namespace, sides: list[str], rounds: list[dict]) -> dict:
    import torch

    ratios = [r["ratio"] for r in rounds]
    medians = {side: statistics.median(r["figures"][side]["tokens_per_second"] for r in rounds) for side in sides}
    return {
        "preset": args.preset,
        "sides": sides,
        "threads": args.threads,
        "steps": args.steps,
        "torch": torch.__version__,
        "params": {side: rounds[0]["figures"][side]["params"] for side in sides},
        "tokens_per_second": medians,
        "ratio_median": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "spread": (max(ratios) - min(ratios)) / statistics.median(ratios),
        "load": [r["load"] for r in rounds],
        "others_busy_cores": [r["others_busy_cores"] for r in rounds],
        "rounds": rounds,
    }


def render(summary: dict) -> str:
    first, second = summary["sides"]
    low, high = summary["ratio_range"]
    return (
        f"{summary['preset']}: {first} / {second} tokens/s, median of {len(summary['rounds'])} rounds: "
        f"{summary['ratio_median']:.3f}x (rounds {low:.3f}-{high:.3f}, spread {summary['spread']:.0%}); "
        f"medians {summary['tokens_per_second'][first]:,.0f} and {summary['tokens_per_second'][second]:,.0f} "
        f"tokens/s; parameters {summary['params'][first]:,} and {summary['params'][second]:,}; "
        f"{summary['threads']} threads, torch {summary['torch']}; load {min(summary['load'])}-{max(summary['load'])}, "
        f"others_busy_cores {summary['others_busy_cores']}"
    )


if __name__ == "__main__":
    main()
