"""The canary: a tiny fixed training run whose digest says whether two machines compute the same bits.

It is octlm's own step (``loop.TrainState``, ``loop.train_step``) on a fixed tiny config: embedding, rotary,
RMSNorm, causal attention (SDPA), SwiGLU, dropout, the masked cross-entropy, backward, gradient clipping, fused
AdamW and the batch sampler, on the CPU, in fp32, at the process's thread count. So it cannot drift from
the step: whatever kernel the step uses, the canary uses too. Two machines that print the same digest under
the same profile and thread count continue each other's runs bit for bit; each checkpoint of a portable run
records it, and ``resume`` compares it with this machine's before loading. It runs in a fraction of a second
and leaves the process's random generators as it found them.
"""

from __future__ import annotations

import hashlib
import time
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from octlm.config import Config, from_dict
from octlm.data.blocks import TokenBlocks
from octlm.runtime import determinism, rng
from octlm.runtime import machine as runtime
from octlm.train.loop import train_step
from octlm.train.state import TrainState

STEPS = 3
RAW = {
    "tokenizer": {"vocab_size": 320},
    "model": {"context_length": 32, "d_model": 64, "n_layers": 2, "n_heads": 4, "dropout": 0.1},
    "training": {"steps": 10, "warmup_steps": 1, "batch_size": 4, "grad_clip": 0.5, "seed": 7, "device": "cpu"},
}


def canary_config() -> Config:
    return from_dict(RAW, "canary")


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


@lru_cache(maxsize=4)
def digest(threads: int) -> str:
    """The canary's digest at ``threads`` threads (once per process and thread count)."""
    previous, streams = torch.get_num_threads(), rng.capture()  # every generator, a GPU's too (seeded below)
    torch.set_num_threads(threads)
    try:
        config = canary_config()
        blocks = _blocks(config)
        state = TrainState.fresh(config, torch.device("cpu"), len(blocks))
        outputs: list[torch.Tensor] = []
        for step in range(STEPS):
            outputs += train_step(state, blocks, 1e-3 * (step + 1))
        return _digest(state, outputs)
    finally:
        rng.restore(streams)
        torch.set_num_threads(previous)


def run(config: Config) -> dict[str, Any]:
    """``octlm canary``: the digest under ``config``'s profile and threads (this process must hold the profile)."""
    profile = config.training.determinism
    runtime.require_profile(config)
    runtime.set_threads(config)
    runtime.configure_determinism(torch.device("cpu"))
    started = time.perf_counter()
    found = digest(torch.get_num_threads())
    return {
        "digest": found,
        "profile": determinism.describe(profile),
        "threads": torch.get_num_threads(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": str(torch.__version__),
        "processor": determinism.processor(),
        "seconds": round(time.perf_counter() - started, 3),
    }


def environment(state: TrainState) -> dict[str, Any]:
    """The environment record of ``state``'s process (``runtime.environment``), with the canary's digest under a
    profile that pins kernels (computed once per process and thread count)."""
    training = state.config.training
    portable = training.determinism != "local"
    return runtime.environment(
        state.device,
        training.precision,
        state.optimizer_impl,
        profile=training.determinism,
        canary=digest(torch.get_num_threads()) if portable else None,
    )
