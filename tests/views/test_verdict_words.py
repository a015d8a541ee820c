"""Issue 33 items 7 and 8: words that match the figures. One verdict wording and one sign convention everywhere
(beyond as readily as within; the best minus the next is negative), the evaluations' own error named when it could
explain a lead over the seeds, a twin told from a replicate, no empty replicates row, the HTML comparison's config
keys only config keys, and the variant's default description as the README shows it. Nothing is trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli, json_out, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views import side_by_side
from octlm.views.compare import noise, seeds, student, winner
from octlm.views.compare.noise import Error, Size
from octlm.views.report import sections


def test_beyond_is_said_as_readily_as_within() -> None:
    beyond = noise.measured("run", "unpaired", -0.0300, Error(evaluation=0.0100), Size(5.0))
    within = noise.measured("run", "unpaired", 0.0150, Error(evaluation=0.0100), Size(5.0))
    assert beyond["within_noise"] is False and within["within_noise"] is True
    said = noise.run_words(beyond, "EXP-001", "EXP-002", "unpaired", "")
    assert said.startswith("EXP-002's final eval loss is lower than EXP-001's: -0.0300 ± 0.0100 (unpaired; normal ")
    assert "beyond evaluation noise: 3.0x its standard error, past the critical 1.96" in said
    said = noise.run_words(within, "EXP-001", "EXP-002", "unpaired", "")
    assert (
        "+0.0150 ± 0.0100" in said and "within evaluation noise: 1.5x its standard error, inside the critical" in said
    )
    assert noise.measured("run", "unpaired", 0.01, Error(), Size())["within_noise"] is None


def _entry(rank: int, value: float, sd: float | None, params: dict) -> winner.Entry:
    spread = (-sd, 0.0, sd) if sd is not None else (0.0,)
    members = [seeds.Member(f"T{rank}{i}", i, value + d) for i, d in enumerate(spread)]
    return winner.Entry(rank, params, members)


def test_the_best_against_the_next_is_negative() -> None:
    best, runner_up = _entry(1, 4.50, 0.01, {"lr": 3e-3}), _entry(2, 5.00, 0.02, {"lr": 1e-3})
    (found,) = winner.challengers([best, runner_up], "eval_loss", Size(), None)
    assert found["verdict"] is not None and found["verdict"]["difference"] == pytest.approx(-0.5)
    assert found["words"].startswith("as configurations, the best's mean eval loss is lower than rank 2's: -0.5000 ± ")
    assert "beyond seed and evaluation noise" in found["words"] or "beyond" in found["words"]


def _registered(home: Path, experiment_id: str, **training: object) -> None:
    write_experiment(home, experiment_id, training=dict(training))
    record = {"step": 12, "tokens": 768, "eval_loss": 5.0, "eval_loss_se": 0.004, "data_receipt": "0" * 16}
    (home / "runs").mkdir(exist_ok=True)
    (home / "runs" / f"{experiment_id}.jsonl").write_text(json.dumps(record) + "\n")
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))


def test_a_twin_is_no_replicate_and_no_empty_replicates_row(home: Path) -> None:
    _registered(home, "EXP-001")
    _registered(home, "EXP-002")  # the same config, seed included
    result = side_by_side.compare(Home(home), ["EXP-001", "EXP-002"])
    assert "is a twin of EXP-001" in result["versus"][0]["seed_noise"], result["versus"][0]
    assert "replicate of" not in result["versus"][0]["seed_noise"]
    assert "replicates eval_loss" not in [name for name, _ in side_by_side.table_rows(result)]
    _registered(home, "EXP-003", seed=7, learning_rate=0.001)
    side = sections.comparison(side_by_side.compare(Home(home), ["EXP-001", "EXP-003"]))
    assert [row[0] for row in side.config] == ["training.learning_rate", "training.seed"]
    assert "data_receipt" in [row[0] for row in side.metrics]


def test_a_variant_is_described_as_the_readme_shows(home: Path) -> None:
    made = cli(home, "new", "--from", "EXP-001", "--set", "training.learning_rate=1e-3", "--json")
    assert made.exit_code == 0, made.stderr
    shown = json_out(cli(home, "show", json_out(made)["id"], "--json"))
    assert shown["description"] == "from EXP-001: training.learning_rate=1e-3"


def test_seed_noise_names_what_dominates_and_how_many_seeds_would_give_80_percent_power() -> None:
    """Issue 36 item 3, issue 46 item 3: Welch's error over the seeds beside the evaluations' own; which dominates;
    the seeds a configuration needs for 80% power at the smallest effect of interest (not the 50% of "would resolve
    a difference this size"); the threshold Student's t at the degrees of freedom, not two errors."""
    a = [seeds.Member(f"a{i}", ("a", i), 5.000 + d, error=0.001) for i, d in enumerate((-0.02, 0.0, 0.02))]
    b = [seeds.Member(f"b{i}", ("b", i), 4.990 + d, error=0.001) for i, d in enumerate((-0.02, 0.0, 0.02))]
    compared = seeds.configuration(a, b, Size(5.0, 0.02, 0.01))
    assert compared is not None
    verdict = compared.verdict
    assert (
        verdict["test"] == "Welch"
        and verdict["within_noise"] is True
        and verdict["seed_se"] == pytest.approx((0.02**2 / 3 + 0.02**2 / 3) ** 0.5)
    )
    words = seeds.words(verdict, "A", "B", compared.sizes, seeds.advice(compared, None))
    assert "-0.0100 ± 0.0164 (Welch, 3 seeds against 3; the seeds' ± 0.0163 and the evaluation's ± 0.0014 (" in words
    assert "within seed and evaluation noise" in words and "(seed noise dominates)" in words
    # 80% power at 0.01 nats with sd 0.02 on each side: 2 (t + t_0.8)^2 (0.02 / 0.01)^2, about 64 seeds, and more
    # where the evaluation's own error (which no seed lowers) is in the error too
    assert f"needs about {verdict['seeds_needed']} seeds a configuration, 3 now" in words
    assert 64 < verdict["seeds_needed"] <= 80  # type: ignore[operator]


def test_students_t_gives_the_tables_critical_values_and_calibrates_small_groups() -> None:
    """The two-sided 95% critical values of Student's t (any table: 12.706, 4.303, 2.776, 2.228, 2.042 at 1, 2, 4,
    10, 30 df), the normal's 1.96 far out; two groups of 3 seeds 2.7 errors apart are within seed noise, where a
    threshold of two errors would have called them different."""
    for df, value in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (10**6, 1.960)):
        assert student.t_critical(df) == pytest.approx(value, abs=1e-3)
    assert student.welch_df(0.02, 3, 0.02, 3) == pytest.approx(4.0)
    assert student.welch_df(0.01, 3, 0.03, 5) == pytest.approx(
        (0.01**2 / 3 + 0.03**2 / 5) ** 2 / ((0.01**2 / 3) ** 2 / 2 + (0.03**2 / 5) ** 2 / 4)
    )
    judged = noise.measured("configuration", "Welch", -0.0300, Error(seed=0.0110, seed_df=4.0), Size())
    assert judged["within_noise"] is True and judged["critical"] == pytest.approx(2.776, abs=1e-3)


def test_the_winner_of_single_seed_configurations_rests_on_the_paired_error() -> None:
    """Issue 36 item 6: one trial a configuration: the best against the next judged by the paired evaluation error
    over the same blocks, with its test, and said to be a question for seeds."""
    nats = [16 * (4.5 + 0.3 * ((i * 7) % 5 - 2)) for i in range(64)]
    blocks = BlockEvaluation(12, "same", nats, [16] * 64, [40] * 64)
    other = BlockEvaluation(
        12, "same", [n + 16 * 0.01 * ((i % 3) - 0.4) for i, n in enumerate(nats)], [16] * 64, [40] * 64
    )
    best = winner.Entry(1, {"lr": 3e-3}, [seeds.Member("T1", 1, 4.50, None, blocks)])
    runner_up = winner.Entry(2, {"lr": 1e-3}, [seeds.Member("T2", 1, 4.51, None, other)])
    (found,) = winner.challengers([best, runner_up], "eval_loss", Size(), None)
    assert found["verdict"] is not None and found["verdict"]["test"] == "paired"
    assert found["words"].startswith("on these blocks, the best's eval loss is lower than rank 2's: ")
    assert "(paired, 64 blocks" in found["words"] and "seed noise is not in this error; one seed each" in found["words"]
