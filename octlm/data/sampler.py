"""The order training reads its blocks in, and the receipt of that order.

Each step draws the global batch of all ranks (every rank draws the same batch and keeps its slice), so one
process draws exactly what it always drew. Two samplers (``data.sampling``):

- ``replacement`` (the seed notebook's draw): each batch is ``batch_size`` blocks drawn at random with replacement
  from the sampler's own seeded generator, whose state is the sampler's state.
- ``epochs``: every training block once per epoch, in a seeded order of its own per epoch (a permutation drawn by a
  generator seeded with the seed and the epoch). The orders of epochs 0, 1, 2, ... form one stream that batches are
  cut from, so the last batch of an epoch runs on into the next epoch's order: every block is read exactly once
  per epoch and every batch is full. The state is one number, the blocks read so far, so a resume seeks to any
  step at once (no batch is replayed to get there).

The receipt is a rolling hash of every block index read so far, with their count: ``digest_k =
sha256(digest_{k-1} || indices_k)`` over each step's global batch (int64, little-endian), cut to 16 hex digits.
Checkpoints and run-file records carry it; ``replay`` recomputes it from the start, so a resume can check that it
continues the data order the run really had.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from octlm.core.records.freeform import StateDict

RECEIPT_START = hashlib.sha256(b"octlm-data-order-v1").hexdigest()[:16]


@dataclass
class Receipt:
    """The blocks read so far (their count) and the rolling hash of their indices, in the order read."""

    blocks: int = 0
    digest: str = RECEIPT_START

    def add(self, indices: torch.Tensor | np.ndarray) -> None:
        values = np.asarray(indices, dtype="<i8")
        self.digest = hashlib.sha256(bytes.fromhex(self.digest) + values.tobytes()).hexdigest()[:16]
        self.blocks += len(values)

    def state_dict(self) -> StateDict:
        return {"blocks": self.blocks, "digest": self.digest}

    def load_state_dict(self, state: StateDict) -> None:
        self.blocks, self.digest = int(state["blocks"]), str(state["digest"])


class Sampler(Protocol):
    kind: str
    num_blocks: int
    batch_size: int
    receipt: Receipt

    def next(self) -> torch.Tensor: ...
    def state_dict(self) -> torch.Tensor: ...
    def load_state_dict(self, state: torch.Tensor) -> None: ...
    def clone(self) -> Sampler: ...


def _generator(seed: int) -> torch.Generator:
    generator = torch.Generator(device="cpu")  # its own reproducible stream; never the global torch generator
    generator.manual_seed(seed % 2**63)
    return generator


class ReplacementSampler:
    """The seed's draw: ``batch_size`` block indices at random, with replacement, from its own generator."""

    kind = "replacement"

    def __init__(self, num_blocks: int, batch_size: int, seed: int):
        self.num_blocks, self.batch_size = num_blocks, batch_size
        self.generator = _generator(seed * 1_000_003 + 1)
        self.receipt = Receipt()

    def next(self) -> torch.Tensor:
        index = torch.randint(self.num_blocks, (self.batch_size,), generator=self.generator)
        self.receipt.add(index)
        return index

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state_dict(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    def clone(self) -> ReplacementSampler:
        copy = ReplacementSampler(self.num_blocks, self.batch_size, 0)
        copy.load_state_dict(self.state_dict())
        copy.receipt = Receipt(**self.receipt.state_dict())
        return copy


class EpochSampler:
    """Every block once per epoch, each epoch in its own seeded order; the state is the count of blocks read."""

    kind = "epochs"

    def __init__(self, num_blocks: int, batch_size: int, seed: int):
        self.num_blocks, self.batch_size, self.seed = num_blocks, batch_size, seed
        self.position = 0  # blocks read so far: epoch position // num_blocks, offset position % num_blocks
        self.receipt = Receipt()
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s permutation of the block indices (the two newest are kept)."""
        if epoch not in self._orders:
            generator = _generator((self.seed * 1_000_003 + 7) * 1_009 + epoch)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = torch.randperm(self.num_blocks, generator=generator).numpy()
        return self._orders[epoch]

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` indices of the stream of epoch orders, without moving."""
        parts, position = [], self.position
        while count > 0:
            epoch, offset = divmod(position, self.num_blocks)
            part = self.order(epoch)[offset : offset + count]
            parts.append(part)
            count -= len(part)
            position += len(part)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def next(self) -> torch.Tensor:
        index = torch.from_numpy(self.take(self.batch_size).astype(np.int64))
        self.position += self.batch_size
        self.receipt.add(index)
        return index

    def state_dict(self) -> torch.Tensor:
        return torch.tensor([self.position], dtype=torch.int64)

    def load_state_dict(self, state: torch.Tensor) -> None:
        if not isinstance(state, torch.Tensor) or state.dtype != torch.int64 or tuple(state.shape) != (1,):
            raise ValueError("not an epoch sampler's state (one int64: the blocks read so far)")
        self.position = int(state[0])

    def clone(self) -> EpochSampler:
        copy = EpochSampler(self.num_blocks, self.batch_size, self.seed)
        copy.position, copy.receipt = self.position, Receipt(**self.receipt.state_dict())
        return copy


def sampler_for(kind: str, num_blocks: int, batch_size: int, seed: int) -> ReplacementSampler | EpochSampler:
    """A fresh sampler of ``data.sampling`` ``kind``."""
    if kind == "epochs":
        return EpochSampler(num_blocks, batch_size, seed)
    return ReplacementSampler(num_blocks, batch_size, seed)


def epochs_of(sampler: Sampler) -> float:
    """Epochs the blocks read so far amount to (with replacement: the blocks read over the training blocks)."""
    return sampler.receipt.blocks / max(1, sampler.num_blocks)


def replay(sampler: Sampler, steps: int) -> tuple[torch.Tensor, Receipt]:
    """The state and receipt ``sampler`` reaches after ``steps`` more batches, drawn by a copy (nothing trained):
    what a resume compares with its checkpoint's."""
    copy = sampler.clone()
    for _ in range(steps):
        copy.next()
    return copy.state_dict(), copy.receipt
