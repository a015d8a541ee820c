from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_corpus, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.views.curves.plots import chart


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three tiny experiments: EXP-002 differs from EXP-001 in the learning rate, EXP-003 in depth too."""
    home = write_corpus(tmp_path_factory.mktemp("compare") / "home")
    write_experiment(home, "EXP-001")
    write_experiment(home, "EXP-002", training={"learning_rate": 1e-2, "min_learning_rate": 1e-3})
    write_experiment(home, "EXP-003", model={"n_layers": 1}, training={"steps": 8})
    for experiment_id in ("EXP-001", "EXP-002", "EXP-003"):
        assert cli(home, "train", experiment_id, "-q").exit_code == 0
    return home


@pytest.mark.slow
def test_two_experiments_side_by_side_show_only_differing_keys(trained: Path) -> None:
    result = json_out(cli(trained, "show", "EXP-001", "EXP-002", "--json"))
    assert result["ids"] == ["EXP-001", "EXP-002"]
    assert result["config"]["training"]["training.learning_rate"] == [0.003, 0.01]
    assert "model.n_layers" not in result["config"].get("model", {})
    assert all("training.steps" not in keys for keys in result["config"].values())
    first, second = result["experiments"]
    assert first["final"]["eval_loss"] != second["final"]["eval_loss"]
    assert first["best"]["eval_loss"] <= first["final"]["eval_loss"]
    assert result["equal_tokens"] == 12 * 4 * 16
    text = cli(trained, "show", "EXP-001", "EXP-002")
    assert text.exit_code == 0 and "training.learning_rate" in text.stdout and "model.n_layers" not in text.stdout
    everything = json_out(cli(trained, "show", "EXP-001", "EXP-002", "--json", "--all-keys"))
    assert everything["config"]["model"]["model.n_layers"] == [2, 2]


def test_three_experiments_compare_at_equal_tokens(trained: Path) -> None:
    result = json_out(cli(trained, "show", "EXP-001", "EXP-002", "EXP-003", "--json"))
    assert result["equal_tokens"] == 8 * 4 * 16  # EXP-003 stopped at 8 steps
    assert [e["at_equal_tokens"]["tokens"] for e in result["experiments"]] == [512, 512, 512]
    assert result["config"]["model"]["model.n_layers"] == [2, 2, 1]
    rows = list(csv.reader(io.StringIO(cli(trained, "show", "EXP-001", "EXP-002", "EXP-003", "--csv").stdout)))
    assert rows[0] == ["field", "EXP-001", "EXP-002", "EXP-003"]
    assert ["model.n_layers", "2", "2", "1"] in rows


def test_listing_filters_sorting_limit_and_columns(trained: Path) -> None:
    def ids(*args: str) -> list[str]:
        result = cli(trained, "show", "--json", *args)
        assert result.exit_code == 0, result.stderr
        return [row["id"] for row in json_out(result)["experiments"]]

    assert ids() == ["EXP-001", "EXP-002", "EXP-003"]
    assert ids("--where", "model.n_layers=1") == ["EXP-003"]
    assert ids("--where", "training.learning_rate>0.005") == ["EXP-002"]
    assert ids("--where", "status=completed", "--where", "steps=12") == ["EXP-001", "EXP-002"]
    losses = {row["id"]: row["eval_loss"] for row in json_out(cli(trained, "show", "--json"))["experiments"]}
    assert ids("--sort", "eval_loss") == sorted(losses, key=losses.get)
    assert ids("--sort", "-eval_loss", "--limit", "1") == [max(losses, key=losses.get)]
    cutoff = sorted(losses.values())[1]
    assert ids("--where", f"eval_loss<{cutoff}") == [min(losses, key=losses.get)]
    picked = json_out(cli(trained, "show", "--json", "--columns", "eval_loss,model.n_layers"))["experiments"]
    assert list(picked[0]) == ["id", "eval_loss", "model.n_layers"]
    rows = list(csv.DictReader(io.StringIO(cli(trained, "show", "--csv").stdout)))
    assert [row["id"] for row in rows] == ["EXP-001", "EXP-002", "EXP-003"]
    assert float(rows[0]["eval_loss"]) == pytest.approx(losses["EXP-001"])
    bad = cli(trained, "show", "--where", "eval_loss<<3")
    assert bad.exit_code == 2 and "expected KEY OP VALUE" in bad.stderr


def test_filters_are_never_sql(trained: Path) -> None:
    result = cli(trained, "show", "--json", "--where", "status=x' or '1'='1")
    assert result.exit_code == 0 and json_out(result)["experiments"] == []


def test_plot_renders_in_80_plain_ascii_columns(trained: Path) -> None:
    result = cli(trained, "show", "EXP-001", "EXP-002", "--plot")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert all(ord(ch) < 128 for ch in result.stdout)
    for title in ("train loss", "eval loss", "learning rate", "gradient norm (before clipping)"):
        assert title in lines
    assert "* EXP-001   o EXP-002" in result.stdout and "- clip threshold" in result.stdout


def test_unknown_id_is_exit_2_in_every_form(trained: Path) -> None:
    for args in (["EXP-404"], ["EXP-001", "EXP-404"], ["EXP-404", "--plot"], ["EXP-404", "--csv"]):
        result = cli(trained, "show", *args)
        assert result.exit_code == 2 and "unknown experiment EXP-404" in result.stderr, args


@pytest.mark.slow
def test_detail_shows_provenance(trained: Path) -> None:
    done = octlm(trained, "train", "EXP-003", "--restart", "-q")
    assert done.returncode == 0, done.stderr
    detail = json_out(cli(trained, "show", "EXP-003", "--json"))
    run = detail["runs"][-1]
    assert run["argv"][1:] == ["--home", str(trained), "train", "EXP-003", "--restart", "-q"]
    for key in ("host", "python_version", "torch_version", "device", "dtype", "threads", "started", "ended"):
        assert run[key] is not None, key
    text = cli(trained, "show", "EXP-003").stdout
    assert "provenance" in text


def test_registry_views_answer_without_joins(trained: Path) -> None:
    with sqlite3.connect(trained / "registry.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("select * from experiment_summary order by id")]
    assert [r["id"] for r in rows] == ["EXP-001", "EXP-002", "EXP-003"]
    assert rows[0]["status"] == "completed" and rows[0]["step"] == 12 and rows[0]["eval_loss"] is not None
    assert json.loads(json.dumps(rows))  # plain values only


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """EXP-001 and EXP-002 with runs, verdicts and run files written as octlm writes them, without training."""
    home = tmp_path / "recorded"
    for experiment_id, rate in (("EXP-001", 0.003), ("EXP-002", 0.01)):
        write_experiment(home, experiment_id, training={"learning_rate": rate})
        records = [
            {
                "step": s,
                "tokens": s * 64,
                "train_loss": 5.0 - s * rate * 10,
                "eval_loss": 5.1 - s * rate * 10,
                "lr": rate,
                "gradient_norm": 1.5,
            }
            for s in (4, 8, 12)
        ]
        (home / "runs").mkdir(exist_ok=True)
        (home / "runs" / f"{experiment_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        with Registry(home / "registry.db") as registry:
            register(Home(home), registry, load(Home(home), experiment_id))
            run = registry.start_run(experiment_id, "train", start_step=0, argv=["octlm", "train", experiment_id])
            registry.finish_run(run, "completed", end_step=12, latest_metrics=records[-1], final_metrics=records[-1])
            registry.add_verification(experiment_id, "verify-resume", "pass", {"summary": "identical"}, run)
    return home


def test_show_reads_decoded_registry_rows_in_every_mode(recorded: Path) -> None:
    listed = json_out(cli(recorded, "show", "--json"))["experiments"]
    assert [(e["id"], e["status"], e["step"], e["last_verdict"]) for e in listed] == [
        ("EXP-001", "completed", 12, "verify-resume: pass"),
        ("EXP-002", "completed", 12, "verify-resume: pass"),
    ]
    assert [e["id"] for e in json_out(cli(recorded, "show", "--json", "--sort", "-eval_loss"))["experiments"]] == [
        "EXP-001",
        "EXP-002",
    ]
    detail = json_out(cli(recorded, "show", "EXP-002", "--json"))
    assert detail["runs"][0]["argv"] == ["octlm", "train", "EXP-002"]
    assert detail["runs"][0]["final_metrics"]["step"] == 12
    assert detail["verifications"][0]["details"] == {"summary": "identical"}
    assert "verdicts" in cli(recorded, "show", "EXP-002").stdout
    both = json_out(cli(recorded, "show", "EXP-001", "EXP-002", "--json"))
    assert both["config"] == {"training": {"training.learning_rate": [0.003, 0.01]}}
    assert [e["verify_resume"] for e in both["experiments"]] == ["pass", "pass"]
    curves = json_out(cli(recorded, "show", "EXP-001", "EXP-002", "--plot", "--json"))
    assert curves["schema_version"] == 1 and [len(curves["runs"][i]) for i in ("EXP-001", "EXP-002")] == [3, 3]
    drawn = cli(recorded, "show", "EXP-001", "EXP-002", "--plot")
    assert drawn.exit_code == 0 and "- clip threshold" in drawn.stdout
    for ignored in (["--plot", "--csv"], ["--where", "eval_loss<1"], ["--sort", "eval_loss"], ["--all-keys"]):
        refused = cli(recorded, "show", "EXP-001", *ignored)  # an option that does not apply is an error
        assert refused.exit_code == 2, ignored
    assert cli(recorded, "show", "--plot").exit_code == 2


def test_chart_is_plain_ascii_within_its_width() -> None:
    series = {"a": [(0.0, 1.0), (50.0, float("nan")), (100.0, 3.0)], "b": [(0.0, None), (100.0, 2.0)]}
    text = chart("loss", series, width=60, hline=("limit", 2.5))
    lines = text.splitlines()
    assert lines[0] == "loss" and max(len(line) for line in lines) <= 60
    assert lines[-1].split() == ["*", "a", "o", "b", "-", "limit"]
    assert chart("empty", {"a": [(0.0, None)]}) == "empty: no data\n"
