"""From token streams to blocks, and the on-disk token cache.

A block is T+1 consecutive tokens of the joined stream: the first T are the inputs, the
last T the targets. Byte lengths of the targets come from one table lookup per tensor.

**The evaluation set and its clusters.** An evaluation reads ``count`` blocks of a split, chosen by
``training.eval_selection`` (``choose``): ``first``, the first blocks in order (of several sources, the first of
each in turn), or ``spread``, one block drawn at random in each of ``count`` equal strata of the split's blocks
(of several sources, each source's share as ``first`` gives it, drawn across that source's blocks), kept in stream
order and seeded by the split's own tokens (``spread_seed``): two experiments on the same data evaluate the same
blocks whatever their ``training.seed``, so their evaluations can still be paired. Adjacent blocks of one document
are not independent draws (the calibration config's 46 validation blocks are 4 documents), so an evaluation's
standard errors are taken over clusters of blocks (``cluster_ids``): each block's document (the one holding its
first target token) when the evaluated blocks come from at least ``MIN_DOCUMENTS`` documents, the errors then
judged with Student's t at G-1 degrees of freedom; else chunks of ``CHUNK`` consecutive blocks of the split (a
block's position // ``CHUNK``) when that makes two or more (of one to three documents, a spread between documents
cannot be estimated, t at 0-2 degrees of freedom says nothing; the chunks measure how the text varies within them,
and the unit says which was done); else each block alone (at most ``CHUNK`` consecutive blocks, one chunk: no
cluster structure left to estimate), the unit then named ``blocks`` so that a reader sees the error may understate.
Why 4 and not more: in a simulation over documents (``benchmarks/clusters.py``, 2,000 draws: document effects,
adjacent blocks alike) the t interval of the clustered error covered the population's mean 94% of the time with 60
or 20 documents spread over, 92.5% with 12 (16 blocks; 91.4% when documents were clustered only from 8 of them),
where the error over blocks covered 83-86%.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from octlm.config.section_classes import EVAL_SELECTIONS
from octlm.data.tokenizer import Tokenizer

MIN_DOCUMENTS = 4  # the evaluated blocks' clusters are their documents when they come from at least this many
CHUNK = 8  # else chunks of this many consecutive blocks of the split
SELECTIONS = EVAL_SELECTIONS  # training.eval_selection's choices
SEED_TOKENS = 1 << 22  # spread_seed hashes at most this many tokens of the split (and its length)


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
    documents: np.ndarray | None = None  # where known: each selected block's document (its index in the split)

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
        documents = None if self.documents is None else np.atleast_1d(self.documents[index])
        rows = np.atleast_1d(np.asarray(numbers, dtype=np.int64))
        return dataclasses.replace(self, rows=rows, sources=sources, documents=documents)

    def choose(self, count: int, selection: str) -> TokenBlocks:
        """The ``count`` blocks an evaluation reads: ``first`` or ``spread`` (``training.eval_selection``)."""
        if selection not in SELECTIONS:
            raise ValueError(f"unknown evaluation selection {selection!r}; one of {', '.join(SELECTIONS)}")
        return self.spread(count) if selection == "spread" else self.first(count)

    def spread(self, count: int) -> TokenBlocks:
        """``count`` blocks drawn across these (every whole block of the stream): one at random in each of ``count``
        equal strata, seeded by ``spread_seed`` (the same blocks for the same data), in stream order; of labelled
        blocks, each source's share as ``first`` gives it, drawn across that source's blocks."""
        if count >= len(self):
            return self.select(slice(0, count))
        generator = np.random.default_rng(spread_seed(self))
        if self.sources is None:
            return self.select(_strata(len(self), count, generator))
        picked = self.first(count).sources
        assert picked is not None
        taken = []
        for source, quota in zip(*np.unique(picked, return_counts=True), strict=True):
            queue = np.flatnonzero(self.sources == source)
            taken.append(queue[_strata(len(queue), int(quota), generator)])
        return self.select(np.sort(np.concatenate(taken)))

    def cluster_ids(self) -> tuple[np.ndarray, str]:
        """Each selected block's cluster (numbered from 0, in the order of the documents or chunks) and their unit,
        ``documents``, ``chunks`` or ``blocks`` (the rule is the module's)."""
        positions = self.rows if self.rows is not None else np.arange(len(self), dtype=np.int64)
        return clusters_of(positions, self.documents)

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

    def with_documents(self, lengths: np.ndarray) -> TokenBlocks:
        """These blocks (every whole block of the stream) with the document of each: the one that holds its first
        target token. ``lengths``: the stream's documents' token counts, in order."""
        return dataclasses.replace(self, documents=_documents(len(self), self.width, lengths))

    def labelled(self, lengths: np.ndarray, document_sources: list[int], names: tuple[str, ...]) -> TokenBlocks:
        """These blocks (every whole block of the stream) with the document of each (``with_documents``) and its
        source: the source of that document."""
        documents = _documents(len(self), self.width, lengths)
        table = np.asarray(document_sources, dtype=np.int64) if len(lengths) else np.zeros(1, dtype=np.int64)
        return dataclasses.replace(self, documents=documents, sources=table[documents], source_names=names)

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


def clusters_of(positions: np.ndarray, documents: np.ndarray | None) -> tuple[np.ndarray, str]:
    """The clusters of blocks at ``positions`` of their split (with each one's document, where known), numbered from
    0, and their unit: documents from ``MIN_DOCUMENTS`` of them, else chunks of ``CHUNK`` consecutive blocks when
    there are two or more, else the blocks themselves."""
    if documents is not None and len(np.unique(documents)) >= MIN_DOCUMENTS:
        return np.unique(documents, return_inverse=True)[1].astype(np.int64), "documents"
    chunks = np.asarray(positions, dtype=np.int64) // CHUNK
    if len(np.unique(chunks)) >= 2:
        return np.unique(chunks, return_inverse=True)[1].astype(np.int64), "chunks"
    return np.arange(len(chunks), dtype=np.int64), "blocks"


def spread_seed(blocks: TokenBlocks) -> int:
    """The seed of ``spread``: from the sha256 of the blocks' width, their count and the stream's first
    ``SEED_TOKENS`` tokens (as little-endian int64, whatever the stream's dtype): fixed by the data alone."""
    whole = len(blocks.stream) // blocks.width * blocks.width
    digest = hashlib.sha256(f"octlm-eval-spread {blocks.width} {whole}".encode())
    for start in range(0, min(whole, SEED_TOKENS), 1 << 20):
        piece = blocks.stream[start : min(start + (1 << 20), whole, SEED_TOKENS)]
        digest.update(np.asarray(piece, dtype="<i8").tobytes())
    return int.from_bytes(digest.digest()[:8], "little")


def _documents(count: int, width: int, lengths: np.ndarray) -> np.ndarray:
    """The document holding the first target token of each of ``count`` blocks of ``width`` tokens (0 for all when
    ``lengths`` is empty)."""
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    first_targets = np.arange(count, dtype=np.int64) * width + 1
    return np.minimum(np.searchsorted(ends, first_targets, side="right"), max(0, len(ends) - 1)).astype(np.int64)


def _strata(size: int, count: int, generator: np.random.Generator) -> np.ndarray:
    """``count`` positions of ``range(size)``, one at random in each of ``count`` equal strata, in order."""
    edges = np.arange(count + 1, dtype=np.int64) * size // count
    return edges[:-1] + np.floor(generator.random(count) * (edges[1:] - edges[:-1])).astype(np.int64)


def bits_per_byte(total_nats: float, total_bytes: int) -> float:
    return float(total_nats / (math.log(2) * total_bytes)) if total_bytes else float("nan")
