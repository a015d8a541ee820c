"""The order training reads its blocks in: epochs without replacement, the data-order receipt, its check on resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_same_training_state, cli, json_out, octlm, write_experiment

from octlm.core import layout
from octlm.data.sampler import RECEIPT_START, EpochSampler, Receipt, ReplacementSampler, replay
from octlm.store.runs import runfile
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_checkpoint_whose_receipt_was_altered_is_refused(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    path = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 8)
    record = checkpoint.read(path)
    record.receipt = {**record.receipt, "digest": "0" * 16}
    checkpoint.save(path, record)  # a consistent file and sidecar: only the order is wrong
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 3
    assert "data order does not replay" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
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


def test_new_experiments_read_in_epochs_and_exp_008_keeps_the_seeds_draw(home: Path) -> None:
    from octlm.config import load as load_config

    made = json_out(cli(home, "new", "--preset", "day1", "--json"))
    assert made["config"]["data"]["sampling"] == "epochs" and made["config"]["training"]["eval_tokens"] == 8192
    shipped = load_config(Path(__file__).resolve().parents[2] / "experiments" / "EXP-008.yaml")
    assert shipped.data.sampling == "replacement" and shipped.training.eval_tokens == 0
    assert shipped.training.schedule == "cosine" and shipped.training.spike_guard == "off"
