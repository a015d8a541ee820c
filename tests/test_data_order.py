"""Data and evaluation a researcher can trust: epochs without replacement, the data-order receipt, the evaluation's
standard errors, the divergence and spike guards, and schedules that extend exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_same_training_state, cli, json_out, octlm, write_experiment

from octlm.core import layout
from octlm.data.sampler import RECEIPT_START, EpochSampler, Receipt, ReplacementSampler, replay
from octlm.store import runfile
from octlm.train import checkpoint


def final(home: Path, step: int, experiment: str = "EXP-001") -> checkpoint.Record:
    return checkpoint.read(layout.checkpoint_path(home / "checkpoints" / experiment, step))


def receipt_of(batches: list[list[int]]) -> Receipt:
    receipt = Receipt()
    for batch in batches:
        receipt.add(np.array(batch))
    return receipt


def test_an_epoch_reads_every_block_once_and_batches_run_on_into_the_next() -> None:
    sampler = EpochSampler(10, 4, seed=3)
    batches = [sampler.next().tolist() for _ in range(5)]  # 20 blocks: two epochs exactly
    stream = [i for batch in batches for i in batch]
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:]) == list(range(10))
    assert stream[:10] != stream[10:]  # each epoch has an order of its own
    assert sampler.receipt.blocks == 20 and sampler.receipt == receipt_of(batches)
    sought = EpochSampler(10, 4, seed=3)
    sought.load_state_dict(torch.tensor([12]))  # a resume seeks: nothing replayed
    assert sought.next().tolist() == stream[12:16]
    with pytest.raises(ValueError, match="epoch sampler"):
        sought.load_state_dict(torch.zeros(3))


def test_replay_reaches_the_state_and_receipt_of_the_draws() -> None:
    for sampler in (ReplacementSampler(50, 6, seed=1), EpochSampler(50, 6, seed=1)):
        start = sampler.clone()
        for _ in range(9):
            sampler.next()
        state, receipt = replay(start, 9)
        assert torch.equal(state, sampler.state_dict()) and receipt == sampler.receipt
        assert start.receipt.digest == RECEIPT_START  # the copy drew, not the start


def test_a_run_reads_each_epoch_once_and_its_receipt_is_the_hash_of_what_it_read(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_experiment(home, data={"sampling": "epochs"}, training={"steps": 30, "eval_interval": 10})
    trace = tmp_path / "trace"
    trace.mkdir()
    monkeypatch.setenv("OCTLM_TRACE_BLOCKS", str(trace))
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    batches = [sum(json.loads(line), []) for line in (trace / "rank0.jsonl").read_text().splitlines()]
    records = runfile.read(home / "runs" / "EXP-001.jsonl")
    blocks = round(records[-1]["data_blocks"] / records[-1]["epochs"])  # the training blocks
    stream = [i for batch in batches for i in batch]
    for epoch in range(len(stream) // blocks):
        assert sorted(stream[epoch * blocks : (epoch + 1) * blocks]) == list(range(blocks)), epoch
    assert records[-1]["epochs"] == pytest.approx(120 / blocks) and records[-1]["data_blocks"] == 120
    assert records[-1]["data_receipt"] == receipt_of(batches).digest == final(home, 30).receipt["digest"]


def test_stopped_mid_epoch_and_resumed_is_bit_identical_with_the_same_receipt(tmp_path: Path) -> None:
    from conftest import write_corpus

    homes = [write_corpus(tmp_path / name) for name in ("straight", "split")]
    for root in homes:
        write_experiment(root, data={"sampling": "epochs"}, training={"steps": 20, "eval_interval": 5})
    assert cli(homes[0], "train", "EXP-001", "-q").exit_code == 0
    assert cli(homes[1], "train", "EXP-001", "--until", "7", "-q").exit_code == 0
    assert octlm(homes[1], "resume", "EXP-001", "-q").returncode == 0  # a new process
    straight, split = final(homes[0], 20), final(homes[1], 20)
    assert_same_training_state(straight, split)
    assert straight.receipt == split.receipt and straight.receipt["blocks"] == 80
    records = [runfile.without_timings(runfile.read(root / "runs" / "EXP-001.jsonl")) for root in homes]
    assert records[0] == records[1]


def test_a_checkpoint_whose_receipt_was_altered_is_refused(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    path = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 8)
    record = checkpoint.read(path)
    record.receipt = {**record.receipt, "digest": "0" * 16}
    checkpoint.save(path, record)  # a consistent file and sidecar: only the order is wrong
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 3
    assert "data order does not replay" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_checkpoint_from_before_receipts_replays_its_order(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    path = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 8)
    record = checkpoint.read(path)
    kept = record.receipt
    record.receipt = {}
    checkpoint.save(path, record)
    result = cli(home, "resume", "EXP-001")
    assert result.exit_code == 0 and "predates data-order receipts" in result.stderr
    straight = final(home, 12)
    assert straight.receipt["blocks"] == kept["blocks"] + 16


def test_the_standard_error_is_the_ratio_estimator_over_blocks() -> None:
    from octlm.config import from_dict
    from octlm.data.blocks import TokenBlocks
    from octlm.train.decoder import Decoder
    from octlm.train.evaluation import evaluate

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


def test_a_non_finite_step_stops_as_diverged_keeping_the_last_good_checkpoint(home: Path) -> None:
    write_experiment(
        home,
        training={"learning_rate": 100.0, "min_learning_rate": 0.0, "steps": 40, "warmup_steps": 1},
        checkpoint={"interval": 2},
    )
    result = octlm(home, "train", "EXP-001", "-q")
    assert result.returncode == 4, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "diverged at step" in line and "last good checkpoint" in line
    stopped = int(line.split("diverged at step ")[1].split(":")[0])
    steps = [step for step, _ in layout.checkpoints(home / "checkpoints" / "EXP-001")]
    assert steps and max(steps) < stopped  # nothing written at or after the step that diverged
    newest = final(home, max(steps))
    assert all(torch.isfinite(t).all() for t in newest.model.values())
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    assert shown["runs"][-1]["status"] == "diverged"


def test_a_spike_skipped_step_resumes_bit_identical(home: Path) -> None:
    write_experiment(
        home,
        model={"dropout": 0.1},
        training={"steps": 24, "spike_guard": "skip", "spike_sigma": 0.5, "spike_window": 4, "eval_interval": 6},
        checkpoint={"interval": 6},
    )
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "12", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["identical"]
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    skipped = [r.get("skipped_steps") for r in runfile.read(home / "runs" / "EXP-001.jsonl")]
    assert skipped[-1] and any(0 < (s or 0) < skipped[-1] for s in skipped)  # skips on both sides of step 12
    assert 0 < min(final(home, 24).guard["skipped"].tolist()) < 12 < max(final(home, 24).guard["skipped"].tolist())


def test_a_wsd_run_forked_in_its_stable_phase_with_more_steps_equals_a_run_started_with_them(home: Path) -> None:
    wsd = {"schedule": "wsd", "decay_fraction": 0.25, "steps": 24, "warmup_steps": 2, "eval_interval": 4}
    kept = {"interval": 4, "keep": 20}
    write_experiment(
        home, "EXP-001", data={"sampling": "epochs"}, model={"dropout": 0.1}, training=wsd, checkpoint=kept
    )
    write_experiment(
        home,
        "EXP-002",
        data={"sampling": "epochs"},
        model={"dropout": 0.1},
        training={**wsd, "steps": 40},
        checkpoint=kept,
    )
    for experiment in ("EXP-001", "EXP-002"):
        assert cli(home, "train", experiment, "-q").exit_code == 0
    made = cli(home, "new", "--init-from", "EXP-001@8", "--with-optimizer", "--set", "training.steps=40", "--json")
    assert made.exit_code == 0, made.stderr
    fork = json_out(made)["id"]
    assert json_out(made)["config"]["init"]["step"] == 8
    assert cli(home, "train", fork, "-q").exit_code == 0
    for step in (12, 16, 20, 24, 28, 32, 36, 40):  # every checkpoint both keep, step for step
        assert_same_training_state(final(home, step, fork), final(home, step, "EXP-002"))
    assert final(home, 40, fork).receipt == final(home, 40, "EXP-002").receipt
    records = [runfile.without_timings(runfile.read(home / "runs" / f"{e}.jsonl")) for e in (fork, "EXP-002")]
    assert records[0] == records[1]


def test_the_schedules_at_their_edges() -> None:
    from octlm.train.schedule import constant, linear, wsd

    assert wsd(0, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == pytest.approx(0.1)
    assert wsd(79, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == 1.0
    assert wsd(100, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == pytest.approx(0.1)
    longer = [wsd(s, peak=1.0, floor=0.1, warmup_steps=10, total_steps=500, decay_fraction=0.2) for s in range(80)]
    assert longer == [
        wsd(s, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) for s in range(80)
    ]
    assert linear(10, peak=1.0, floor=0.0, warmup_steps=10, total_steps=110) == 1.0
    assert linear(60, peak=1.0, floor=0.0, warmup_steps=10, total_steps=110) == pytest.approx(0.5)
    assert (
        constant(5, peak=2.0, warmup_steps=10) == pytest.approx(1.2) and constant(50, peak=2.0, warmup_steps=10) == 2.0
    )


def test_new_experiments_read_in_epochs_and_exp_008_keeps_the_seeds_draw(home: Path) -> None:
    from octlm.config import load as load_config

    made = json_out(cli(home, "new", "--preset", "day1", "--json"))
    assert made["config"]["data"]["sampling"] == "epochs" and made["config"]["training"]["eval_tokens"] == 8192
    shipped = load_config(Path(__file__).resolve().parents[1] / "experiments" / "EXP-008.yaml")
    assert shipped.data.sampling == "replacement" and shipped.training.eval_tokens == 0
    assert shipped.training.schedule == "cosine" and shipped.training.spike_guard == "off"


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
    text = cli(home, "show", "EXP-001", "EXP-002", "EXP-003").stdout
    lines = [line for line in text.splitlines() if "against EXP-001" in line]
    assert "within evaluation noise" in lines[0] and "the same blocks in the same order for the first 48" in lines[0]
    assert "x the combined error" in lines[1]
