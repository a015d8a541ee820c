"""octlm doctor: checksum disagreements and foreign checkpoints."""

from __future__ import annotations

import json
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


def id_marks(home: Path) -> dict[str, int]:
    with sqlite3.connect(home / "registry.db") as conn:
        return dict(conn.execute("select prefix, highest from id_marks").fetchall())


def test_a_removed_id_is_not_given_again_after_the_registry_is_lost_and_rebuilt(tmp_path: Path) -> None:
    """Issue 45 item 5: the highest number given is kept in the registry and in ``.octlm/ids.json``; losing either
    (``rm registry.db`` then ``doctor --repair``; a lost or damaged ``ids.json``) gives no removed ID again, and
    the repair (or the next ``new``) writes the mark back to the one that lost it."""
    home = tmp_path / "home"
    assert [cli(home, "new", "--id-prefix", p).stdout.strip() for p in ("EXP-", "EXP-", "EXP-", "BOX-")] == [
        "EXP-001",
        "EXP-002",
        "EXP-003",
        "BOX-001",
    ]
    for experiment_id in ("EXP-003", "EXP-002", "BOX-001"):
        assert cli(home, "rm", experiment_id, "--yes").exit_code == 0
    for path in home.glob("registry.db*"):
        path.unlink()
    checked = json_out(cli(home, "doctor", "--json"))
    assert not (home / "registry.db").exists() and checked["advice"] != "healthy"  # checking writes nothing
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert id_marks(home) == {"EXP-": 3, "BOX-": 1}  # the rebuilt registry learned them from .octlm/
    assert cli(home, "new").stdout.strip() == "EXP-004"
    assert cli(home, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-002"
    assert cli(home, "rm", "EXP-004", "--yes").exit_code == 0
    (home / ".octlm" / "ids.json").unlink()  # now the other half is lost: the registry still knows
    assert cli(home, "new").stdout.strip() == "EXP-005"
    kept = json.loads((home / ".octlm" / "ids.json").read_text())
    assert kept["highest"] == {"BOX-": 2, "EXP-": 5}  # written back whole by that new
    assert cli(home, "rm", "EXP-005", "--yes").exit_code == 0
    (home / ".octlm" / "ids.json").write_text("{not json")  # damaged: read as none, mended by the repair
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert json.loads((home / ".octlm" / "ids.json").read_text())["highest"] == {"BOX-": 2, "EXP-": 5}
    for path in home.glob("registry.db*"):
        path.unlink()
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert cli(home, "new").stdout.strip() == "EXP-006"
