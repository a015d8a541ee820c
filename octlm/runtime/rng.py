"""Capture and restore every random generator that training draws from.

Streams: the sampler owns its own ``torch.Generator`` (saved by the sampler); model
initialisation and dropout use the global torch generator (and CUDA's on GPU); Python's
``random`` is saved for completeness. Evaluation and generation draw from none of them.

With canonical pieces (``training.micro_batches``) a piece's dropout draws from the global generator reseeded
from (seed, step, piece) alone (``piece_stream``), which is restored afterwards: the streams a checkpoint holds
are then the same on every rank and at every step, and no stream depends on the rank or the world size.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import torch

from octlm.core.records.freeform import StateDict


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def stream_seed(seed: int, step: int, rank: int) -> int:
    """The seed of a rank's streams when they are reseeded mid-run (a resume under another world size)."""
    return ((seed * 1_000_003 + step) * 1_009 + rank + 1) % 2**63


def piece_seed(seed: int, step: int, piece: int) -> int:
    """The seed of piece ``piece`` of step ``step`` (1-based): a fixed mix of the three, the same on any rank."""
    digest = hashlib.sha256(f"octlm-piece:{seed}:{step}:{piece}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**63


@contextlib.contextmanager
def piece_stream(seed: int, step: int, piece: int, device: torch.device) -> Iterator[None]:
    """The global generator (and the device's) seeded for one piece, and restored to where it was afterwards."""
    devices = [] if device.type == "cpu" else [device.index or 0]
    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else None):
        torch.manual_seed(piece_seed(seed, step, piece))
        yield


def _mps() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def capture() -> StateDict:
    """This process's generators: ``python`` and ``torch``, plus ``cuda`` / ``mps`` where in use."""
    state: StateDict = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if _mps():
        state["mps"] = torch.mps.get_rng_state()  # dropout on Apple GPUs draws from it
    return state


def restore(state: StateDict) -> None:
    """The inverse of ``capture``; call it last, right before the first batch."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if state.get("mps") is not None and _mps():
        torch.mps.set_rng_state(state["mps"])
