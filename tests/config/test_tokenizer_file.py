"""The config's keys for a tokenizer brought along: ``tokenizer.file`` takes the file's vocabulary (0 in the config,
wherever a preset, the default or a copied experiment had a number), ``tokenizer.vocab_size`` then stays out of the
fingerprint while the file's path is in it; ``tokenizer.special_tokens`` reads a mapping or ROLE=TOKEN texts alike,
and is refused in one line naming the key when it cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import cli

from octlm import config as cfg
from octlm.config.presets import preset
from octlm.core.errors import ConfigError


def test_a_file_without_vocab_size_takes_the_files_from_a_preset_the_default_or_new() -> None:
    assert cfg.from_dict({"tokenizer": {"file": "tok.json"}}).tokenizer.vocab_size == 0
    raw = {"preset": "day1", "tokenizer": {"file": "tok.json"}}
    assert cfg.from_dict(cfg.resolve_preset(raw, "x"), "x").tokenizer.vocab_size == 0  # not day1's 1024
    named = {"preset": "day1", "tokenizer": {"file": "tok.json", "vocab_size": 50257}}
    assert cfg.from_dict(cfg.resolve_preset(named, "x"), "x").tokenizer.vocab_size == 50257  # the user's word
    overridden = cfg.apply_overrides(preset("day1"), ["tokenizer.file=tok.json"])
    assert cfg.from_dict(overridden).tokenizer.vocab_size == 0
    both = cfg.apply_overrides(preset("day1"), ["tokenizer.file=tok.json", "tokenizer.vocab_size=512"])
    assert cfg.from_dict(both).tokenizer.vocab_size == 512
    assert cfg.from_dict(preset("day1")).tokenizer.vocab_size == 1024  # without a file, nothing changes


def test_new_writes_vocab_size_0_for_a_file(home: Path) -> None:
    result = cli(
        home,
        "new",
        "--set",
        "tokenizer.file=tok/tokenizer.json",
        "--set",
        "tokenizer.special_tokens={pad: <|endoftext|>}",
    )
    assert result.exit_code == 0, result.stderr
    written = yaml.safe_load((home / "experiments" / "EXP-002.yaml").read_text())
    assert written["tokenizer"] == {
        "vocab_size": 0,
        "file": "tok/tokenizer.json",
        "special_tokens": ["pad=<|endoftext|>"],
    }


def test_with_a_file_the_fingerprint_leaves_vocab_size_out_and_keeps_the_path() -> None:
    day1 = cfg.from_dict(preset("day1"))
    brought = day1.with_keys({"tokenizer.file": "tok.json", "tokenizer.vocab_size": 0})
    assert brought.fingerprint != day1.fingerprint
    assert brought.with_keys({"tokenizer.vocab_size": 50258}).fingerprint == brought.fingerprint  # the checkpoints'
    assert brought.with_keys({"tokenizer.file": "other.json"}).fingerprint != brought.fingerprint
    assert day1.with_keys({"tokenizer.vocab_size": 2048}).fingerprint != day1.fingerprint  # trained BPE: as ever
    named = brought.with_keys({"tokenizer.special_tokens": ["pad=<|endoftext|>"]})
    assert named.fingerprint != brought.fingerprint
    assert {"tokenizer.file", "tokenizer.special_tokens"} <= set(named.trajectory_dict())
    assert "tokenizer.vocab_size" not in named.trajectory_dict()


def test_special_tokens_read_a_mapping_or_role_token_texts_alike() -> None:
    forms = [
        {"pad": "<|endoftext|>", "bos": "<s>"},
        ["bos=<s>", "pad=<|endoftext|>"],
        ["pad=<|endoftext|>", "bos=<s>"],
    ]
    made = [cfg.from_dict({"tokenizer": {"file": "t.json", "special_tokens": form}}) for form in forms]
    assert {config.tokenizer.special_tokens for config in made} == {("bos=<s>", "pad=<|endoftext|>")}
    assert made[0].tokenizer.named() == {"bos": "<s>", "pad": "<|endoftext|>"}
    assert len({config.fingerprint for config in made}) == 1
    again = cfg.from_dict(yaml.safe_load(cfg.to_yaml(made[0])))
    assert again.tokenizer == made[0].tokenizer  # written and read back


@pytest.mark.parametrize(
    ("tokenizer", "message"),
    [
        ({"special_tokens": {"pad": "<pad>"}}, "tokenizer.special_tokens: names tokens of a tokenizer file"),
        ({"file": "t.json", "special_tokens": {"cls": "[CLS]"}}, "'cls=[CLS]': expected ROLE=TOKEN"),
        ({"file": "t.json", "special_tokens": ["pad"]}, "'pad': expected ROLE=TOKEN"),
        ({"file": "t.json", "special_tokens": ["pad=a", "pad=b"]}, "tokenizer.special_tokens: names pad twice"),
        ({"file": "t.json", "special_tokens": {"pad": 3}}, "tokenizer.special_tokens[0]: expected text"),
        ({"vocab_size": 0}, "tokenizer.vocab_size: must be at least 260"),
        ({"file": "t.json", "vocab_size": -1}, "tokenizer.vocab_size: must not be negative"),
    ],
)
def test_tokenizer_keys_that_cannot_be_used_are_one_line(tokenizer: dict, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        cfg.from_dict({"tokenizer": tokenizer}, "EXP-001.yaml")
    assert str(raised.value).startswith("EXP-001.yaml: tokenizer.") and message in str(raised.value)
    assert "\n" not in str(raised.value)
