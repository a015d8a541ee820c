"""octlm's plain training step side by side with nanoGPT's model and AdamW at the same shapes, alternating rounds.

The yardstick is not part of octlm: nanoGPT's ``model.py`` (MIT) and the script that times its step,
``tools/peer_nanogpt.py``, are read at run time from the shared folder beside the repository (``../shared``
from the repository root; ``--shared DIR`` for another). Nothing of it is copied into octlm. Where it is absent,
the script says so in one line and ends with exit 2.

Each round runs every side in a fresh process of its own, in alternating order (A B, B A, ...), each with the same
thread count (``--threads``, default every core), the same shapes (the preset's layers, heads, width, context,
vocabulary and batch) and the same timing: 2 warm-up steps, then the mean of ``--steps`` steps, as
``peer_nanogpt.py`` times nanoGPT's. octlm's side is ``train_step`` on synthetic tokens (``octlm bench``'s blocks),
the seed's one-process path: the guard, the optimizer, clipping, everything a training step pays. nanoGPT's side
is ``peer_nanogpt.py``'s step (``GPT`` and ``configure_optimizers`` from ``peers/nanogpt/model.py``, clipping at 1.0),
run in a process of its own that loads ``model.py`` from the shared folder as that script does, so that it can time
the CPU seconds of a step too: on a box other jobs keep busy, the wall time of a step moves by tens of percent
between two rounds, its CPU time much less, so both ratios are printed.

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
from collections.abc import Callable
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
    print(json.dumps(timed(lambda: train_step(state, blocks, 3e-4), steps, state.tokens_per_step)))
    print(json.dumps({"params": state.model.parameter_count(), "threads": torch.get_num_threads()}))


def timed(step: Callable[[], object], steps: int, tokens: int) -> dict[str, float]:
    """The mean wall and CPU seconds (every thread of the process) of ``steps`` steps, after the warm-up."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    seconds, cpu_seconds = (time.perf_counter() - started) / steps, (time.process_time() - cpu) / steps
    return {"ms_per_step": seconds * 1000, "cpu_ms_per_step": cpu_seconds * 1000, "tokens_per_second": tokens / seconds}


