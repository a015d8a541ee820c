"""From token streams to blocks, the dataset hash, the on-disk token cache, and the batch sampler.

A block is T+1 consecutive tokens of the joined stream: the first T are the inputs, the
last T the targets. Byte lengths of the targets come from one table lookup per tensor.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .corpus import Corpus, Document
from .errors import BadInput
from .fsutil import atomic_writer, read_regular
from .tokenizer import Tokenizer

CACHE_FORMAT = "octlm-tokens-v2"
CACHE_ARRAYS = ("train", "validation", "train_lengths", "validation_lengths")
SPOT_CHECKS = 6  # documents per split encoded again each time a cache is read, besides the first and last


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


@dataclass(frozen=True)
class Streams:
    """Both splits' token streams (int64), and why a cache was rebuilt when it was."""

    train: np.ndarray
    validation: np.ndarray
    note: str | None = None


def token_streams(corpus: Corpus, tokenizer: Tokenizer, cache_dir: Path | None, key: str) -> Streams:
    """Encode both splits, or read them from ``cache_dir/tokens-<key>.npz`` when a cache verifies.

    The cache records its format, its key, the tokenizer's hash, each document's token count and a
    checksum of it all; on load every id must be below the tokenizer's size, and a few documents,
    drawn afresh each time, are encoded again and compared. One that does not verify is rebuilt,
    with a note saying why.
    """
    path = cache_dir / f"tokens-{key}.npz" if cache_dir is not None else None
    note = None
    splits = (corpus.train, corpus.validation)
    if path is not None and os.path.lexists(path):
        try:
            return Streams(*_read_cache(path, tokenizer, key, splits))
        except Exception as error:  # BadZipFile, EOFError, ValueError...: a damaged cache is only a cache
            note = f"cache/{path.name} did not verify ({_short(error)}); rebuilt"
            path.unlink(missing_ok=True)
    train, validation = (_encode(tokenizer, documents) for documents in splits)
    if path is not None:
        _write_cache(path, {"train": train, "validation": validation}, tokenizer, key)
    return Streams(train[0], validation[0], note)


def _encode(tokenizer: Tokenizer, documents: tuple[Document, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A split's stream and each document's token count."""
    try:
        pieces = tokenizer.encode_each([d.text for d in documents])
    except (TypeError, UnicodeError) as error:
        raise BadInput(f"data.sources: a document cannot be tokenized ({error}); texts must be valid Unicode") from None
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return stream, np.array([len(piece) for piece in pieces], dtype="<i8")


def _short(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:160]


def _meta(arrays: dict[str, np.ndarray], tokenizer: Tokenizer, key: str) -> dict[str, object]:
    digest = hashlib.sha256(CACHE_FORMAT.encode())
    for name in CACHE_ARRAYS:
        digest.update(f":{name}:{arrays[name].dtype.str}:{arrays[name].shape}:".encode())
        digest.update(arrays[name].tobytes())
    return {"format": CACHE_FORMAT, "key": key, "tokenizer": tokenizer.fingerprint, "sha256": digest.hexdigest()}


def _write_cache(path: Path, encoded: dict[str, tuple[np.ndarray, np.ndarray]], tokenizer: Tokenizer, key: str) -> None:
    dtype = np.dtype("<u2") if tokenizer.vocab_size <= 2**16 else np.dtype("<i4")
    arrays: dict[str, Any] = {name: stream.astype(dtype) for name, (stream, _) in encoded.items()}
    arrays |= {f"{name}_lengths": lengths for name, (_, lengths) in encoded.items()}
    meta = np.array(json.dumps(_meta(arrays, tokenizer, key), sort_keys=True))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(path) as handle:
            np.savez(handle, meta=meta, **arrays)
    except OSError:
        pass  # no room for the cache: train without it


def _read_cache(
    path: Path, tokenizer: Tokenizer, key: str, splits: tuple[tuple[Document, ...], ...]
) -> tuple[np.ndarray, np.ndarray]:
    documents = (*splits[0], *splits[1])
    # At most 4 bytes per token, one token per UTF-8 byte (4 per character) and two per document.
    cap = 4 * (4 * sum(len(d.text) for d in documents) + 2 * len(documents)) + 8 * len(documents) + (1 << 20)
    with np.load(io.BytesIO(read_regular(path, max_bytes=cap, follow=False)), allow_pickle=False) as cached:
        if sorted(cached.files) != sorted(("meta", *CACHE_ARRAYS)):
            raise ValueError("no checksum: written by an older octlm" if "meta" not in cached.files else "other arrays")
        if sum(info.file_size for info in cached.zip.infolist()) > cap:
            raise ValueError("larger than its corpus allows")
        arrays, meta = {name: cached[name] for name in CACHE_ARRAYS}, cached["meta"]
    if meta.dtype.kind != "U" or meta.ndim != 0 or json.loads(str(meta)) != _meta(arrays, tokenizer, key):
        raise ValueError("made with another tokenizer or corpus, or its tokens changed")
    streams = []
    for name, split in zip(("train", "validation"), splits, strict=True):
        stream, lengths = arrays[name], arrays[f"{name}_lengths"]
        _check_stream(stream, lengths, split, tokenizer)
        streams.append(stream.astype(np.int64))
    return streams[0], streams[1]


def _check_stream(stream: np.ndarray, lengths: np.ndarray, split: tuple[Document, ...], tokenizer: Tokenizer) -> None:
    """Shapes, id range and per-document counts, then a few documents drawn at random encoded again."""
    if stream.dtype.str not in ("<u2", "<i4") or lengths.dtype.str != "<i8" or stream.ndim != 1 or lengths.ndim != 1:
        raise ValueError(f"unexpected arrays ({stream.dtype}, {lengths.dtype})")
    if len(stream) and not 0 <= int(stream.min()) <= int(stream.max()) < tokenizer.vocab_size:
        raise ValueError(f"token ids outside the tokenizer's {tokenizer.vocab_size}")
    if len(lengths) != len(split) or int(lengths.min(initial=2)) < 2 or int(lengths.sum()) != len(stream):
        raise ValueError("its documents do not match the corpus")
    if not split:
        return
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    drawn = {0, len(split) - 1, *random.SystemRandom().sample(range(len(split)), min(SPOT_CHECKS, len(split)))}
    for index in sorted(drawn):
        if not np.array_equal(
            stream[offsets[index] : offsets[index + 1]], tokenizer.encode_each([split[index].text])[0]
        ):
            raise ValueError(f"its tokens of {split[index].name} are not what the tokenizer makes of it")


class Sampler:
    """Draws batches of block indices with its own seeded generator.

    The generator is the sampler's whole state, so resuming restores it instead of replaying
    batches. It draws the global batch: on several ranks every rank draws the same batch and keeps
    its slice (``Ranks.slices``), so one process draws exactly what it always drew.
    """

    def __init__(self, num_blocks: int, batch_size: int, seed: int):
        self.num_blocks = num_blocks
        self.batch_size = batch_size
        self.generator = torch.Generator(device="cpu")
        # Its own reproducible stream; never the global torch generator.
        self.generator.manual_seed((seed * 1_000_003 + 1) % 2**63)

    def next(self) -> torch.Tensor:
        return torch.randint(self.num_blocks, (self.batch_size,), generator=self.generator)

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state_dict(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def bits_per_byte(total_nats: float, total_bytes: int) -> float:
    return float(total_nats / (math.log(2) * total_bytes)) if total_bytes else float("nan")
