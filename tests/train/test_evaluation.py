"""The held-out evaluation: its standard errors against a direct computation, the budget, per-source figures, and show
A B's word on evaluation noise.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cli, json_out, write_experiment


def test_the_standard_error_is_the_ratio_estimator_over_blocks() -> None:
    from octlm.config import from_dict
    from octlm.data.blocks import TokenBlocks
    from octlm.train.evaluation import evaluate
    from octlm.train.model.decoder import Decoder

    config = from_dict(
        {"tokenizer": {"vocab_size": 300}, "model": {"context_length": 8, "d_model": 16, "n_layers": 1, "n_heads": 2}}
    )
    torch.manual_seed(0)
    model = Decoder(config)
    stream = (np.arange(9 * 7) * 37 + 5) % 300
    stream[20:24] = 0  # some PAD targets
    blocks = TokenBlocks(stream, 9, np.arange(300) % 4, pad_id=0)
    found = evaluate(model, blocks, torch.device("cpu"), "fp32", batch_size=3)
    nats, counts, sizes = [], [], []
    with torch.no_grad():
        for i in range(len(blocks)):
            inputs, targets = blocks.batch(slice(i, i + 1))
            losses = torch.nn.functional.cross_entropy(model(inputs)[0].double(), targets[0], reduction="none")
            keep = targets[0] != 0
            nats.append(float(losses[keep].sum()))
            counts.append(int(keep.sum()))
            sizes.append(int(blocks.target_bytes(targets)[0].sum()))
    a, b, y = (np.array(v, dtype=np.float64) for v in (nats, counts, sizes))
    loss = a.sum() / b.sum()
    direct = math.sqrt(len(a) / (len(a) - 1) * ((a - loss * b) ** 2).sum()) / b.sum()
    assert found["eval_loss"] == pytest.approx(loss, rel=1e-6)
    assert found["eval_loss_se"] == pytest.approx(direct, rel=1e-6)
    per_byte = a.sum() / y.sum()
    bytes_se = math.sqrt(len(a) / (len(a) - 1) * ((a - per_byte * y) ** 2).sum()) / y.sum() / math.log(2)
    assert found["bits_per_byte_se"] == pytest.approx(bytes_se, rel=1e-6)
    assert found["perplexity_se"] == pytest.approx(math.exp(loss) * direct, rel=1e-5)
    assert found["eval_tokens"] == int(b.sum())
    one = evaluate(model, blocks.select(slice(0, 1)), torch.device("cpu"), "fp32", batch_size=3)
    assert one["eval_loss_se"] is None  # one block: no error to give


@pytest.mark.slow
def test_the_evaluation_budget_and_sources(home: Path) -> None:
    (home / "more").mkdir()
    (home / "more" / "other.txt").write_text("Another source entirely, with words of its own. " * 200)
    write_experiment(
        home, data={"sources": ["corpus/*.txt", "more/*.txt"], "validation_fraction": 0.5}, training={"eval_tokens": 48}
    )
    result = cli(home, "train", "EXP-001", "--json", "-q")
    assert result.exit_code == 0, result.stderr
    metrics = json_out(result)["metrics"]
    assert metrics["eval_tokens"] <= 48 and metrics["eval_tokens"] > 16
    assert set(metrics["eval_sources"]) <= {"corpus/*.txt", "more/*.txt"} and metrics["eval_sources"]


@pytest.mark.slow
def test_show_a_b_says_when_a_difference_is_within_evaluation_noise_and_whether_the_order_was_the_same(
    home: Path,
) -> None:
    write_experiment(home, "EXP-002", training={"eval_interval": 6})  # the same run: only bookkeeping differs
    write_experiment(home, "EXP-003", training={"learning_rate": 1e-9, "min_learning_rate": 0.0})  # barely trained
    for experiment in ("EXP-001", "EXP-002", "EXP-003"):
        assert cli(home, "train", experiment, "-q").exit_code == 0
    shown = json_out(cli(home, "show", "EXP-001", "EXP-002", "EXP-003", "--json"))
    same, untrained = shown["versus"]
    assert same["eval_loss_difference"] == 0.0 and same["within_noise"] is True and same["same_data_order"] is True
    assert untrained["within_noise"] is False and untrained["eval_loss_difference"] > 2 * untrained["combined_se"]
    assert untrained["same_data_order"] is True  # the same seed draws the same blocks, whatever the rate
    # issue 36: every final evaluation read the same validation blocks, so each difference is paired
    assert same["test"] == untrained["test"] == "paired" and same["paired"]["eval_loss_se"] == 0.0
    paired = untrained["paired"]
    assert paired["eval_loss_difference"] == pytest.approx(untrained["eval_loss_difference"])
    assert paired["eval_loss_se"] < untrained["combined_se"] and paired["unpaired_se"] == pytest.approx(
        untrained["combined_se"], rel=1e-6
    )
    text = cli(home, "show", "EXP-001", "EXP-002", "EXP-003").stdout
    lines = [line for line in text.splitlines() if "against EXP-001: " in line]  # each one's verdict, in order
    # issue 46: the same run is "identical" (0 ± 0), and a run-level verdict says what it is: on these blocks
    assert same["run"]["identical"] is True and "are identical: every block's loss the same" in lines[0]
    assert "the same blocks in the same order for the first 48" in lines[0]
    assert "beyond evaluation noise" in lines[1] and "x its standard error" in lines[1]
    assert lines[1].startswith("EXP-003 against EXP-001: on these blocks, EXP-003's eval loss is higher than ")
    assert "(paired, " in lines[1] and "seed noise is not in this error" in lines[1]


@pytest.mark.slow
def test_a_resumed_run_keeps_the_same_blocks_file_as_a_straight_one(home: Path) -> None:
    """Issue 36 item 1: each evaluation block by block beside the run file, cut back on resume (so a stopped and
    resumed run keeps what a straight run keeps), discarded by --restart and removed by rm."""
    write_experiment(home, "EXP-002")
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    assert cli(home, "train", "EXP-002", "--until", "8", "-q").exit_code == 0
    assert cli(home, "resume", "EXP-002", "--step", "4", "-q").exit_code == 0  # evaluated at 8 and 12 again
    straight, resumed = (home / "runs" / f"{name}-blocks.jsonl" for name in ("EXP-001", "EXP-002"))
    kept = [json.loads(line) for line in straight.read_text().splitlines()]
    assert [record["step"] for record in kept] == [4, 8, 12] and all(record["blocks"] > 1 for record in kept)
    assert resumed.read_text() == straight.read_text()
    assert cli(home, "train", "EXP-002", "--restart", "--yes", "--until", "2", "-q").exit_code == 0
    assert not resumed.exists()  # no evaluation yet since the restart
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 0 and not straight.exists()
