"""octlm sample: the prompt once, the parts in --json, special tokens said, and the checkpoint it falls back to."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out

from octlm.core import layout
from octlm.data.tokenizer import Tokenizer
from octlm.train import generate


def test_sample_prints_the_prompt_once_and_its_json_has_the_parts(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    printed = cli(home, "sample", "EXP-001", "--prompt", "Docu", "--max-new-tokens", "5")
    answer = json_out(cli(home, "sample", "EXP-001", "--prompt", "Docu", "--max-new-tokens", "5", "--json"))
    assert answer["prompt"] == "Docu" and answer["text"] == "Docu" + answer["completion"]
    assert printed.stdout == answer["text"] + "\n" and not printed.stdout.startswith("DocuDocu")


@pytest.mark.slow
def test_all_special_tokens_are_said(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    tokenizer = Tokenizer.load(home / "checkpoints" / "EXP-001" / "tokenizer.json")

    def specials(model, ids, max_new_tokens, device, stop_id=None):  # as a barely trained model does
        return [*ids, *[tokenizer.pad_id] * 23, tokenizer.eos_id]

    monkeypatch.setattr(generate, "greedy", specials)
    result = cli(home, "sample", "EXP-001", "--temperature", "0", "--json")
    assert result.exit_code == 0
    assert "24 tokens generated, all special (<|pad|> x23, <|eos|> x1)" in result.stderr
    assert json_out(result)["special_tokens"] == {"<|pad|>": 23, "<|eos|>": 1}


@pytest.mark.slow
def test_sample_says_when_it_falls_back_to_an_older_checkpoint(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    newest = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 12)
    newest.write_bytes(newest.read_bytes()[:1000])
    result = cli(home, "sample", "EXP-001", "--max-new-tokens", "4", "--json")
    assert result.exit_code == 0 and json_out(result)["step"] == 8
    assert "warning: skipped an invalid checkpoint: step-000012.pt" in result.stderr


def test_a_completion_that_stops_inside_a_character_holds_that_character_back(tmp_path: Path) -> None:
    from octlm.tasks.sample import _whole_characters

    tokenizer = Tokenizer.train(["plain ascii text only, many times over " * 50], 300)
    ids = tokenizer.encode("caf\u00e9 \u4e2d", add_special_tokens=False)  # é is 2 bytes, 中 is 3: byte tokens here
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd")  # what sample printed before: a half character
    kept, held = _whole_characters(tokenizer, ids[:-1])
    assert tokenizer.decode(kept) == "caf\u00e9 " and held == 2
    assert _whole_characters(tokenizer, ids) == (ids, 0)
