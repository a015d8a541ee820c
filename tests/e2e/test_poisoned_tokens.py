"""Issue 25 item 13: a token file poisoned with its checksum recomputed passed the random spot check in 7 of 8
``prepare`` runs. The token file's record is now signed with a key of this user's kept outside the home, so an
editor of the home cannot make a poisoned cache verify: every ``prepare`` rebuilds it, says so, and the tokens
trained on are the tokenizer's."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import cli, json_out, write_experiment

DOCUMENTS = 300  # the spot check re-encodes 8 of them: a poisoned middle one is missed almost every time


@pytest.fixture
def many(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the key, outside the home
    home = tmp_path / "home"
    (home / "corpus").mkdir(parents=True)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for i in range(DOCUMENTS):
        text = " ".join(words[(i * 7 + j) % len(words)] for j in range(40 + i % 13))
        (home / "corpus" / f"doc{i:03d}.txt").write_text(f"document {i}: {text}\n")
    write_experiment(home, data={"sources": ["corpus/*.txt"], "validation_fraction": 0.1})
    return home


def poison(cache: Path) -> bytes:
    """Swap the tokens of a middle training document for other valid ids and recompute the record's sha256 (as
    an editor of the home can); the genuine bytes."""
    (token_file,) = cache.glob("tokens-*.bin")
    record_path = token_file.with_suffix(".json")
    record, genuine = json.loads(record_path.read_text()), token_file.read_bytes()
    tokens = np.frombuffer(genuine, dtype=np.dtype(record["dtype"])).copy()
    lengths = np.asarray(record["train_lengths"])
    middle = len(lengths) // 2
    start, end = int(lengths[:middle].sum()) + 1, int(lengths[: middle + 1].sum()) - 1  # inside its bos ... eos
    tokens[start:end] = tokens[start:end][::-1]
    assert not np.array_equal(tokens, np.frombuffer(genuine, dtype=tokens.dtype))
    token_file.write_bytes(tokens.tobytes())
    record["sha256"] = hashlib.sha256(tokens.tobytes()).hexdigest()
    record_path.write_text(json.dumps(record))
    return genuine


@pytest.mark.slow
def test_a_poisoned_token_file_never_verifies(many: Path) -> None:
    first = cli(many, "prepare", "EXP-001", "--json")
    assert first.exit_code == 0, first.stderr
    key = Path(os.environ["XDG_STATE_HOME"]) / "octlm" / "token-cache.key"
    assert key.is_file() and key.stat().st_mode & 0o077 == 0 and not key.resolve().is_relative_to(many)
    for _ in range(8):
        genuine = poison(many / "cache")
        result = cli(many, "prepare", "EXP-001", "--json")
        assert result.exit_code == 0, result.stderr
        assert any("did not verify" in note and "rebuilt" in note for note in json_out(result)["notes"])
        assert json_out(result)["token_file"] == "written"
        (token_file,) = (many / "cache").glob("tokens-*.bin")
        assert token_file.read_bytes() == genuine
    again = cli(many, "prepare", "EXP-001", "--json")
    assert json_out(again)["notes"] == [] and json_out(again)["token_file"] == "reused"


def test_a_cache_signed_with_another_key_is_rebuilt(many: Path, tmp_path: Path, monkeypatch) -> None:
    assert cli(many, "prepare", "EXP-001").exit_code == 0
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "another-user"))
    result = cli(many, "prepare", "EXP-001", "--json")
    assert result.exit_code == 0, result.stderr
    assert any("not signed" in note for note in json_out(result)["notes"])
