"""The byte-level BPE: round trips, special tokens, determinism, byte lengths."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CORPUS

from octlm.data.tokenizer import Tokenizer

TEXTS = [CORPUS[i * 900 : (i + 1) * 900] for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(TEXTS, 300)


def test_tokenizer_round_trip_specials_and_determinism(tokenizer: Tokenizer, tmp_path: Path) -> None:
    text = "The quick brown fox — ünïcödé and emoji 🦊 survive.\n\tTabs too."
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert tokenizer.decode(ids) == text
    assert len({tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id}) == 3
    again = Tokenizer.train(TEXTS, 300)
    assert again.fingerprint == tokenizer.fingerprint
    tokenizer.save(tmp_path / "tokenizer.json")
    from tokenizers import Tokenizer as Plain

    plain = Plain.from_file(str(tmp_path / "tokenizer.json"))
    assert plain.encode(text, add_special_tokens=False).ids == ids[1:-1]
    assert Tokenizer.load(tmp_path / "tokenizer.json").fingerprint == tokenizer.fingerprint


def test_byte_lengths_agree_with_decoding(tokenizer: Tokenizer) -> None:
    text = "naïve café: 3 × 4 = 12 — ✓ 🦊"
    ids = tokenizer.encode(text)
    assert sum(tokenizer.token_bytes(i) for i in ids) == len(text.encode("utf-8"))
    assert tokenizer.token_bytes(tokenizer.bos_id) == 0 and tokenizer.token_bytes(tokenizer.pad_id) == 0
