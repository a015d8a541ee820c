"""What a run trains under, as three hashes: the config's fingerprint, the dataset's and the tokenizer's.

A checkpoint records them, ``resume`` compares them, the registry keeps them beside each run and checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fingerprints:
    """What a checkpoint was trained under: config fingerprint, dataset hash, tokenizer hash."""

    config: str
    data: str
    tokenizer: str
