"""The canary: two tiny fixed training runs whose digest says whether two machines compute the same bits.

It is octlm's own step (``loop.TrainState``, ``loop.train_step``) on two fixed configs: embedding, rotary,
RMSNorm, causal attention (SDPA), SwiGLU, dropout, the masked cross-entropy, backward, gradient clipping, fused
AdamW and the batch sampler, on the CPU, in fp32, at the process's thread count. So it cannot drift from
the step: whatever kernel the step uses, the canary uses too. Whether two processors' matmuls agree depends on
the matrices' shapes (MKL picks kernels and blocking per shape: Intel's strict AVX2 branch and AMD's Zen path
agree at 128 rows and differ at 256, measured under emulation), so the canary runs a tiny config for three steps
and a wider one (256-token weight gradients, a 1,024-token vocabulary) for one. Two machines that print the
same digest under the same tier and thread count continue each other's runs bit for bit; each checkpoint of a
run under ``vendor`` or ``portable`` records it (and which of MKL's paths ran), and ``resume`` compares it with
this machine's before loading. It runs in well under a second (a minute under emulation) and leaves the
process's random generators as it found them.
"""

from __future__ import annotations

import ctypes
import hashlib
import time
from functools import lru_cache
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
import torch

from octlm.config import Config, from_dict
from octlm.config.tiers import TIERS
from octlm.core.errors import Refused
from octlm.core.records import Environment
from octlm.core.records.freeform import ConfigTree
from octlm.data.blocks import TokenBlocks
from octlm.runtime import determinism, rng
from octlm.runtime import machine as runtime
from octlm.runtime.native import mkl
from octlm.train.loop import train_step
from octlm.train.state import TrainState

CANARY_STEPS = 3
TRAINING = {"steps": 10, "warmup_steps": 1, "batch_size": 4, "grad_clip": 0.5, "seed": 7, "device": "cpu"}
RAW = {
    "tokenizer": {"vocab_size": 320},
    "model": {"context_length": 32, "d_model": 64, "n_layers": 2, "n_heads": 4, "dropout": 0.1},
    "training": TRAINING,
}
WIDE = {
    "tokenizer": {"vocab_size": 1024},
    "model": {"context_length": 64, "d_model": 128, "n_layers": 1, "n_heads": 4, "dropout": 0.1},
    "training": TRAINING,
}
PARTS = ((RAW, CANARY_STEPS), (WIDE, 1))  # (config, steps): the tiny run, then one step at wider shapes
MKL_PATHS = {"mkl_serv_intel_cpu_true": "Intel", "mkl_serv_cpuiszen": "AMD Zen"}
INTERPOSED = runtime.INTERPOSED


def canary_config(raw: ConfigTree = RAW) -> Config:
    return from_dict(raw, "canary")


def mkl_path() -> str:
    """Which of MKL's code paths this processor gets (``Intel``, ``AMD Zen``, ``generic``), asked of MKL itself
    (its CPUID vendor checks, exported by torch's CPU library); ``unknown`` where this torch has none."""
    if mkl.interposer() is not None:
        return INTERPOSED  # what MKL is told, whatever the processor (``runtime/native/mkl``, or a preloaded library)
    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        for symbol, name in MKL_PATHS.items():
            check = getattr(library, symbol)
            check.restype = ctypes.c_int
            if check():
                return name
    except (OSError, AttributeError):
        return "unknown"
    return "generic"


def _blocks(config: Config) -> TokenBlocks:
    """Fixed tokens, some of them the pad id 0 (left out of the loss), from integer arithmetic alone."""
    width, count = config.model.context_length + 1, 16
    stream = (np.arange(width * count, dtype=np.int64) * 7919 + 13) % config.tokenizer.vocab_size
    byte_table = np.ones(config.tokenizer.vocab_size, dtype=np.int64)
    return TokenBlocks(stream, width, byte_table, pad_id=0)


