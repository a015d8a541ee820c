"""From token streams to blocks, the dataset hash, the on-disk token cache, and the batch sampler.

A block is T+1 consecutive tokens of the joined stream: the first T are the inputs, the
last T the targets. Byte lengths of the targets come from one table lookup per tensor.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .corpus import Corpus
from .tokenizer import Tokenizer


@dataclass(frozen=True)
class TokenBlocks:
    inputs: torch.Tensor  # (N, T) int64
    targets: torch.Tensor  # (N, T) int64, inputs shifted by one
    byte_lengths: torch.Tensor  # (N, T) int64, bytes each target decodes to (0 for special tokens)
    pad_id: int  # targets equal to it are left out of the loss

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def select(self, index: torch.Tensor | slice) -> TokenBlocks:
        return TokenBlocks(self.inputs[index], self.targets[index], self.byte_lengths[index], self.pad_id)


def make_blocks(stream: np.ndarray | torch.Tensor, tokenizer: Tokenizer, context_length: int) -> TokenBlocks:
    tokens = torch.as_tensor(np.asarray(stream, dtype=np.int64))
    width = context_length + 1
    if tokens.numel() < width:
        tokens = torch.cat([tokens, torch.full((width - tokens.numel(),), tokenizer.pad_id, dtype=torch.int64)])
    count = tokens.numel() // width
    blocks = tokens[: count * width].view(count, width)  # (N, T+1)
    targets = blocks[:, 1:]
    table = torch.from_numpy(tokenizer.byte_lengths)
    return TokenBlocks(blocks[:, :-1], targets, table[targets], tokenizer.pad_id)


def dataset_hash(corpus: Corpus, tokenizer: Tokenizer) -> str:
    """SHA-256 over the documents of each split and the tokenizer: what training consumes."""
    return hashlib.sha256(f"octlm-data-v1:{corpus.content_hash}:{tokenizer.fingerprint}".encode()).hexdigest()


def token_streams(
    corpus: Corpus, tokenizer: Tokenizer, cache_dir: Path | None, key: str
) -> tuple[np.ndarray, np.ndarray]:
    """Encode both splits, or read them from ``cache_dir/tokens-<key>.npz`` when cached."""
    path = cache_dir / f"tokens-{key}.npz" if cache_dir is not None else None
    if path is not None and path.exists():
        try:
            with np.load(path) as cached:
                return cached["train"].astype(np.int64), cached["validation"].astype(np.int64)
        except Exception:  # EOFError, BadZipFile, ValueError...: a damaged cache is only a cache
            path.unlink(missing_ok=True)
    train = tokenizer.encode_documents([d.text for d in corpus.train])
    validation = tokenizer.encode_documents([d.text for d in corpus.validation])
    if path is not None:
        dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.int32
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
        try:
            with open(temporary, "wb") as handle:
                np.savez(handle, train=train.astype(dtype), validation=validation.astype(dtype))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except OSError:
            temporary.unlink(missing_ok=True)  # no room for the cache: train without it
    return train, validation


class Sampler:
    """Draws batches of block indices with its own seeded generator.

    The generator is the sampler's whole state, so resuming restores it instead of replaying
    batches. For data parallelism each rank gets its own stream (seed, rank) and draws its
    own batch; the single-process loop is rank 0 of 1.
    """

    def __init__(self, num_blocks: int, batch_size: int, seed: int, rank: int = 0):
        self.num_blocks = num_blocks
        self.batch_size = batch_size
        self.generator = torch.Generator(device="cpu")
        # A distinct, reproducible stream per rank; never the global torch generator.
        self.generator.manual_seed((seed * 1_000_003 + rank + 1) % 2**63)

    def next(self) -> torch.Tensor:
        return torch.randint(self.num_blocks, (self.batch_size,), generator=self.generator)

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state_dict(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def bits_per_byte(total_nats: float, total_bytes: int) -> float:
    return float(total_nats / (math.log(2) * total_bytes)) if total_bytes else float("nan")
