"""Issue 25 item 12: a diverged run's figures (NaN, inf) are stored in a form octlm reads back: a registry JSON
cell holding NaN is no malformed cell (``show`` does not warn, ``doctor`` is healthy, ``--repair`` keeps it), cells
octlm writes are valid SQLite JSON, and ``show``, ``show --plot``, ``report`` and ``registry export``/``import`` show
and carry ``nan``/``inf``. The records are written by the test as an older octlm left them."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, json_out

from octlm.store.registry import Registry

OLD_CELL = '{"loss": NaN, "eval_loss": Infinity, "step": 4}'  # json.dumps of a diverged run's figures


@pytest.fixture
def diverged(home: Path) -> Path:
    """EXP-001 trained 4 steps, its run's figures then made NaN and inf as a diverged run's are."""
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update runs set latest_metrics = ?, final_metrics = ?", (OLD_CELL, OLD_CELL))
    path = home / "runs" / "EXP-001.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[-1].update(loss=math.nan, eval_loss=math.inf)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return home


def test_an_old_nan_cell_is_read_shown_and_kept(diverged: Path) -> None:
    shown = cli(diverged, "show", "EXP-001")
    assert shown.exit_code == 0 and shown.stderr == "", shown.stderr
    assert "nan" in shown.stdout
    run = json_out(cli(diverged, "show", "EXP-001", "--json"))["runs"][-1]
    assert run["final_metrics"]["loss"] is None and run["final_metrics"]["eval_loss"] is None  # JSON: null
    assert cli(diverged, "doctor").exit_code == 0
    assert cli(diverged, "doctor", "--repair").exit_code == 0
    with sqlite3.connect(diverged / "registry.db") as conn:
        assert conn.execute("select final_metrics from runs").fetchone()[0] is not None
    assert cli(diverged, "show", "EXP-001", "--plot").exit_code == 0
    report = cli(diverged, "report", "EXP-001")
    assert report.exit_code == 0 and "nan" in report.stdout


def test_cells_octlm_writes_are_valid_json_and_read_back(tmp_path: Path) -> None:
    with Registry(tmp_path / "registry.db") as registry:
        registry.conn.execute("insert into experiments (id, uuid) values ('EXP-001', 'u')")
        run = registry.start_run(experiment_id="EXP-001", kind="train")
        registry.update_run(run, final_metrics={"loss": math.nan, "eval_loss": -math.inf, "lr": 1e-3})
        assert registry.malformed_cells() == []
        (cell,) = registry.conn.execute("select final_metrics from runs").fetchone()
        assert tuple(registry.conn.execute("select json_valid(?)", (cell,)).fetchone()) == (1,)
        metrics = registry.runs("EXP-001")[-1]["final_metrics"]
    assert math.isnan(metrics["loss"]) and metrics["eval_loss"] == -math.inf and metrics["lr"] == 1e-3


def test_an_export_of_a_diverged_run_imports_with_its_figures(diverged: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    assert cli(diverged, "registry", "export", "-o", str(out)).exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    result = cli(other, "registry", "import", str(out))
    assert result.exit_code == 0, result.stderr
    run = json_out(cli(other, "show", "EXP-001", "--json"))["runs"][-1]
    assert run["final_metrics"]["loss"] is None and run["final_metrics"]["eval_loss"] is None  # JSON: null
    assert cli(other, "doctor").exit_code == 0
