"""Byte-level BPE from Hugging Face ``tokenizers``: train once per experiment, then reuse.

Training is deterministic, so a tokenizer trained on the same texts with the same vocabulary size is
byte-identical: a home keeps one in ``cache/tokenizer-<texts hash>-<vocab>.json`` (its fingerprint
beside it, checked on load) for the next experiment with the same data and vocabulary.

Special tokens: ``<|bos|>``, ``<|eos|>``, ``<|pad|>``. The saved ``tokenizer.json`` loads with
plain ``tokenizers.Tokenizer.from_file``. Its fingerprint is the SHA-256 of its canonical JSON.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from octlm.core.errors import Refused
from octlm.core.fsutil import atomic_write, read_regular

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIALS = (BOS, EOS, PAD)
CACHE_FORMAT = "octlm-bpe-v1"  # a change to how octlm builds its BPE gets a new tag
MAX_BYTES = 1 << 30  # a tokenizer.json of a million tokens is about 60 MB


TRAIN_BATCH = 1000  # documents handed to the BPE trainer at a time


class Tokenizer:
    def __init__(self, inner: HFTokenizer):
        self.inner = inner
        ids: list[int] = []
        for token in SPECIALS:
            index = inner.token_to_id(token)
            if index is None:
                raise Refused(f"tokenizer.json lacks the special token {token}: it was not made by octlm")
            ids.append(index)
        self.bos_id, self.eos_id, self.pad_id = ids
        self.vocab_size = inner.get_vocab_size()
        self.fingerprint = hashlib.sha256(
            json.dumps(json.loads(inner.to_str()), sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        # Byte-level BPE spells every byte as one character, so a token's byte length is
        # the length of its spelling; special tokens decode to nothing.
        self.byte_lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for token, index in inner.get_vocab().items():
            if token not in SPECIALS:
                self.byte_lengths[index] = len(token)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, length: int | None = None) -> Tokenizer:
        """BPE trained from ``texts`` in batches, read as they come (``length``: how many). The library's own
        progress bars are off: they would draw over octlm's display, which says what the tokenizer is doing."""
        inner = HFTokenizer(models.BPE())
        inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        inner.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIALS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        remaining = iter(texts)
        batches = iter(lambda: list(itertools.islice(remaining, TRAIN_BATCH)), [])  # fewer crossings into Rust
        inner.train_from_iterator(batches, trainer, length=length)
        return cls(inner)

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        """Load octlm's own ``tokenizer.json``: a regular file (not a link) within ``MAX_BYTES``."""
        try:
            text = read_regular(path, max_bytes=MAX_BYTES, follow=False).decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8"
            raise Refused(f"{path}: not a readable tokenizer ({reason}); delete it to retrain") from None
        try:
            return cls(HFTokenizer.from_str(text))
        except Exception as error:  # tokenizers raises a bare Exception on a bad file
            raise Refused(
                f"{path}: not a readable tokenizer ({str(error).splitlines()[0]}); delete it to retrain"
            ) from None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, self.inner.to_str(pretty=True).encode("utf-8"))

    def token_bytes(self, token_id: int) -> int:
        return int(self.byte_lengths[token_id])

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.inner.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids, self.eos_id] if add_special_tokens else ids

    def encode_each(self, texts: list[str]) -> list[np.ndarray]:
        """``<|bos|> text <|eos|>`` of each document (int64)."""
        encodings = self.inner.encode_batch(texts, add_special_tokens=False) if texts else []
        bos, eos = np.array([self.bos_id]), np.array([self.eos_id])
        return [np.concatenate((bos, np.asarray(e.ids, dtype=np.int64), eos)).astype(np.int64) for e in encodings]

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """``<|bos|> text <|eos|>`` for every document, joined into one stream (int64)."""
        pieces = self.encode_each(texts)
        return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=True)


def texts_hash(texts: Iterable[str], vocab_size: int) -> str:
    """What a trained tokenizer depends on: its format, the vocabulary size and every training text."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}:{vocab_size}:".encode())
    for text in texts:
        encoded = text.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()


def cache_path(cache_dir: Path, texts: Iterable[str], vocab_size: int) -> Path:
    return cache_dir / f"tokenizer-{texts_hash(texts, vocab_size)[:16]}-{vocab_size}.json"


def from_cache(path: Path) -> Tokenizer | None:
    """The cached tokenizer at ``path`` when it is there and matches the fingerprint stored beside it."""
    try:
        expected = read_regular(path.with_suffix(".fingerprint"), max_bytes=256, follow=False).decode().strip()
        tokenizer = Tokenizer.load(path)
    except (OSError, UnicodeDecodeError, Refused):
        return None
    return tokenizer if tokenizer.fingerprint == expected else None


def to_cache(tokenizer: Tokenizer, path: Path) -> None:
    """Keep a trained tokenizer for the next experiment; a cache that cannot be written is no error."""
    try:
        tokenizer.save(path)
        atomic_write(path.with_suffix(".fingerprint"), f"{tokenizer.fingerprint}\n".encode())
    except OSError:
        pass


def load_or_train(
    path: Path,
    texts: Iterable[str],
    vocab_size: int,
    cache: Path | None = None,
    length: int | None = None,
) -> tuple[Tokenizer, str]:
    """Reuse ``path`` if it exists (never retrain silently); else take the cached one at ``cache`` (a
    path from ``cache_path``) if it verifies; else train. Returns (tokenizer, "loaded" | "cached" | "trained").

    A trained or cached tokenizer is not saved here: the caller saves it (``Tokenizer.save``) only once
    the corpus has encoded with it, so a failure never leaves a tokenizer behind to be reused silently.

    A small corpus may yield fewer tokens than ``vocab_size``; the model's embedding keeps the
    configured size either way, so only a tokenizer larger than the config is refused.
    """
    if os.path.lexists(path):
        tokenizer = Tokenizer.load(path)
        if tokenizer.vocab_size > vocab_size:
            raise Refused(
                f"{path} has {tokenizer.vocab_size} tokens but tokenizer.vocab_size is {vocab_size}: "
                "it is never retrained silently; restore the config or start over with `octlm train --restart`"
            )
        return tokenizer, "loaded"
    cached = from_cache(cache) if cache is not None else None
    if cached is not None:
        return cached, "cached"
    return Tokenizer.train(texts, vocab_size, length), "trained"
