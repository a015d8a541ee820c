"""The tokenizer: trained once (byte-identical when trained again), kept in the home's cache for the next experiment of
the same data, used only when its fingerprint verifies.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import cli, write_experiment

from octlm.data import tokenizer
from octlm.data.tokenizer import Tokenizer


def test_training_a_tokenizer_twice_gives_identical_bytes() -> None:
    texts = [f"document {i}: the quick brown fox {i * 7 % 13}" for i in range(200)]
    first, second = Tokenizer.train(texts, 300), Tokenizer.train(texts, 300)
    assert first.inner.to_str(pretty=True) == second.inner.to_str(pretty=True)


@pytest.mark.slow
def test_a_second_experiment_reuses_the_cached_tokenizer(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_experiment(home, "EXP-002")  # the same data and vocabulary
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert len(list((home / "cache").glob("tokenizer-*-300.json"))) == 1

    def refuse(*args: object, **kwargs: object) -> Tokenizer:
        raise AssertionError("trained again")

    monkeypatch.setattr(Tokenizer, "train", refuse)
    result = cli(home, "train", "EXP-002", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert "reused tokenizer from cache/tokenizer-" in result.stderr
    first, second = (home / "checkpoints" / name / "tokenizer.json" for name in ("EXP-001", "EXP-002"))
    assert first.read_bytes() == second.read_bytes()


def test_a_cached_tokenizer_is_used_only_when_its_fingerprint_verifies(tmp_path: Path) -> None:
    texts = [f"document {i}: the quick brown fox" for i in range(50)]
    path = tokenizer.cache_path(tmp_path / "cache", texts, 300)
    assert re.fullmatch(r"tokenizer-[0-9a-f]{16}-300\.json", path.name)
    assert (
        path != tokenizer.cache_path(tmp_path / "cache", texts, 400) != tokenizer.cache_path(tmp_path, texts[1:], 300)
    )
    trained = Tokenizer.train(texts, 300)
    tokenizer.to_cache(trained, path)
    cached = tokenizer.from_cache(path)
    assert cached is not None and cached.fingerprint == trained.fingerprint
    path.with_suffix(".fingerprint").write_text("0" * 64)
    assert tokenizer.from_cache(path) is None
    assert tokenizer.load_or_train(tmp_path / "t.json", texts, 300, path)[1] == "trained"
