"""``octlm bench --nproc N``: the training step of one model on one process and on N ranks, per-rank slices and
canonical pieces (``training.micro_batches``), timed in one run.

The process the user started measures nothing itself: it runs each variant (``rounds.variants``) in processes of
its own, alternating round after round (``rounds.order``), at equal total threads: one process of N x t threads, or
N ranks (``launch.run``) of t each. Each runs ``bench ... --micro-batches K --threads T --ranks-report FILE``; every
rank takes its part of the same global batch (``training.batch_size``), the gradients are summed as in training,
and rank 0 writes what the ranks measured to FILE, which the user's process reads.

Every variant is timed alike: synthetic tokens, 2 warm-up steps, then K steps each started together (a barrier)
and ended on the device; a step's time is that of its slowest rank, and the figure is the median over steps, then
the median over rounds. Unlike a plain ``bench``, no matmul bursts run between the steps (on N ranks they would
compete for the cores with the other ranks' steps), so these rows carry no MFU.

The sum time (``all_reduce_ms``) is the time spent summing the gradients by the last rank to reach the sum: the sum
itself, not the wait for a slower rank (``all_reduce_longest_ms``, the rank that waited longest, includes that
wait). Per rank it is the flat all-reduce; with canonical pieces everything that combining the pieces costs
(flattening each piece's gradients, the tree's additions, the gather). The loss's one-number sum is not counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from octlm.config import Config
from octlm.core.errors import OctlmError
from octlm.core.reporting import counted
from octlm.runtime import determinism, distributed, launch, load
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.runtime.pieces import PieceSum
from octlm.tasks.bench import rounds as bench_rounds
from octlm.tasks.bench.measure import header, sync, synthetic_blocks
from octlm.tasks.bench.plan import variant
from octlm.tasks.bench.records import PrecisionFigures, RanksReport, RanksRow, RankTimes
from octlm.train.loop import train_step
from octlm.train.state import TrainState

WARM_UP_STEPS = 2


class VariantFailed(OctlmError):
    """A variant's process (or its rank 0) ended with a code of its own, having said why on stderr: the command
    ends with that code and says nothing more."""

    def __init__(self, exit_code: int):
        super().__init__(f"a variant of bench ended with exit {exit_code}")
        self.exit_code = exit_code


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

    def piece_sum(self, pieces: int) -> PieceSum:
        return PieceSum(pieces, self, clock=self.reduces)  # each step's combining time


def timed_steps(config: Config, precision: str, steps: int, ranks: Ranks) -> RanksRow:
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
    mine: RankTimes = {"steps": times, "reduces": list(timed.reduces), "threads": torch.get_num_threads()}
    row = figures(precision, state.tokens_per_step, timed.gather(mine))
    return {**row, "parameters": state.model.parameter_count(), "speed_up": None}


def figures(precision: str, tokens_per_step: int, per_rank: list[RankTimes]) -> PrecisionFigures:
    """One row from every rank's step and all-reduce times (``per_rank``, in rank order)."""
    world = len(per_rank)
    seconds = statistics.median(max(step) for step in zip(*(r["steps"] for r in per_rank), strict=True))
    reduces = list(zip(*(r["reduces"] for r in per_rank), strict=True))  # none on one process without pieces
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


def pieces_for(config: Config, world_size: int, pieces: int | None) -> int:
    """The canonical pieces to time (0: none): ``--micro-batches``, else the config's, else the world size; checked
    against the batch and the world size (one line, exit 2, before anything runs)."""
    chosen = pieces if pieces is not None else (config.training.micro_batches or world_size)
    if pieces is None and config.training.batch_size % chosen:
        return 0  # the batch does not cut into one piece per rank: no canonical rows unless asked for
    if chosen:
        variant(config, chosen, None).training.check_split(world_size)
    return chosen


def compare(
    config: Config,
    precisions: list[str],
    steps: int,
    spec: launch.Launch,
    argv: list[str],
    run_id: str,
    rounds: int = 2,
    pieces: int | None = None,
) -> RanksReport:
    """The user's process: every variant (``rounds.variants``) in processes of its own, ``rounds`` times, alternating
    (``argv`` runs ``bench`` in each, less the variant's options); a row per precision and variant, with the speed-up
    over one process, the spread over the rounds and the load beside it."""
    variant(config, 0, None).training.check_split(spec.world_size)  # one line (exit 2) before anything starts
    chosen = pieces_for(config, spec.world_size, pieces)
    planned = bench_rounds.variants(spec.world_size, chosen, _threads_per_rank(spec.nproc))
    runs = []
    for each in bench_rounds.order(planned, rounds):
        meter = load.Meter()
        found = _run_variant(each, argv, run_id)
        runs.append((each, found, meter.stop()))
    rows = bench_rounds.summarise(runs, planned)
    warning = bench_rounds.load_warning(rows, os.cpu_count() or 1)
    return {**report(config, steps, rows), "rounds": rounds, "load_warning": warning}


def _threads_per_rank(nproc: int) -> int:
    """Each rank's threads: ``OMP_NUM_THREADS`` when it is a number, else the cores shared out (at least 1)."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() and int(given) > 0 else max(1, (os.cpu_count() or 1) // nproc)


def _run_variant(each: bench_rounds.Variant, argv: list[str], run_id: str) -> RanksReport:
    """One variant's processes, and what its rank 0 wrote; their exit code when they fail (rank 0 said why)."""
    options = ["--micro-batches", str(each.pieces), "--threads", str(each.threads)]
    with tempfile.TemporaryDirectory(prefix="octlm-bench-") as folder, _without_profile():
        path = Path(folder) / "ranks.json"
        command = [*argv, *options, "--ranks-report", str(path)]
        if each.ranks > 1:
            code = launch.run(launch.Launch(each.ranks), command, run_id, threads=each.threads)
        else:
            env = {**os.environ, "OMP_NUM_THREADS": str(each.threads)}
            code = subprocess.run(launch.octlm_command(command), env=env, stdin=subprocess.DEVNULL).returncode
        if code:
            raise VariantFailed(code)
        try:
            return cast(RanksReport, json.loads(path.read_text(encoding="utf-8")))  # our own rank 0 wrote it
        except (OSError, ValueError):
            raise OctlmError(f"{counted(each.ranks, 'rank')} with {each.mode} ended without a report") from None


@contextlib.contextmanager
def _without_profile() -> Iterator[None]:
    """No determinism settings of this process for the variants: each pins its own (pieces add MKL's strict mode)."""
    saved = {key: os.environ.pop(key) for key in determinism.settings("portable", pieces=True) if key in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def in_ranks(config: Config, precisions: list[str], steps: int, out: Path | None) -> RanksReport | None:
    """A variant's process, or a rank of one: time every precision on the ranks of this group (one process: a group
    of one); rank 0 writes the report to ``out`` (else returns it, for a group another launcher started); every
    other rank returns None."""
    ranks = distributed.current()
    try:
        rows = [timed_steps(config, precision, steps, ranks) for precision in precisions]
    finally:
        distributed.leave()
    if not ranks.leader:
        return None
    result = report(config, steps, rows)
    if out is None:
        return result
    temporary = out.with_name(out.name + ".part")
    temporary.write_text(json.dumps(result), encoding="utf-8")
    os.replace(temporary, out)
    return None


def report(config: Config, steps: int, rows: list[RanksRow]) -> RanksReport:
    head = header(config, rows[0]["parameters"], steps, cores=os.cpu_count())
    return {**head, "nproc": max(row["ranks"] for row in rows), "results": rows}
