"""What the thread-invariant SiLU of canonical pieces costs (issue 37 item 2): the training step of a preset with
``training.micro_batches`` set, timed with the model's SwiGLUs on ``ThreadInvariantSiLU`` and on ``F.silu``, in one
process, alternating rounds, medians of this process's CPU time per step (steadier than the wall clock on a shared
box: a wait for a core is not charged), synthetic tokens as bench uses.

python benchmarks/pieces_silu.py [--preset day1] [--pieces 8] [--steps 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from octlm import config as cfg
from octlm.config.presets import preset
from octlm.tasks.bench.measure import synthetic_blocks
from octlm.train.loop import train_step
from octlm.train.model.decoder import SwiGLU
from octlm.train.state import TrainState


def timed(state: TrainState, blocks: object, steps: int, invariant: bool) -> float:
    for module in state.model.modules():
        if isinstance(module, SwiGLU):
            module.thread_invariant = invariant
    train_step(state, blocks, 1e-4)  # warm-up after the switch
    times = []
    for _ in range(steps):
        started = time.process_time()
        train_step(state, blocks, 1e-4)
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="day1")
    parser.add_argument("--pieces", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raw = preset(args.preset)
    raw.setdefault("training", {}).update({"micro_batches": args.pieces, "compile": False})
    config = cfg.from_dict(raw)
    blocks = synthetic_blocks(config)
    state = TrainState.fresh(config, torch.device("cpu"), len(blocks))
    before = os.getloadavg()[0]
    found: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for invariant in (True, False) if round_ % 2 == 0 else (False, True):
            found[invariant].append(timed(state, blocks, args.steps, invariant))
    after = os.getloadavg()[0]
    fixed, plain = statistics.median(found[True]), statistics.median(found[False])
    threads = torch.get_num_threads()
    print(f"{args.preset}, {args.pieces} pieces, eager, {threads} threads; load {before:.2f} -> {after:.2f}")
    print(
        f"F.silu:              {plain * 1000:8.1f} CPU ms/step  (rounds: {[round(t * 1000, 1) for t in found[False]]})"
    )
    print(
        f"ThreadInvariantSiLU: {fixed * 1000:8.1f} CPU ms/step  (rounds: {[round(t * 1000, 1) for t in found[True]]})"
    )
    print(f"cost: {fixed / plain:.3f}x the step")


if __name__ == "__main__":
    main()
