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
from octlm.views import noise
from octlm.views import side_by_side as compare
from octlm.views.report import sections
from octlm.views.sweeps import status


def test_beyond_is_said_as_readily_as_within() -> None:
    beyond = noise.judge(-0.0300, 0.0100, "evaluation noise", "unpaired")
    within = noise.judge(0.0150, 0.0100, "evaluation noise", "unpaired")
    assert beyond.within is False and within.within is True
    assert beyond.words == "-0.0300 ± 0.0100 (unpaired): beyond evaluation noise, 3.0x its standard error"
    assert within.words == "+0.0150 ± 0.0100 (unpaired): within evaluation noise, 1.5x its standard error"
    assert noise.judge(0.01, None, "evaluation noise", "unpaired").within is None


def test_a_lead_the_evaluations_own_error_could_explain_names_the_fix() -> None:
    judged = noise.over_seeds(-0.0200, 0.0010, 0.0150)  # far beyond the seeds' spread, within the evaluation's
    assert judged.within is True and "within evaluation noise" in judged.words
    assert "training.eval_tokens" in judged.words and "more seeds" in judged.words
    assert "beyond seed noise" in noise.over_seeds(-0.0200, 0.0010, 0.0010).words


def _configuration(value: float, sd: float, params: dict) -> dict:
    return {
        "params": params,
        "step": 12,
        "value": {"n": 3, "mean": value, "sd": sd, "values": []},
        "eval_loss_se": 0.001,
        "trials": [],
        "rank": 0,
    }


def test_the_best_against_the_next_is_negative() -> None:
    best, runner_up = _configuration(4.50, 0.01, {"lr": 3e-3}), _configuration(5.00, 0.02, {"lr": 1e-3})
    said = status.verdict([best, runner_up], "eval_loss")  # type: ignore[list-item]
    assert said.startswith("the best (lr=0.003) against the next (lr=0.001): eval_loss -0.5000 ± ")
    assert "beyond seed noise" in said


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
    result = compare.compare(Home(home), ["EXP-001", "EXP-002"])
    assert "is a twin of EXP-001" in result["versus"][0]["seed_noise"], result["versus"][0]
    assert "replicate of" not in result["versus"][0]["seed_noise"]
    assert "replicates eval_loss" not in [name for name, _ in compare.table_rows(result)]
    _registered(home, "EXP-003", seed=7, learning_rate=0.001)
    side = sections.comparison(compare.compare(Home(home), ["EXP-001", "EXP-003"]))
    assert [row[0] for row in side.config] == ["training.learning_rate", "training.seed"]
    assert "data_receipt" in [row[0] for row in side.metrics]


def test_a_variant_is_described_as_the_readme_shows(home: Path) -> None:
    made = cli(home, "new", "--from", "EXP-001", "--set", "training.learning_rate=1e-3", "--json")
    assert made.exit_code == 0, made.stderr
    shown = json_out(cli(home, "show", json_out(made)["id"], "--json"))
    assert shown["description"] == "from EXP-001: training.learning_rate=1e-3"


def test_seed_noise_names_what_dominates_and_how_many_seeds_would_resolve_it() -> None:
    """Issue 36 item 3: Welch's error over the seeds beside the evaluations' own; which dominates; how many seeds;
    the threshold Student's t at the Welch degrees of freedom (calibrated for small groups), not two errors."""
    from octlm.views.sweeps import replicates

    a = {"n": 3, "mean": 5.000, "sd": 0.020, "values": []}
    b = {"n": 3, "mean": 4.990, "sd": 0.020, "values": []}
    within, words = replicates.difference(a, b, 0.001)  # type: ignore[arg-type]
    welch = (0.02**2 / 3 + 0.02**2 / 3) ** 0.5
    assert within is True and f"-0.0100 ± {welch:.4f} (over the seeds, Welch, 4.0 df): within seed noise" in words
    assert "(seed noise dominates)" in words
    # at n seeds each: Welch's df = 2(n-1), and the difference stands beyond t(df) errors from n = 32 on
    assert "about 32 seeds a configuration would resolve a difference this size" in words
    assert replicates.seeds_to_resolve(-0.01, 0.02, 0.02) == 32
    assert 0.01 / (0.0008 / 32) ** 0.5 > noise.t_critical(62) and 0.01 / (0.0008 / 31) ** 0.5 < noise.t_critical(60)
    _, evaluations = replicates.difference(a, b, 0.05)  # type: ignore[arg-type]
    assert "(evaluation noise dominates)" in evaluations and "seeds a configuration" not in evaluations


def test_students_t_gives_the_tables_critical_values_and_calibrates_small_groups() -> None:
    """The two-sided 95% critical values of Student's t (any table: 12.706, 4.303, 2.776, 2.228, 2.042 at 1, 2, 4,
    10, 30 df), the normal's 1.96 far out; two groups of 3 seeds 2.8 errors apart are within seed noise, where a
    threshold of two errors would have called them different."""
    for df, value in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (10**6, 1.960)):
        assert noise.t_critical(df) == pytest.approx(value, abs=1e-3)
    assert noise.welch_df(0.02, 3, 0.02, 3) == pytest.approx(4.0)
    assert noise.welch_df(0.01, 3, 0.03, 5) == pytest.approx(
        (0.01**2 / 3 + 0.03**2 / 5) ** 2 / ((0.01**2 / 3) ** 2 / 2 + (0.03**2 / 5) ** 2 / 4)
    )
    judged = noise.over_seeds(-0.0300, 0.0110, None, df=4.0)  # 2.7 errors: beyond 2, within t(4) = 2.776
    assert judged.within is True and "Welch, 4.0 df" in judged.words


def test_the_winner_of_single_seed_configurations_rests_on_the_paired_error() -> None:
    """Issue 36 item 6: one trial a configuration: the best against the next judged by the paired evaluation error,
    with its test, and said to be a question for seeds."""
    best, runner_up = _configuration(4.50, 0.01, {"lr": 3e-3}), _configuration(4.51, 0.02, {"lr": 1e-3})
    best["value"]["sd"] = runner_up["value"]["sd"] = None
    paired = {"eval_loss_difference": -0.01, "eval_loss_se": 0.02, "blocks": 64}
    said = status.verdict([best, runner_up], "eval_loss", paired, "lr")  # type: ignore[list-item, arg-type]
    assert said.startswith("the best (lr=0.003) against the next (lr=0.001): eval_loss -0.0100 ± 0.0200 (paired, 64")
    assert "within evaluation noise" in said and "training.eval_tokens: 0" in said
    assert said.endswith("(`octlm sweep extend lr --seeds 3`)")
