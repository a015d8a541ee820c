"""Config limits: every size bounded, keys unique, offending values cut in messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import cli, json_out


@pytest.mark.parametrize(
    "yaml_text, fragment",
    [
        ("training: {steps: 100000000000000000000, warmup_steps: 1}", "training.steps: must be at most 1,000,000,000"),
        ("tokenizer: {vocab_size: 1000000000000}", "tokenizer.vocab_size: must be at most 1,048,576"),
        ("training: {batch_size: 100000000}", "training.batch_size: must be at most 65,536"),
        ("model: {context_length: 10000000, d_model: 32, n_heads: 2}", "model.context_length: must be at most"),
        ("model: {n_layers: 100000}", "model.n_layers: must be at most 1,024"),
        ("training: {eval_blocks: 100000000}", "training.eval_blocks: must be at most"),
        ("checkpoint: {keep: 100000000}", "checkpoint.keep: must be at most"),
        ("data: {max_bytes: 100000000000000000}", "data.max_bytes: must be at most"),
        (
            "training:\n  steps: 20\n  batch_size: 4\n  steps: 30\n",
            "line 4, column 3: malformed YAML: duplicate key 'steps'",
        ),
        ("model: {n_layers: 1, n_layers: 2}", "duplicate key 'n_layers' (first on line 1)"),
        ("training: {steps: " + "7" * 5000 + "}", "malformed YAML"),
    ],
)
def test_config_sizes_have_limits_and_keys_are_unique(home: Path, yaml_text: str, fragment: str) -> None:
    (home / "experiments" / "EXP-001.yaml").write_text(yaml_text)
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 2 and fragment in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and len(result.stderr) < 300


def test_config_errors_cut_the_offending_value(home: Path) -> None:
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump({"training": {"steps": "x" * 100_000}}))
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 2 and "xxxxxxxx…" in result.stderr and len(result.stderr) < 200
    keys = json_out(cli(home, "config", "keys", "--json"))["keys"]
    assert next(k for k in keys if k["key"] == "training.steps")["doc"].endswith("at most 1,000,000,000")
