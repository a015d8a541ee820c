"""Issue 25 item 14: after ``rm registry.db && octlm doctor --repair`` an experiment keeps its UUID, so the home
accepts its own packs and exports as the same experiment. The identity is kept in the experiment's YAML, as a
comment octlm writes (``# octlm identity: ID UUID``: no config key, the fingerprint unchanged); a home without it
keeps working and gets it at the next registration; a YAML copied under another ID never takes the original's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import cli, json_out

from octlm.core.home import Home
from octlm.store import experiments


def uuid_of(home: Path, experiment_id: str = "EXP-001") -> str:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute("select uuid from experiments where id = ?", (experiment_id,)).fetchone()[0]


def forget_registry(home: Path) -> None:
    for path in home.glob("registry.db*"):
        path.unlink()


def test_repair_after_losing_the_registry_keeps_every_uuid(home: Path, tmp_path: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    before, fingerprint = uuid_of(home), json_out(cli(home, "show", "EXP-001", "--json"))["fingerprints"]["config"]
    assert f"# octlm identity: EXP-001 {before}" in (home / "experiments" / "EXP-001.yaml").read_text()
    assert cli(home, "pack", "EXP-001", "-o", str(tmp_path / "p.tar")).exit_code == 0
    assert cli(home, "registry", "export", "-o", str(tmp_path / "e.jsonl")).exit_code == 0
    forget_registry(home)
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert uuid_of(home) == before
    assert json_out(cli(home, "show", "EXP-001", "--json"))["fingerprints"]["config"] == fingerprint
    unpacked = cli(home, "unpack", str(tmp_path / "p.tar"))
    assert unpacked.exit_code == 0 and "another" not in unpacked.stderr, unpacked.stderr
    imported = cli(home, "registry", "import", str(tmp_path / "e.jsonl"))
    assert imported.exit_code == 0, imported.stderr


def test_a_home_without_the_comment_keeps_its_uuid_and_gets_it(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    path, before = home / "experiments" / "EXP-001.yaml", uuid_of(home)
    old = "".join(
        line for line in path.read_text().splitlines(keepends=True) if not line.startswith("# octlm identity")
    )
    path.write_text(old)  # as an older octlm left it
    assert experiments.identity(Home(home), "EXP-001") is None
    assert cli(home, "show", "EXP-001").exit_code == 0
    assert cli(home, "resume", "EXP-001", "--until", "8", "-q").exit_code == 0
    assert uuid_of(home) == before and experiments.identity(Home(home), "EXP-001") == before


def test_a_yaml_copied_under_another_id_gets_its_own_uuid(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    text = (home / "experiments" / "EXP-001.yaml").read_text()
    (home / "experiments" / "EXP-002.yaml").write_text(text.replace("id: EXP-001", "id: EXP-002"))
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert uuid_of(home, "EXP-002") != uuid_of(home)
    assert experiments.identity(Home(home), "EXP-002") == uuid_of(home, "EXP-002")
