"""Capture and restore every random generator that training draws from.

Streams: the sampler owns its own ``torch.Generator`` (saved by the sampler); model
initialisation and dropout use the global torch generator (and CUDA's on GPU); Python's
``random`` is saved for completeness. Evaluation and generation draw from none of them.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def capture() -> dict[str, Any]:
    state: dict[str, Any] = {"python_rng": random.getstate(), "torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        state["mps_rng"] = torch.mps.get_rng_state()  # dropout on Apple GPUs draws from it
    return state


def restore(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python_rng"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    if state.get("mps_rng") is not None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps_rng"])


def configure_determinism(device: torch.device) -> None:
    """Deterministic kernels everywhere; on CUDA also what that requires."""
    if device.type == "cuda":
        import os

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
