"""``octlm bench --nproc N``: the training step of one model on one process and on N ranks, timed in one run.

The process the user started (the launcher) times the step on one process first, then starts N ranks
(``launch.run``), each running ``bench ... --ranks-report FILE``. Every rank takes its slice of the same
global batch (``training.batch_size``), the gradients are summed as in training (``Ranks.reduce_gradients``),
and rank 0 writes what the ranks measured to FILE, which the launcher reads and reports next to its own row.

Both rows are timed alike: synthetic tokens, 2 warm-up steps, then K steps each started together (a barrier)
and ended on the device; a step's time is that of its slowest rank, and the figure is the median over steps.
Unlike a plain ``bench``, no matmul bursts run between the steps (on N ranks they would compete for the cores
with the other ranks' steps), so these rows carry no MFU.

The all-reduce time is the time spent in the gradient sum by the last rank to reach it: the sum itself, not the
wait for a slower rank (``all_reduce_longest_ms``, the rank that waited longest, includes that wait). The
loss's one-number sum (``Ranks.total``) is not counted.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from octlm.config import Config
from octlm.core.errors import OctlmError, Relayed
from octlm.runtime import distributed, launch
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.tasks.bench.measure import header, sync, synthetic_blocks
from octlm.train.loop import train_step
from octlm.train.state import TrainState

WARM_UP_STEPS = 2


@dataclass(frozen=True)
class TimedRanks(Ranks):
    """``Ranks`` that time every gradient all-reduce (seconds, in call order)."""

    reduces: list[float] = field(default_factory=list, compare=False)

    @classmethod
    def of(cls, ranks: Ranks) -> TimedRanks:
        return cls(ranks.world_size, ranks.rank, ranks.local_rank, ranks.nnodes, ranks.fault)

    def reduce_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        device = parameters[0].device if parameters else torch.device("cpu")
        sync(device)  # on a GPU: time the sum, not the backward queued before it
        start = time.perf_counter()
        super().reduce_gradients(parameters)
        sync(device)
        self.reduces.append(time.perf_counter() - start)


def timed_steps(config: Config, precision: str, steps: int, ranks: Ranks) -> dict[str, Any]:
    """One precision's step timed on ``ranks`` (one process: ``Ranks()``); the figures are the same on every rank."""
    config = config.with_keys({"training.precision": precision}, "--precision")
    device = runtime.prepare_process(config)  # as training does: determinism, the allocator
    blocks = synthetic_blocks(config)
    timed = TimedRanks.of(ranks)
    state = TrainState.fresh(config, device, len(blocks), ranks=timed)
    for _ in range(WARM_UP_STEPS):  # allocator, kernels, optimizer state (and compilation, when compiled)
        train_step(state, blocks, 1e-4)
    sync(device)
    timed.reduces.clear()
    times = []
    for _ in range(steps):
        timed.barrier()  # the ranks start each step together
        start = time.perf_counter()
        train_step(state, blocks, 1e-4)
        sync(device)
        times.append(time.perf_counter() - start)
    mine = {"steps": times, "reduces": list(timed.reduces), "threads": torch.get_num_threads()}
    row = figures(precision, state.tokens_per_step, timed.gather(mine))
    return {**row, "parameters": state.model.parameter_count()}


def figures(precision: str, tokens_per_step: int, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from every rank's step and all-reduce times (``per_rank``, in rank order)."""
    world = len(per_rank)
    seconds = statistics.median(max(step) for step in zip(*(r["steps"] for r in per_rank), strict=True))
    reduces = list(zip(*(r["reduces"] for r in per_rank), strict=True)) if world > 1 else []
    reduce = statistics.median(min(step) for step in reduces) if reduces else 0.0
    longest = statistics.median(max(step) for step in reduces) if reduces else 0.0
    return {
        "precision": precision,
        "ranks": world,
        "threads_per_rank": per_rank[0]["threads"],
        "ms_per_step": round(seconds * 1000, 2),
        "tokens_per_second": round(tokens_per_step / seconds, 1),
        "all_reduce_ms": round(reduce * 1000, 3),
        "all_reduce_longest_ms": round(longest * 1000, 3),
        "all_reduce_share": round(reduce / seconds, 4),
    }


def compare(
    config: Config, precisions: list[str], steps: int, spec: launch.Launch, argv: list[str], run_id: str
) -> dict[str, Any]:
    """The launcher: each precision on one process here, then on ``spec.nproc`` ranks (``argv`` runs ``bench``
    in each, less ``--ranks-report``); a row of each, the ranks' with their speed-up over one process."""
    config.training.check_split(spec.world_size)  # one line (exit 2) before anything is timed or started
    single = [timed_steps(config, precision, steps, Ranks()) for precision in precisions]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # leave the ranks the memory this process no longer needs
    ranked = _launch(spec, argv, run_id)["results"]
    rows = []
    for one, many in zip(single, ranked, strict=True):
        rows += [
            {**one, "speed_up": 1.0},
            {**many, "speed_up": round(many["tokens_per_second"] / one["tokens_per_second"], 3)},
        ]
    return report(config, steps, rows)


def _launch(spec: launch.Launch, argv: list[str], run_id: str) -> dict[str, Any]:
    """Run the ranks and read what rank 0 wrote; their exit code when they fail (rank 0 said why)."""
    with tempfile.TemporaryDirectory(prefix="octlm-bench-") as folder:
        path = Path(folder) / "ranks.json"
        code = launch.run(spec, [*argv, "--ranks-report", str(path)], run_id)
        if code:
            raise Relayed(code)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise OctlmError(f"the {spec.world_size} ranks ended without a report") from None


def in_ranks(config: Config, precisions: list[str], steps: int, out: Path | None) -> dict[str, Any] | None:
    """A rank: time every precision on the ranks of this group; rank 0 writes the report to ``out`` (else returns
    it, for a group another launcher started); every other rank returns None."""
    ranks = distributed.current()
    try:
        rows = [timed_steps(config, precision, steps, ranks) for precision in precisions]
    finally:
        distributed.leave()
    if not ranks.leader:
        return None
    result = report(config, steps, [{**row, "speed_up": None} for row in rows])
    if out is None:
        return result
    temporary = out.with_name(out.name + ".part")
    temporary.write_text(json.dumps(result), encoding="utf-8")
    os.replace(temporary, out)
    return None


def report(config: Config, steps: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    head = header(config, rows[0]["parameters"], steps, cores=os.cpu_count())
    return {**head, "nproc": max(row["ranks"] for row in rows), "results": rows}
