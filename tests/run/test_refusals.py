"""What a run refuses to protect existing state: an edited finished config, a foreign or overfit checkpoint, a restart
with a typo.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from conftest import cli, write_experiment


@pytest.mark.slow
def test_an_edited_finished_config_is_refused_with_the_diff(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    config = home / "experiments" / "EXP-001.yaml"
    data = yaml.safe_load(config.read_text())
    data["training"]["learning_rate"] = 4e-3
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    for command in (["resume", "EXP-001"], ["sample", "EXP-001", "--max-new-tokens", "4"]):
        result = cli(home, *command)
        assert result.exit_code == 3, result.stderr
        assert "training.learning_rate: 0.003 -> 0.004" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_foreign_or_overfit_final_checkpoint_is_refused(home: Path) -> None:
    write_experiment(home, "EXP-002")  # the very same config: only the checkpoint's owner differs
    assert cli(home, "train", "EXP-002", "-q").exit_code == 0
    assert cli(home, "overfit", "EXP-001", "-q").exit_code in (0, 1)
    folder = home / "checkpoints" / "EXP-001"
    for source, reason in ((home / "checkpoints" / "EXP-002", "belongs to EXP-002"), (folder / "overfit", "overfit")):
        for name in ("step-000012.pt", "step-000012.sha256"):
            shutil.copy2(source / name, folder / name)
        for command in (["resume", "EXP-001"], ["resume", "EXP-001", "--step", "12"], ["sample", "EXP-001"]):
            result = cli(home, *command)
            assert result.exit_code == 3, (command, result.stderr)
            assert reason in result.stderr and len(result.stderr.strip().splitlines()) == 1


def snapshot(home: Path) -> dict[str, str]:
    """Every file octlm keeps for EXP-001 (checkpoints, tokenizer, run files) and its registry rows."""
    files = [*(home / "checkpoints" / "EXP-001").rglob("*"), *(home / "runs").glob("EXP-001*")]
    state = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}
    with sqlite3.connect(home / "registry.db") as conn:
        for table in ("checkpoints", "runs"):
            state[table] = repr(conn.execute(f"select * from {table} order by id").fetchall())
    return state


@pytest.mark.slow
def test_restart_or_overfit_with_a_typo_in_the_sources_keeps_everything(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    assert cli(home, "overfit", "EXP-001", "--steps", "4", "-q").exit_code in (0, 1)
    config = home / "experiments" / "EXP-001.yaml"
    config.write_text(config.read_text().replace("corpus/*.txt", "corpsu/*.txt"))
    before = snapshot(home)
    assert any(name.endswith("tokenizer.json") for name in before) and any("/overfit/" in n for n in before)
    for command in (["train", "EXP-001", "--restart"], ["overfit", "EXP-001", "--steps", "4"]):
        result = cli(home, *command)
        assert result.exit_code == 2 and "corpsu" in result.stderr, result.stderr
        assert snapshot(home) == before