def _digest(state: TrainState, losses: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    tensors = [*losses, *state.model.state_dict().values()]
    for values in state.optimizer.state_dict()["state"].values():
        tensors += [values[name] for name in sorted(values)]
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _run(config: Config, steps: int) -> str:
    blocks = _blocks(config)
    state = TrainState.fresh(config, torch.device("cpu"), len(blocks))
    outputs: list[torch.Tensor] = []
    for step in range(steps):
        outputs += train_step(state, blocks, 1e-3 * (step + 1))
    return _digest(state, outputs)


@lru_cache(maxsize=4)
def digest(threads: int) -> str:
    """The canary's digest at ``threads`` threads (once per process and thread count)."""
    previous, streams = torch.get_num_threads(), rng.capture()  # every generator, a GPU's too (seeded below)
    torch.set_num_threads(threads)
    try:
        digests = [_run(canary_config(raw), steps) for raw, steps in PARTS]
        return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]
    finally:
        rng.restore(streams)
        torch.set_num_threads(previous)


def require_golden(config: Config) -> None:
    """Under a tier with golden digests (``Tier.golden``): this machine's canary at 1 thread must be the tier's for
    this torch release, or the run is refused in one line naming the tier's fallback."""
    tier = TIERS[config.training.determinism]
    if not tier.golden:
        return
    release, instead = str(torch.__version__), f"use training.determinism: {tier.fallback}"
    expected = tier.golden.get(release)
    if expected is None:
        measured = ", ".join(tier.golden)
        raise Refused(f"training.determinism: {tier.name} was measured on torch {measured}, not {release}: {instead}")
    found = digest(1)
    if found != expected:
        raise Refused(
            f"training.determinism: {tier.name}: this machine's canary is {found} at 1 thread, the tier's "
            f"{expected} (MKL: {mkl_path()}; torch {release}): its runs would not continue elsewhere; {instead}"
        )


class Golden(TypedDict):
    """The tier's golden digest for this torch release and this machine's canary at 1 thread."""

    golden: str
    at_1_thread: str


class Canary(TypedDict):
    """What ``octlm canary --json`` writes: the digest of a fixed step under the profile, and where it ran."""

    digest: str
    profile: str
    covers: str  # which machines the digest holds on
    mkl: str  # the code path MKL takes here (Intel, AMD Zen, generic)
    threads: int
    capability: str  # torch's CPU capability (AVX2, AVX512, ...)
    torch: str
    processor: str
    seconds: float
    by_threads: NotRequired[dict[str, str]]  # with --threads 1,2,4: the digest at each count
    # Under a tier with golden digests (cross-vendor): the tier's for this torch ("none": not measured) and this
    # machine's at 1 thread; a run starts only where they are equal.
    golden: NotRequired[Golden]


def run(config: Config) -> Canary:
    """``octlm canary``: the digest under ``config``'s profile and threads (this process must hold the profile)."""
    profile = config.training.determinism
    runtime.require_profile(config)
    runtime.set_threads(config)
    runtime.configure_determinism(torch.device("cpu"))
    started = time.perf_counter()
    found, path = digest(torch.get_num_threads()), mkl_path()
    golden = TIERS[profile].golden
    report: Canary = {
        "digest": found,
        "profile": determinism.describe(profile),
        "covers": determinism.covers(profile, path),
        "mkl": path,
        "threads": torch.get_num_threads(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": str(torch.__version__),
        "processor": determinism.processor(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    if golden:
        report["golden"] = {"golden": golden.get(str(torch.__version__), "none"), "at_1_thread": digest(1)}
    return report


def environment(state: TrainState) -> Environment:
    """The environment record of ``state``'s process (``runtime.environment``), with the path MKL takes (under every
    profile: ``local``'s kernels change with it too) and the canary's digest under a profile that pins kernels
    (computed once per process and thread count)."""
    training = state.config.training
    if training.determinism == "local":
        record = runtime.environment(state.device, training.precision, state.optimizer_impl)
    else:
        record = runtime.environment(
            state.device,
            training.precision,
            state.optimizer_impl,
            profile=training.determinism,
            canary=digest(torch.get_num_threads()),
        )
    record["mkl"] = mkl_path()  # under every tier: whether MKL is told the processor is Intel changes its kernels
    return record
