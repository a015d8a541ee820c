"""From token streams to blocks, and the on-disk token cache.

A block is T+1 consecutive tokens of the joined stream: the first T are the inputs, the
last T the targets. Byte lengths of the targets come from one table lookup per tensor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from octlm.data.tokenizer import Tokenizer


@dataclass(frozen=True)
class TokenBlocks:
    """Blocks of T+1 consecutive tokens of one stream, gathered only when asked for: in training the
    stream is a memory map of the token file, so the blocks cost no memory of their own. Block i is
    ``stream[i*(T+1) : (i+1)*(T+1)]``; its first T tokens are the inputs, its last T the targets."""

    stream: np.ndarray  # 1-D token ids (uint16 or int32 from the token file, int64 otherwise)
    width: int  # T + 1
    byte_table: np.ndarray  # int64: the bytes each token id decodes to (0 for special tokens)
    pad_id: int  # targets equal to it are left out of the loss
    rows: np.ndarray | None = None  # the blocks selected, in order (None: every whole block)
    sources: np.ndarray | None = None  # with several data sources: each selected block's source (its index)
    source_names: tuple[str, ...] = ()  # the sources those indices name

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else len(self.stream) // self.width

    def _blocks(self, index: Any) -> torch.Tensor:
        """The (b, T+1) int64 blocks at ``index`` (a tensor or array of positions, a slice or an int)."""
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        if self.rows is not None:
            numbers = self.rows[index]
        elif isinstance(index, np.ndarray):
            numbers = index
        else:
            numbers = np.arange(len(self))[index]
        numbers = np.atleast_1d(np.asarray(numbers, dtype=np.int64))
        positions = numbers[:, None] * self.width + np.arange(self.width)
        return torch.from_numpy(np.asarray(self.stream[positions], dtype=np.int64))

    def batch(self, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (b, T) int64, of the blocks at ``index``."""
        blocks = self._blocks(index)
        return blocks[:, :-1], blocks[:, 1:]

    def target_bytes(self, targets: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.byte_table)[targets]

    def select(self, index: Any) -> TokenBlocks:
        numbers = np.arange(len(self))[index] if self.rows is None else self.rows[index]
        sources = None if self.sources is None else np.atleast_1d(self.sources[index])
        return dataclasses.replace(self, rows=np.atleast_1d(np.asarray(numbers, dtype=np.int64)), sources=sources)

    def first(self, count: int) -> TokenBlocks:
        """The first ``count`` blocks; of labelled blocks, the first of each source in turn (so a budget reads
        every source, not only the first), kept in their order."""
        if self.sources is None or count >= len(self):
            return self.select(slice(0, count))
        queues = [np.flatnonzero(self.sources == s) for s in np.unique(self.sources)]
        taken: list[int] = []
        for turn in range(max(len(q) for q in queues)):
            taken += [int(q[turn]) for q in queues if turn < len(q)][: count - len(taken)]
            if len(taken) >= count:
                break
        return self.select(np.sort(np.asarray(taken, dtype=np.int64)))

    def labelled(self, lengths: np.ndarray, document_sources: list[int], names: tuple[str, ...]) -> TokenBlocks:
        """These blocks (every whole block of the stream) with the source of each: the source of the document
        that holds its first target token. ``lengths``: the stream's documents' token counts, in order."""
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
        first_targets = np.arange(len(self), dtype=np.int64) * self.width + 1
        documents = np.minimum(np.searchsorted(ends, first_targets, side="right"), max(0, len(ends) - 1))
        sources = np.asarray(document_sources, dtype=np.int64)[documents] if len(ends) else np.zeros(len(self), int)
        return dataclasses.replace(self, sources=sources, source_names=names)

    @property
    def inputs(self) -> torch.Tensor:
        """Every selected block's inputs (b, T): for small sets (evaluation, one block, tests)."""
        return self.batch(slice(None))[0]

    @property
    def targets(self) -> torch.Tensor:
        return self.batch(slice(None))[1]

    @property
    def byte_lengths(self) -> torch.Tensor:
        return self.target_bytes(self.targets)


def make_blocks(stream: np.ndarray | torch.Tensor, tokenizer: Tokenizer, context_length: int) -> TokenBlocks:
    """Blocks over ``stream`` without copying it (a stream shorter than one block is padded)."""
    tokens = stream.numpy() if isinstance(stream, torch.Tensor) else stream
    width = context_length + 1
    if len(tokens) < width:
        padding = np.full(width - len(tokens), tokenizer.pad_id, dtype=np.int64)
        tokens = np.concatenate([np.asarray(tokens, dtype=np.int64), padding])
    return TokenBlocks(tokens, width, tokenizer.byte_lengths, tokenizer.pad_id)


def bits_per_byte(total_nats: float, total_bytes: int) -> float:
    return float(total_nats / (math.log(2) * total_bytes)) if total_bytes else float("nan")
