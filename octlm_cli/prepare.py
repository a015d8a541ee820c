"""From a config to training data: corpus, tokenizer (trained once, then reused), token streams, blocks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from . import corpus, data, runtime
from .checkpoint import Fingerprints
from .config import Config
from .home import Home
from .tokenizer import Tokenizer, load_or_train


def data_root(home: Home) -> Path:
    """Relative ``data.sources`` resolve here: ``OCTLM_DATA_ROOT`` if set, else the home."""
    root = os.environ.get("OCTLM_DATA_ROOT")
    return Path(root).resolve() if root else home.root


@dataclass(frozen=True)
class PreparedData:
    """What a training process trains on, and the notes worth telling the user about it."""

    config: Config
    device: torch.device
    tokenizer: Tokenizer
    train_blocks: data.TokenBlocks
    eval_blocks: data.TokenBlocks
    data_hash: str
    notes: tuple[str, ...]

    @property
    def fingerprints(self) -> Fingerprints:
        return Fingerprints(self.config.fingerprint, self.data_hash, self.tokenizer.fingerprint)

    def one_block(self) -> PreparedData:
        """The first training block alone, for training and evaluating on it (``overfit``)."""
        block = self.train_blocks.select(slice(0, 1))  # (1, T)
        return PreparedData(self.config, self.device, self.tokenizer, block, block, self.data_hash, self.notes)


def prepare(home: Home, config: Config, tokenizer_path: Path) -> PreparedData:
    """Set up the process, then read the corpus, load or train the tokenizer and cut blocks.

    A newly trained tokenizer is saved only after the whole corpus has encoded with it."""
    device = runtime.prepare_process(config)
    found = corpus.load(config.data.sources, data_root(home), config.data.validation_fraction, config.data.max_bytes)
    tokenizer, trained = load_or_train(tokenizer_path, [d.text for d in found.train], config.tokenizer.vocab_size)
    data_hash = data.dataset_hash(found, tokenizer)
    streams = data.token_streams(found, tokenizer, home.cache, data_hash)
    notes = [streams.note] if streams.note else []
    if trained:
        tokenizer.save(tokenizer_path)
        notes.append(f"trained tokenizer ({tokenizer.vocab_size} tokens) -> {tokenizer_path}")
    train_blocks = data.make_blocks(streams.train, tokenizer, config.model.context_length)
    if len(streams.validation):
        validation = data.make_blocks(streams.validation, tokenizer, config.model.context_length)
    else:
        notes.append("no validation documents: evaluating on training blocks (set data.validation_fraction)")
        validation = train_blocks
    eval_blocks = validation.select(slice(0, config.training.eval_blocks))
    return PreparedData(config, device, tokenizer, train_blocks, eval_blocks, data_hash, tuple(notes))
