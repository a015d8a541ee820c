"""octlm doctor: checksum disagreements and foreign checkpoints."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, json_out, write_experiment

from octlm.core import layout


@pytest.mark.slow
def test_doctor_reports_checksum_disagreement_and_foreign_checkpoints(home: Path) -> None:
    from octlm.train import checkpoint

    write_experiment(home, "EXP-002")
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    four, eight = layout.checkpoint_path(folder, 4), layout.checkpoint_path(folder, 8)
    real = layout.read_sidecar(eight)
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update checkpoints set sha256 = ? where step = 4", ("0" * 64,))  # a stale row
    layout.sidecar(eight).write_text(f"{'f' * 64}  {eight.name}\n")  # a stale checksum file
    (home / "checkpoints" / "EXP-002").mkdir()
    for path in (four, layout.sidecar(four)):  # copied from another experiment
        shutil.copy(path, home / "checkpoints" / "EXP-002" / path.name)
    record = checkpoint.read(four)
    record.kind = "overfit"  # an overfit checkpoint dropped into the main folder
    checkpoint.save(layout.checkpoint_path(folder, 12), record)
    checked = json_out(cli(home, "doctor", "--json"))
    found = {(p["kind"], p["where"]): p["detail"] for p in checked["problems"]}
    assert "the registry row is stale" in found[("checksum disagreement", "checkpoints/EXP-001/step-000004.pt")]
    assert "step-000008.sha256 is stale" in found[("checksum disagreement", "checkpoints/EXP-001/step-000008.pt")]
    assert "records experiment EXP-001" in found[("foreign checkpoint", "checkpoints/EXP-002/step-000004.pt")]
    assert "kind overfit" in found[("foreign checkpoint", "checkpoints/EXP-001/step-000012.pt")]
    repaired = json_out(cli(home, "doctor", "--repair", "--json"))
    assert {p["kind"] for p in repaired["problems"] if not p["repaired"]} == {"foreign checkpoint"}
    assert layout.read_sidecar(eight) == real
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select sha256 from checkpoints where step = 4").fetchone()[0] == (
            layout.read_sidecar(four)
        )
        assert conn.execute("select count(*) from checkpoints where experiment_id = 'EXP-002'").fetchone()[0] == 0
        assert conn.execute("select count(*) from runs where experiment_id = 'EXP-002'").fetchone()[0] == 0
