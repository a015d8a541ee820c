"""What a run trains under, as three hashes: the config's fingerprint, the dataset's and the tokenizer's.

A checkpoint records them, ``resume`` compares them, the registry keeps them beside each run and checkpoint;
``dataset_hash`` is how the dataset's is made, ``now`` all three as they would be for a run started now. The
tokenizer a config brings along (``tokenizer.file``) is read here too (``brought``), checked against the config's
vocabulary, and ``with_vocabulary`` gives the config with the file's, as the model is built with it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from octlm.config import Config
from octlm.core.errors import BadInput, OctlmError, Refused
from octlm.core.home import Home
from octlm.data import corpus, sources
from octlm.data.corpus import Corpus
from octlm.data.tokenizer import Tokenizer


@dataclass(frozen=True)
class Fingerprints:
    """What a checkpoint was trained under: config fingerprint, dataset hash, tokenizer hash."""

    config: str
    data: str
    tokenizer: str


def now(home: Home, config: Config, tokenizer_path: Path) -> Fingerprints:
    """What a run would train under now, computed without writing anything: the config's fingerprint,
    the tokenizer file's (the one brought along in ``tokenizer.file``, if any), and the dataset hash (the corpus is
    read and hashed, nothing is encoded)."""
    if not tokenizer_path.exists():
        raise Refused(
            f"{tokenizer_path} is missing, so {config.id}'s final checkpoint cannot be checked against it: "
            f"restore it, or start over with `octlm train {config.id} --restart`"
        )
    tokenizer = brought(home, config) or Tokenizer.load(tokenizer_path, config.tokenizer.named())
    data = config.data
    root = sources.data_root(home)
    found = corpus.load(data.sources, root, data.validation_fraction, data.max_bytes, data.text_field)
    return Fingerprints(config.fingerprint, dataset_hash(found, tokenizer), tokenizer.fingerprint)


def dataset_hash(corpus: Corpus, tokenizer: Tokenizer) -> str:
    """SHA-256 over the documents of each split and the tokenizer: what training consumes."""
    return hashlib.sha256(f"octlm-data-v1:{corpus.content_hash}:{tokenizer.fingerprint}".encode()).hexdigest()


def brought(home: Home, config: Config) -> Tokenizer | None:
    """The tokenizer brought along in ``tokenizer.file`` (None without one), checked against ``tokenizer.vocab_size``
    (0: the file's; another number is refused); each fault one line naming the experiment's file."""
    section = config.tokenizer
    if not section.file:
        return None
    try:
        path = brought_path(section.file, sources.data_root(home))
        tokenizer = Tokenizer.bring(path, section.named())
        if section.vocab_size not in (0, tokenizer.vocab_size):
            raise BadInput(
                f"tokenizer.vocab_size is {section.vocab_size:,} but tokenizer.file {path} holds "
                f"{tokenizer.vocab_size:,} tokens: leave vocab_size out (or 0: the file's)"
            )
    except OctlmError as error:
        raise type(error)(f"experiments/{config.id}.yaml: {error}" if config.id else str(error)) from None
    return tokenizer


def with_vocabulary(home: Home, config: Config) -> Config:
    """``config`` with the model's vocabulary: a brought tokenizer's, read from its file, else as it is."""
    tokenizer = brought(home, config)
    return config if tokenizer is None else config.with_keys({"tokenizer.vocab_size": tokenizer.vocab_size})


def brought_path(file: str, root: Path) -> Path:
    """Where ``tokenizer.file`` is: ``~`` expanded, a relative path under ``root`` (the data root: the home, or
    ``OCTLM_DATA_ROOT``, as for ``data.sources``). BadInput, one line, when nothing is there."""
    try:
        path = Path(file).expanduser()
    except RuntimeError as error:  # "~nosuchuser/x"
        raise BadInput(f"tokenizer.file {file!r}: {error}") from None
    path = path if path.is_absolute() else root / path
    if not os.path.lexists(path):
        raise BadInput(
            f"tokenizer.file {path} does not exist: give a tokenizers JSON file (a tokenizer.json), relative to "
            "the home or OCTLM_DATA_ROOT"
        )
    return path