def nanogpt_child(preset: str, steps: int, threads: int, shared: Path) -> None:
    """nanoGPT's side: ``peer_nanogpt.py``'s step, its model read from ``peers/nanogpt/model.py`` at run time."""
    import torch

    sys.path.insert(0, str(shared / "peers" / "nanogpt"))
    from model import GPT, GPTConfig  # type: ignore[import-not-found]  # nanoGPT's, read from the shared folder

    torch.set_num_threads(threads)
    a = shapes(preset)
    torch.manual_seed(0)
    model_config = GPTConfig(
        block_size=a["context"], vocab_size=a["vocab"], n_layer=a["layers"], n_head=a["heads"], n_embd=a["dim"],
        dropout=0.0, bias=False,
    )  # fmt: skip
    model = GPT(model_config)
    optimizer = model.configure_optimizers(0.1, 3e-4, (0.9, 0.95), "cpu")
    x = torch.randint(0, a["vocab"], (a["batch"], a["context"]))
    y = torch.randint(0, a["vocab"], (a["batch"], a["context"]))

    def step() -> None:  # peer_nanogpt.py's
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(WARM_UP_STEPS):
        step()
    print(json.dumps(timed(step, steps, a["batch"] * a["context"])))
    print(json.dumps({"params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads()}))


def command(side: str, preset: str, steps: int, threads: int, shared: Path) -> list[str]:
    child = ["--child", side, "--preset", preset, "--steps", str(steps), "--threads", str(threads)]
    return [sys.executable, str(Path(__file__).resolve()), *child, "--shared", str(shared)]


def run_side(argv: list[str], threads: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if done.returncode:
        fail(f"nanogpt_side: {argv[1]} ended with exit {done.returncode}: {done.stderr.strip()[-400:]}")
    lines = done.stdout.strip().splitlines()
    return {**json.loads(lines[-2]), **json.loads(lines[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="day1")
    parser.add_argument("--sides", default="octlm-eager,nanogpt", help=f"two of {', '.join(SIDES)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side per round")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--shared", help="the folder with tools/peer_nanogpt.py and peers/nanogpt (../shared)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "nanogpt":
        return nanogpt_child(args.preset, args.steps, args.threads, Path(args.shared))
    if args.child:
        return octlm_child(args.preset, args.child == "octlm-compiled", args.steps, args.threads)
    sides = args.sides.split(",")
    if len(sides) != 2 or not set(sides) <= set(SIDES):
        fail(f"nanogpt_side: --sides takes two of {', '.join(SIDES)}, got {args.sides!r}")
    shared = shared_folder(args.shared) if "nanogpt" in sides else ROOT
    sys.path.insert(0, str(ROOT))
    from octlm.runtime import load

    rounds = []
    for number in range(args.rounds):
        meter, figures = load.Meter(), {}
        for side in sides if number % 2 == 0 else sides[::-1]:
            figures[side] = run_side(command(side, args.preset, args.steps, args.threads, shared), args.threads)
        busy = meter.stop()
        ratio = figures[sides[0]]["tokens_per_second"] / figures[sides[1]]["tokens_per_second"]
        cpu_ratio = figures[sides[1]]["cpu_ms_per_step"] / figures[sides[0]]["cpu_ms_per_step"]
        rounds.append(
            {
                "figures": figures,
                "ratio": ratio,
                "cpu_ratio": cpu_ratio,
                "load": busy.load_average,
                "others_busy_cores": busy.others,
            }
        )
        if not args.json:
            cells = "  ".join(
                f"{side} {figures[side]['ms_per_step']:9.1f} ms ({figures[side]['cpu_ms_per_step']:.1f} CPU)"
                for side in sides
            )
            loads = f"load {busy.load_average}  others_busy_cores {busy.others}"
            print(f"round {number + 1}: {cells}  ratio {ratio:.3f} (CPU {cpu_ratio:.3f})  {loads}")
    summary = summarise(args, sides, rounds)
    print(json.dumps(summary, indent=2) if args.json else render(summary))


def summarise(args: argparse.Namespace, sides: list[str], rounds: list[dict]) -> dict:
    import torch

    ratios, cpu_ratios = [r["ratio"] for r in rounds], [r["cpu_ratio"] for r in rounds]
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
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "cpu_ratio_range": [min(cpu_ratios), max(cpu_ratios)],
        "cpu_ms_per_step": {
            side: statistics.median(r["figures"][side]["cpu_ms_per_step"] for r in rounds) for side in sides
        },
        "load": [r["load"] for r in rounds],
        "others_busy_cores": [r["others_busy_cores"] for r in rounds],
        "rounds": rounds,
    }


def render(summary: dict) -> str:
    first, second = summary["sides"]
    (low, high), (cpu_low, cpu_high) = summary["ratio_range"], summary["cpu_ratio_range"]
    return (
        f"{summary['preset']}: {first} / {second} tokens/s, median of {len(summary['rounds'])} rounds: "
        f"{summary['ratio_median']:.3f}x (rounds {low:.3f}-{high:.3f}, spread {summary['spread']:.0%}); by CPU time "
        f"a step {summary['cpu_ratio_median']:.3f}x ({cpu_low:.3f}-{cpu_high:.3f}); "
        f"medians {summary['tokens_per_second'][first]:,.0f} and {summary['tokens_per_second'][second]:,.0f} "
        f"tokens/s; parameters {summary['params'][first]:,} and {summary['params'][second]:,}; "
        f"{summary['threads']} threads, torch {summary['torch']}; load {min(summary['load'])}-{max(summary['load'])}, "
        f"others_busy_cores {summary['others_busy_cores']}"
    )


if __name__ == "__main__":
    main()
