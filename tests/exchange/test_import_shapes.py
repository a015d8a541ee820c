"""Issue 25 item 9: ``registry import`` (and ``unpack``, which reads the same records) checks the shape of JSON
columns and run-file values as octlm's own rows are: ``tags: "x"``, metrics that are no mapping, a loss that is a
string or 1e308, a step that is no count are refused (exit 2, one line naming the record's line and field),
nothing written. NaN and inf (a diverged run's figures) are accepted: octlm stores and shows them (item 12)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import cli, write_corpus, write_experiment


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    home = tmp_path_factory.mktemp("a") / "home"
    write_corpus(home)
    write_experiment(home, training={"steps": 8}, checkpoint={"interval": 4, "keep": 3})
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert cli(home, "note", "EXP-001", "a note").exit_code == 0
    return [json.loads(line) for line in cli(home, "registry", "export").stdout.splitlines()]


def first(records: list[dict], kind: str) -> dict:
    return next(r for r in records if r["type"] == kind)


def last_record(records: list[dict]) -> dict:
    return first(records, "run_file")["records"][-1]


CASES = {
    "tags a string": ("experiment", lambda r: first(r, "experiment").update(tags="x"), "tags"),
    "tags of numbers": ("experiment", lambda r: first(r, "experiment").update(tags=[1, 2]), "tags"),
    "config_json a list": ("experiment", lambda r: first(r, "experiment").update(config_json=[1]), "config_json"),
    "former_ids not IDs": ("experiment", lambda r: first(r, "experiment").update(former_ids=["../x"]), "former_ids"),
    "final_metrics a list": ("run", lambda r: first(r, "run").update(final_metrics=[1, 2]), "final_metrics"),
    "latest loss a string": ("run", lambda r: first(r, "run").update(latest_metrics={"eval_loss": "low"}), "eval_loss"),
    "argv a string": ("run", lambda r: first(r, "run").update(argv="octlm train"), "argv"),
    "pid a string": ("run", lambda r: first(r, "run").update(pid="12"), "pid"),
    "checkpoint metrics a number": ("checkpoint", lambda r: first(r, "checkpoint").update(metrics=3), "metrics"),
    "details a string": ("verification", lambda r: None, "details"),
    "loss 1e308": ("run_file", lambda r: last_record(r).update(train_loss=1e308), "train_loss"),
    "loss a string": ("run_file", lambda r: last_record(r).update(train_loss="0.5"), "train_loss"),
    "step negative": ("run_file", lambda r: last_record(r).update(step=-1), "step"),
    "step a float": ("run_file", lambda r: last_record(r).update(step=2.5), "step"),
    "metrics row loss a string": (
        "run_file",
        lambda r: first(r, "run_file")["metrics"][-1].update(train_loss="x"),
        "train_loss",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_value_is_refused_naming_the_record_and_field(
    exported: list[dict], tmp_path: Path, case: str
) -> None:
    kind, change, field = CASES[case]
    records = json.loads(json.dumps(exported))
    if case == "details a string":
        records.append(
            {
                "schema_version": 1,
                "type": "verification",
                "uuid": "8c5f8a4e-1c4b-4d0e-9c73-1b2f7d3c6a11",
                "experiment_uuid": first(records, "experiment")["uuid"],
                "kind": "verify-resume",
                "verdict": "pass",
                "details": "fine",
            }
        )
    else:
        change(records)
    line = 1 + next(
        i for i, r in enumerate(records) if r["type"] == kind and (kind != "verification" or "details" in r)
    )
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    home = tmp_path / "b"
    home.mkdir()
    result = cli(home, "registry", "import", str(path))
    assert result.exit_code == 2, (case, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert f"line {line}" in lines[0] and field in lines[0], (case, lines[0])
    assert not (home / "registry.db").exists() and not (home / "experiments").exists()


def test_nan_and_inf_figures_are_accepted(exported: list[dict], tmp_path: Path) -> None:
    records = json.loads(json.dumps(exported))
    last_record(records).update(train_loss=math.nan, eval_loss=math.inf)
    first(records, "run").update(final_metrics={"train_loss": math.nan})
    path = tmp_path / "diverged.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    home = tmp_path / "b"
    home.mkdir()
    result = cli(home, "registry", "import", str(path))
    assert result.exit_code == 0, result.stderr
    assert cli(home, "doctor").exit_code == 0
