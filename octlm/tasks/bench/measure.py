"""``octlm bench``: training throughput against this machine's own dense matmul peak, in one run.

Synthetic tokens (the data path is not what is timed). Medians throughout. Reports ms per step, tokens/s, model
FLOP/s (6 x parameters x tokens plus attention), MFU = model FLOP/s / measured matmul peak,
checkpoint save and load time and size, and the time to the first step after a resume
against that of a fresh start. ``bench --nproc N`` (one process against N ranks) is ``bench_ranks``.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np
import torch

from octlm.config import Config
from octlm.core import layout
from octlm.data.blocks import TokenBlocks
from octlm.data.fingerprints import Fingerprints
from octlm.runtime import machine as runtime
from octlm.tasks.bench.plan import resolve_config as resolve_config  # re-exported: benchmarks/ import it from here
from octlm.tasks.bench.plan import with_choices
from octlm.tasks.bench.records import BenchReport, Header, Machine, Measured
from octlm.train import checkpoint
from octlm.train.loop import train_step
from octlm.train.state import TrainState, load_record, record_of


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# Square sizes whose product rates are sampled; the peak is the best size's median. On this
# project's 2-vCPU machine 2048 beats 1024 by about 20% in interleaved runs, and 3072 or 4096 by
# nothing; measuring one size alone would understate the peak and so overstate MFU.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PEAK_SIZES = {"cuda": (4096, 8192), "mps": (2048, 4096)}
CPU_PEAK_SIZES = (1024, 2048)


class MatmulPeak:
    """Dense square matmul FLOP/s for one dtype, sampled in short bursts between training steps,
    so that a machine whose speed drifts (turbo, noisy neighbours) moves both sides of MFU alike."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seconds_per_size: float = 0.12):
        self.device, self.seconds = device, seconds_per_size
        self.operands = {
            size: (torch.randn(size, size, device=device).to(dtype), torch.randn(size, size, device=device).to(dtype))
            for size in PEAK_SIZES.get(device.type, CPU_PEAK_SIZES)
        }
        self.rates: dict[int, list[float]] = {size: [] for size in self.operands}
        for a, b in self.operands.values():  # warm-up: kernel selection, page faults
            torch.mm(a, b)
        sync(device)

    def burst(self) -> None:
        for size, (a, b) in self.operands.items():
            count, start = 0, time.perf_counter()
            while True:
                torch.mm(a, b)
                sync(self.device)
                count += 1
                elapsed = time.perf_counter() - start
                if elapsed >= self.seconds:
                    break
            self.rates[size].append(count * 2 * size**3 / elapsed)

    def by_size(self) -> dict[int, float]:
        return {size: statistics.median(rates) for size, rates in self.rates.items()}

    def peak(self) -> float:
        return max(self.by_size().values())


def flops_per_token(config: Config, parameters: int) -> float:
    """6N for the matmuls of forward and backward, plus causal attention's 12 * layers * d * T."""
    model = config.model
    return 6 * parameters + 12 * model.n_layers * model.d_model * model.context_length


def synthetic_blocks(config: Config, count: int = 64) -> TokenBlocks:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(
        3, config.tokenizer.vocab_size, (count, config.model.context_length + 1), generator=generator
    )
    byte_table = np.ones(config.tokenizer.vocab_size, dtype=np.int64)
    return TokenBlocks(tokens.reshape(-1).numpy(), tokens.shape[1], byte_table, pad_id=-1)  # no padding to leave out


def _time_steps(state: TrainState, blocks: TokenBlocks, steps: int, peak: MatmulPeak) -> list[tuple[float, float]]:
    """Seconds of each step, wall clock and this process's CPU time, with a burst of the matmul peak after each
    (synchronised per step: on a CPU the step is synchronous anyway). The CPU time is the steadier figure on a
    shared box: a process that waits for a core is not charged for the wait."""
    for _ in range(2):  # warm-up: allocator, kernels, optimizer state
        train_step(state, blocks, 1e-4)
    sync(state.device)
    peak.burst()
    times = []
    for _ in range(steps):
        start, cpu = time.perf_counter(), time.process_time()
        train_step(state, blocks, 1e-4)
        sync(state.device)
        times.append((time.perf_counter() - start, time.process_time() - cpu))
        peak.burst()
    return times


