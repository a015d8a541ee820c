"""Seed replicates (issue 27): experiments the same but for training.seed are grouped by ``show`` (mean ± sd of each
metric), and ``show A B`` between groups says whether their difference exceeds the seeds' spread, in words.
Run files and rows as octlm writes them, without training."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import cli, json_out, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.views.sweeps import replicates

FINALS = {  # ID: (learning rate, seed, final eval loss)
    "EXP-001": (1e-3, 1, 5.00),
    "EXP-002": (1e-3, 2, 5.02),
    "EXP-003": (1e-3, 3, 4.98),
    "EXP-004": (2e-3, 1, 5.01),
    "EXP-005": (2e-3, 2, 4.99),
    "EXP-006": (2e-3, 3, 5.03),
    "EXP-007": (3e-3, 1, 4.50),
    "EXP-008": (3e-3, 2, 4.51),
    "EXP-009": (3e-3, 3, 4.49),
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("replicates")
    for experiment_id, (rate, seed, loss) in FINALS.items():
        write_experiment(home, experiment_id, training={"learning_rate": rate, "seed": seed})
        record = {"step": 12, "tokens": 768, "train_loss": loss + 0.1, "eval_loss": loss, "eval_loss_se": 0.004}
        (home / "runs").mkdir(exist_ok=True)
        (home / "runs" / f"{experiment_id}.jsonl").write_text(json.dumps(record) + "\n")
        with Registry(home / "registry.db") as registry:
            register(Home(home), registry, load(Home(home), experiment_id))
            run = registry.start_run(experiment_id, "train", start_step=0, pid=17537)
            registry.finish_run(run, "completed", end_step=12, latest_metrics=record, final_metrics=record)
    return home


def test_show_groups_replicates_with_mean_and_sd(seeds: Path) -> None:
    listed = json_out(cli(seeds, "show", "--json"))
    groups = {tuple(g["ids"]): g for g in listed["replicates"]}
    assert list(groups) == [
        ("EXP-001", "EXP-002", "EXP-003"),
        ("EXP-004", "EXP-005", "EXP-006"),
        ("EXP-007", "EXP-008", "EXP-009"),
    ]
    first = groups["EXP-001", "EXP-002", "EXP-003"]["metrics"]["eval_loss"]
    assert first["n"] == 3 and first["mean"] == pytest.approx(5.0) and first["sd"] == pytest.approx(0.02)
    text = cli(seeds, "show").stdout
    assert "replicates EXP-001, EXP-002, EXP-003 at step 12: eval loss 5.0000 ± 0.0200 (3 seeds)" in text


def test_show_a_b_says_within_seed_noise_and_beyond(seeds: Path) -> None:
    """Two configurations of seeds 1 to 3 each: paired by seed (issue 46), the configurations' verdict first, with
    the evaluations' own error (unpaired here: no run kept its evaluation block by block) as its second part."""
    within = json_out(cli(seeds, "show", "EXP-001", "EXP-004", "--json"))["versus"][0]
    assert within["within_seed_noise"] is True and "within seed and evaluation noise" in within["seed_noise"]
    beyond = json_out(cli(seeds, "show", "EXP-001", "EXP-007", "--json"))["versus"][0]
    assert beyond["within_seed_noise"] is False and "beyond seed and evaluation noise" in beyond["seed_noise"]
    text = cli(seeds, "show", "EXP-001", "EXP-004").stdout
    assert (
        "EXP-004 against EXP-001: as configurations, EXP-004's mean eval loss is higher than EXP-001's: +0.0100 ± "
        in text
    )
    differences = [0.01, -0.03, 0.05]  # EXP-004 - EXP-001, EXP-005 - EXP-002, EXP-006 - EXP-003
    paired = statistics.stdev(differences) / 3**0.5
    assert f"(paired by seed, 3 seeds; the seeds' ± {paired:.4f} and the evaluation's ± {0.004 * 2**0.5:.4f}" in text
    assert "5.0000 ± 0.0200 (3 seeds)" in text and "5.0100 ± 0.0200 (3 seeds)" in text  # the table's row
    same = json_out(cli(seeds, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]
    assert "EXP-002 is a replicate of EXP-001" in same["seed_noise"]


def test_an_experiment_without_replicates_says_so(seeds: Path, tmp_path: Path) -> None:
    home = tmp_path / "two"
    for experiment_id, rate in (("EXP-001", 1e-3), ("EXP-002", 2e-3)):
        write_experiment(home, experiment_id, training={"learning_rate": rate})
    shown = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]
    assert shown["within_seed_noise"] is None and "EXP-001 has no replicates" in shown["seed_noise"]


def test_a_second_experiment_with_the_same_seed_is_no_replicate() -> None:
    configs = {
        f"EXP-00{n}": {"training": {"seed": seed, "learning_rate": 0.001}} for n, seed in ((1, 1), (2, 1), (3, 2))
    }
    (group,) = replicates.groups(configs)
    finals = {i: {"step": 4, "eval_loss": 5.0 + n / 10} for n, i in enumerate(group)}
    summary = replicates.summarize(group, configs, finals)
    assert summary["ids"] == ["EXP-001", "EXP-002", "EXP-003"] and summary["counted"] == ["EXP-001", "EXP-003"]
    assert replicates.groups({"EXP-001": configs["EXP-001"], "EXP-002": configs["EXP-002"]}) == []  # one seed: none
