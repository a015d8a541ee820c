"""What a run trains under, as three hashes: the config's fingerprint, the dataset's and the tokenizer's.

A checkpoint records them, ``resume`` compares them, the registry keeps them beside each run and checkpoint;
``dataset_hash`` is how the dataset's is made, ``now`` all three as they would be for a run started now.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from octlm.config import Config
from octlm.core.errors import Refused
from octlm.core.home import Home
from octlm.data import corpus, sources
from octlm.data.corpus import Corpus
from octlm.data.tokenizer import Tokenizer, brought_path


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
    section, root = config.tokenizer, sources.data_root(home)
    if section.file:
        tokenizer = Tokenizer.bring(brought_path(section.file, root), section.named())
    else:
        tokenizer = Tokenizer.load(tokenizer_path, section.named())
    data = config.data
    found = corpus.load(data.sources, root, data.validation_fraction, data.max_bytes)
    return Fingerprints(config.fingerprint, dataset_hash(found, tokenizer), tokenizer.fingerprint)


def dataset_hash(corpus: Corpus, tokenizer: Tokenizer) -> str:
    """SHA-256 over the documents of each split and the tokenizer: what training consumes."""
    return hashlib.sha256(f"octlm-data-v1:{corpus.content_hash}:{tokenizer.fingerprint}".encode()).hexdigest()