def measure(config: Config, precision: str, steps: int) -> Measured:
    config = config.with_keys({"training.precision": precision}, "--precision")
    device = runtime.prepare_process(config)  # as training does: determinism, the allocator
    blocks = synthetic_blocks(config)
    started = time.perf_counter()
    state = TrainState.fresh(config, device, len(blocks))
    train_step(state, blocks, 1e-4)
    sync(device)
    first_fresh = time.perf_counter() - started
    peaks = MatmulPeak(device, DTYPES[precision])
    times = _time_steps(state, blocks, steps, peaks)
    seconds, cpu_seconds = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    peak = peaks.peak()
    model_flops = flops_per_token(config, state.model.parameter_count()) * state.tokens_per_step / seconds
    costs = _checkpoint_costs(state, blocks)
    return {
        "precision": precision,
        "parameters": state.model.parameter_count(),
        "ms_per_step": round(seconds * 1000, 2),
        "cpu_ms_per_step": round(cpu_seconds * 1000, 2),
        "tokens_per_second": round(state.tokens_per_step / seconds, 1),
        "model_flops_per_second": model_flops,
        "matmul_peak_flops_per_second": peak,
        "matmul_peak_by_size": {str(size): rate for size, rate in peaks.by_size().items()},
        "mfu": float(f"{model_flops / peak:.4g}"),  # four significant digits: a tiny model's is 1e-5
        "checkpoint_bytes": int(costs["bytes"]),
        "checkpoint_save_seconds": round(costs["save"], 4),
        "checkpoint_load_seconds": round(costs["load"], 4),
        "checkpoint_cost_at_interval": round(costs["save"] / (seconds * config.checkpoint.interval), 5),
        "first_step_fresh_seconds": round(first_fresh, 4),
        "first_step_resumed_seconds": round(costs["first_resumed"], 4),
        "resume_to_fresh_ratio": round(costs["first_resumed"] / first_fresh, 3),
    }


def _checkpoint_costs(state: TrainState, blocks: TokenBlocks) -> dict[str, float]:
    """Save and load a whole checkpoint record, then time the first step of a state resumed from it."""
    fingerprints = Fingerprints(state.config.fingerprint, "synthetic", "synthetic")
    record = record_of(state, experiment=state.config.id, kind="bench", fingerprints=fingerprints, metrics={})
    with tempfile.TemporaryDirectory() as folder:
        path = layout.checkpoint_path(Path(folder), state.step)
        start = time.perf_counter()
        _, size = checkpoint.save(path, record)
        save_seconds = time.perf_counter() - start
        start = time.perf_counter()
        loaded = checkpoint.read(path)
        load_seconds = time.perf_counter() - start
    started = time.perf_counter()
    resumed = TrainState.fresh(state.config, state.device, len(blocks))
    load_record(resumed, loaded)
    train_step(resumed, blocks, 1e-4)
    sync(state.device)
    first_resumed = time.perf_counter() - started + load_seconds
    return {"bytes": size, "save": save_seconds, "load": load_seconds, "first_resumed": first_resumed}


def header(config: Config, parameters: int, steps: int, **more: int | str | None) -> Header:
    """What every bench report starts with: the model, the (global) batch, the steps timed and this machine."""
    return {
        "experiment": config.id or None,
        "preset": config.preset or None,
        "parameters": parameters,
        "tokens_per_step": config.training.batch_size * config.model.context_length,
        "steps_timed": steps,
        "compile": config.training.compile,
        "machine": cast(
            Machine,
            {  # more: a plain bench's threads and tier, bench --nproc's cores
                "platform": platform.platform(),
                "processor": platform.processor() or platform.machine(),
                **more,
                "torch": str(torch.__version__),
                "device": str(runtime.select_device(config.training.device)),
            },
        ),
    }


def run(config: Config, precisions: list[str], steps: int, compile: bool | None = None) -> BenchReport:
    config = with_choices(config, compile)
    results = [measure(config, precision, steps) for precision in precisions]
    head = header(
        config,
        results[0]["parameters"],
        steps,
        threads=torch.get_num_threads(),
        determinism=config.training.determinism,
    )
    report: BenchReport = {**head, "results": results}
    by = {r["precision"]: r for r in results}
    if "fp32" in by and "bf16" in by:
        report["bf16_over_fp32_tokens_per_second"] = round(
            by["bf16"]["tokens_per_second"] / by["fp32"]["tokens_per_second"], 3
        )
        report["bf16_over_fp32_matmul_peak"] = round(
            by["bf16"]["matmul_peak_flops_per_second"] / by["fp32"]["matmul_peak_flops_per_second"], 3
        )
    return report
