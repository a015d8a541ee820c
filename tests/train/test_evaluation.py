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


def _tiny_model_and_blocks(count: int, lengths: list[int] | None):
    """A tiny decoder and ``count`` blocks of 9 tokens, with their documents' lengths when given."""
    from octlm.config import from_dict
    from octlm.data.blocks import TokenBlocks
    from octlm.train.model.decoder import Decoder

    config = from_dict(
        {"tokenizer": {"vocab_size": 300}, "model": {"context_length": 8, "d_model": 16, "n_layers": 1, "n_heads": 2}}
    )
    torch.manual_seed(0)
    stream = (np.arange(9 * count) * 37 + 5) % 300
    blocks = TokenBlocks(stream, 9, np.arange(300) % 4, pad_id=0)
    return Decoder(config), blocks.with_documents(np.array(lengths)) if lengths else blocks


def _by_hand(model, blocks) -> tuple[np.ndarray, np.ndarray]:
    """Each block's nats and targets, one block at a time."""
    nats, counts = [], []
    with torch.no_grad():
        for i in range(len(blocks)):
            inputs, targets = blocks.batch(slice(i, i + 1))
            losses = torch.nn.functional.cross_entropy(model(inputs)[0].double(), targets[0], reduction="none")
            nats.append(float(losses[targets[0] != 0].sum()))
            counts.append(int((targets[0] != 0).sum()))
    return np.array(nats), np.array(counts, dtype=np.float64)


def _clustered(a: np.ndarray, b: np.ndarray, clusters: list[int]) -> float:
    """``sqrt(G/(G-1) * sum_g (A_g - L B_g)^2) / B`` over the clusters, summed by hand."""
    groups = sorted(set(clusters))
    sums = [
        (sum(a[i] for i, c in enumerate(clusters) if c == g), sum(b[i] for i, c in enumerate(clusters) if c == g))
        for g in groups
    ]
    loss, g = a.sum() / b.sum(), len(groups)
    return math.sqrt(g / (g - 1) * sum((n - loss * t) ** 2 for n, t in sums)) / b.sum()


def test_the_standard_error_is_over_documents_else_chunks_else_blocks() -> None:
    """Issue 46 item 1: adjacent blocks of one document are not independent draws, so the error is a ratio
    estimator's over clusters: the blocks' documents (the one holding each block's first target token) when they
    are at least 4, else chunks of 8 consecutive blocks, else the blocks; the record says how many and what."""
    from octlm.train.evaluation import evaluate

    # 40 blocks of 9 tokens in 10 documents of 36 tokens: block i's first target (token 9i+1) is in document 9i//36
    model, blocks = _tiny_model_and_blocks(40, [36] * 10)
    found = evaluate(model, blocks, torch.device("cpu"), "fp32", batch_size=7)
    a, b = _by_hand(model, blocks)
    documents = [(9 * i + 1) // 36 for i in range(40)]
    assert found["eval_clusters"] == 10 and found["eval_cluster_unit"] == "documents"
    assert found["eval_loss_se"] == pytest.approx(_clustered(a, b, documents), rel=1e-5)
    assert found["eval_loss_se"] != pytest.approx(_clustered(a, b, list(range(40))), rel=1e-3)  # not over blocks
    # 3 documents: chunks of 8 consecutive blocks (positions 0-7, 8-15, ...), 5 of them
    model, blocks = _tiny_model_and_blocks(40, [120] * 3)
    found = evaluate(model, blocks, torch.device("cpu"), "fp32", batch_size=7)
    assert found["eval_clusters"] == 5 and found["eval_cluster_unit"] == "chunks"
    assert found["eval_loss_se"] == pytest.approx(_clustered(a, b, [i // 8 for i in range(40)]), rel=1e-5)
    # blocks chosen from a split keep their positions in it: 3 blocks of chunk 0 and 2 of chunk 4
    chosen = blocks.select(np.array([1, 2, 5, 33, 38]))
    found = evaluate(model, chosen, torch.device("cpu"), "fp32", batch_size=7)
    assert (found["eval_clusters"], found["eval_cluster_unit"]) == (2, "chunks")
    assert found["eval_loss_se"] == pytest.approx(
        _clustered(a[[1, 2, 5, 33, 38]], b[[1, 2, 5, 33, 38]], [0, 0, 0, 1, 1]), rel=1e-5
    )
    # 6 consecutive blocks of one chunk: no clusters to speak of, each block its own unit (and said so)
    found = evaluate(model, blocks.select(slice(0, 6)), torch.device("cpu"), "fp32", batch_size=7)
    assert (found["eval_clusters"], found["eval_cluster_unit"]) == (6, "blocks")
    assert found["eval_loss_se"] == pytest.approx(_clustered(a[:6], b[:6], list(range(6))), rel=1e-5)


def test_runs_record_their_clusters_pair_across_seeds_and_an_edited_blocks_file_is_not_used(home: Path) -> None:
    """Issue 46 items 1, 2 and 6 on real runs: with ``eval_selection: spread`` two experiments of other seeds
    evaluate the same blocks (paired); every evaluation record, its registry row and its blocks file carry the
    clusters; ``octlm eval --tokens`` of the budget reads the same blocks as training's evaluation; a blocks file
    edited after its run is not used by ``show A B``, which says why."""
    import sqlite3

    from octlm.store.runs import evalblocks

    for experiment, seed in (("EXP-001", 1), ("EXP-002", 2)):
        training = {"eval_blocks": 12, "eval_selection": "spread", "seed": seed}
        write_experiment(home, experiment, data={"validation_fraction": 0.5}, training=training)
        assert cli(home, "train", experiment, "-q").exit_code == 0
    records = [json.loads(line) for line in (home / "runs" / "EXP-001.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if "eval_loss" in r]
    assert evaluations and all(r["eval_cluster_unit"] == "documents" and r["eval_clusters"] >= 4 for r in evaluations)
    with sqlite3.connect(home / "registry.db") as conn:
        rows = conn.execute(
            "select eval_clusters, eval_cluster_unit from metrics where eval_loss is not null"
        ).fetchall()
    assert rows and set(rows) == {(r["eval_clusters"], r["eval_cluster_unit"]) for r in evaluations}
    kept = evalblocks.at_step(evalblocks.path_for(home / "runs" / "EXP-001.jsonl"), None)
    assert kept is not None and kept.checked is True and len(set(kept.units)) == evaluations[-1]["eval_clusters"]
    final = evaluations[-1]
    again = json_out(cli(home, "eval", "EXP-001", "--tokens", "192", "--json"))  # the budget: 12 blocks of 16
    assert again["eval_loss"] == pytest.approx(final["eval_loss"], rel=1e-6)
    assert (again["eval_clusters"], again["eval_cluster_unit"]) == (final["eval_clusters"], "documents")
    versus = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]
    assert versus["test"] == "paired" and versus["paired"]["clusters"] == final["eval_clusters"]
    assert versus["paired"]["df"] == final["eval_clusters"] - 1
    path = evalblocks.path_for(home / "runs" / "EXP-002.jsonl")
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    last["nats"] = last["nats"][:3] + ("A" if last["nats"][3] != "A" else "B") + last["nats"][4:]  # one value moved
    path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    versus = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]
    assert versus["test"] == "unpaired" and versus["paired"] is None
    text = cli(home, "show", "EXP-001", "EXP-002").stdout
    assert "runs/EXP-002-blocks.jsonl is not used, its checksum does not match its arrays" in text
