"""A run's statuses and records: --until is stopped, the last step completed; each record's loss the mean since the
last; a split between logs changes no record; --restart lists what it discards.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_metrics_match_run_file, cli, json_out, metrics_rows, records, write_experiment

from octlm.core.errors import Refused
from octlm.core.home import Home
from octlm.run import runner
from octlm.store.registry import Registry


def sibling(tmp_path: Path, home: Path, name: str, **training: Any) -> Path:
    """Another home with the same corpus and EXP-001 with these training keys."""
    other = tmp_path / name
    shutil.copytree(home / "corpus", other / "corpus")
    write_experiment(other, training=training)
    return other


@pytest.mark.slow
def test_until_is_stopped_and_the_last_step_completed(home: Path) -> None:
    stopped = cli(home, "train", "EXP-001", "--until", "6", "--json", "-q")
    assert stopped.exit_code == 0, stopped.stderr
    assert json_out(stopped)["status"] == "stopped"
    done = cli(home, "resume", "EXP-001", "--json", "-q")
    assert json_out(done)["status"] == "completed"
    with Registry(home / "registry.db") as registry:
        assert [run["status"] for run in registry.runs("EXP-001")] == ["stopped", "completed"]


@pytest.mark.slow
def test_records_average_the_loss_since_the_last_log(tmp_path: Path, home: Path) -> None:
    every = sibling(tmp_path, home, "every", log_interval=1, eval_interval=6)
    fours = sibling(tmp_path, home, "fours", log_interval=4, eval_interval=6)
    for root in (every, fours):
        assert cli(root, "train", "EXP-001", "-q").exit_code == 0
    per_step = {record["step"]: record for record in records(every)}
    assert sorted(per_step) == list(range(1, 13))
    logged = records(fours)
    assert [record["step"] for record in logged] == [4, 6, 8, 12]  # log 4, 8, 12; evaluation 6 and 12
    previous = 0
    for record in logged:
        total = 0.0
        for step in range(previous + 1, record["step"] + 1):
            total += per_step[step]["train_loss"]  # float64, in step order
        assert record["train_loss"] == total / (record["step"] - previous)
        assert record["lr"] == per_step[record["step"]]["lr"]
        assert record["gradient_norm"] == per_step[record["step"]]["gradient_norm"]  # the logged step's
        assert all(
            (key in record) == (record["step"] in (6, 12)) for key in ("eval_loss", "perplexity", "bits_per_byte")
        )
        previous = record["step"]
    assert_metrics_match_run_file(every)
    assert_metrics_match_run_file(fours)


@pytest.mark.slow
def test_split_between_logs_gives_the_same_run_file_and_metrics(tmp_path: Path, home: Path) -> None:
    whole = sibling(tmp_path, home, "whole", log_interval=4, eval_interval=6)
    split = sibling(tmp_path, home, "split", log_interval=4, eval_interval=6)
    assert cli(whole, "train", "EXP-001", "-q").exit_code == 0
    assert cli(split, "train", "EXP-001", "--until", "5", "-q").exit_code == 0  # mid-interval: 1 step summed
    assert cli(split, "resume", "EXP-001", "--until", "10", "-q").exit_code == 0
    assert [record["step"] for record in records(split)] == [4, 6, 8]
    (split / "checkpoints" / "EXP-001" / "step-000010.pt").unlink()  # back to step 8: the file and table are cut
    assert cli(split, "resume", "EXP-001", "-q").exit_code == 0
    assert records(split) == records(whole)
    assert_metrics_match_run_file(whole)
    assert_metrics_match_run_file(split)
    assert [row["step"] for row in metrics_rows(split)] == [4, 6, 8, 12]


@pytest.mark.slow
def test_restart_asks_first_and_lists_what_it_discarded(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    before = sorted(p.name for p in folder.iterdir())
    asked: list[list[str]] = []

    def decline(items: list[str]) -> bool:
        asked.append(items)
        return False

    with pytest.raises(Refused, match="nothing was discarded"):
        runner.train(Home(home), "EXP-001", restart=True, confirm=decline)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert [row["step"] for row in metrics_rows(home)] == [r["step"] for r in records(home)] == [4, 5, 8]
    expected = [
        "checkpoints/EXP-001/step-000004.pt (step 4)",
        "checkpoints/EXP-001/step-000008.pt (step 8)",
        "checkpoints/EXP-001/tokenizer.json",
        "runs/EXP-001.jsonl",
        "runs/EXP-001-blocks.jsonl",  # its evaluations block by block (issue 36)
    ]
    assert asked == [expected]
    result = runner.train(Home(home), "EXP-001", restart=True, until=4, confirm=lambda items: True)
    assert result.discarded == tuple(expected)
    assert result.status == "stopped"
    assert [record["step"] for record in records(home)] == [4]
    assert [row["step"] for row in metrics_rows(home)] == [4]
