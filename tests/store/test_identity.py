"""Issue 25 item 14: after ``rm registry.db && octlm doctor --repair`` an experiment keeps its UUID, so the home
accepts its own packs and exports as the same experiment. The identity is kept in ``.octlm/identities/<ID>`` (issue 33
item 4: never in the YAML, so a clone's tracked files stay untouched); an older octlm's YAML comment
(``# octlm identity: ID UUID``) still counts; a YAML copied under another ID never takes the original's."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from conftest import cli, json_out

from octlm.core.home import Home
from octlm.store import kept


def uuid_of(home: Path, experiment_id: str = "EXP-001") -> str:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute("select uuid from experiments where id = ?", (experiment_id,)).fetchone()[0]


def forget_registry(home: Path) -> None:
    for path in home.glob("registry.db*"):
        path.unlink()


def test_repair_after_losing_the_registry_keeps_every_uuid(home: Path, tmp_path: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    before, fingerprint = uuid_of(home), json_out(cli(home, "show", "EXP-001", "--json"))["fingerprints"]["config"]
    assert (home / ".octlm" / "identities" / "EXP-001").read_text() == f"EXP-001 {before}\n"
    assert "octlm identity" not in (home / "experiments" / "EXP-001.yaml").read_text()
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


def test_an_older_octlm_s_yaml_comment_still_counts_and_is_never_written(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    path, before = home / "experiments" / "EXP-001.yaml", uuid_of(home)
    (home / ".octlm" / "identities" / "EXP-001").unlink()
    forget_registry(home)
    path.write_text(path.read_text() + f"# octlm identity: EXP-001 {before}\n")  # as an older octlm left it
    text = path.read_bytes()
    assert kept.identity(Home(home), "EXP-001") == before
    assert cli(home, "doctor", "--repair").exit_code == 0 and uuid_of(home) == before
    assert cli(home, "resume", "EXP-001", "--until", "8", "-q").exit_code == 0
    assert path.read_bytes() == text and (home / ".octlm" / "identities" / "EXP-001").is_file()


def test_a_clone_stays_clean_and_rm_forgets_the_identity(home: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(home)], check=True)
    (home / ".gitignore").write_text("registry.db*\ncheckpoints/\nruns/\ncache/\nlocks/\n")
    subprocess.run(["git", "-C", str(home), "add", "-A"], check=True)
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "-C", str(home), *identity, "commit", "-qm", "a clone"], check=True)
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    status = subprocess.run(["git", "-C", str(home), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "", status.stdout  # nothing tracked changed, nothing new to track
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 0
    assert not (home / ".octlm" / "identities" / "EXP-001").exists()


def test_a_yaml_copied_under_another_id_gets_its_own_uuid(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    text = (home / "experiments" / "EXP-001.yaml").read_text()
    (home / "experiments" / "EXP-002.yaml").write_text(text.replace("id: EXP-001", "id: EXP-002"))
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert uuid_of(home, "EXP-002") != uuid_of(home)
    assert kept.identity(Home(home), "EXP-002") == uuid_of(home, "EXP-002")


def test_a_damaged_or_linked_id_mark_file_never_stops_new_nor_lowers_a_mark(home: Path, tmp_path: Path) -> None:
    """Issue 45 item 5: ``.octlm/ids.json`` holding what no ID can be (a number of 13 digits, a malformed prefix, a
    count as text) is read as none, and one reached through a linked ``.octlm/`` (another home's) is neither read
    nor written: ``new`` gives the next ID after the registry's mark and the file is mended in place."""
    for expected in ("EXP-002", "EXP-003"):
        assert cli(home, "new").stdout.strip() == expected
    assert cli(home, "rm", "EXP-003", "--yes").exit_code == 0
    marks = home / ".octlm" / "ids.json"
    hostile = {"EXP-": 10**12, "../x-": 5, "BOX-": "7", "B-": True}
    marks.write_text(json.dumps({"format": "octlm-id-marks", "version": 1, "highest": hostile}))
    assert cli(home, "new").stdout.strip() == "EXP-004"
    assert json.loads(marks.read_text())["highest"] == {"EXP-": 4}
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".octlm").mkdir(parents=True)
    (elsewhere / ".octlm" / "ids.json").write_text(json.dumps({"format": "octlm-id-marks", "highest": {"EXP-": 500}}))
    shutil.move(home / ".octlm", tmp_path / "own")
    (home / ".octlm").symlink_to(elsewhere / ".octlm")
    assert cli(home, "new").stdout.strip() == "EXP-005"  # from the registry's mark, not the other home's 500
    assert json.loads((elsewhere / ".octlm" / "ids.json").read_text())["highest"] == {"EXP-": 500}  # never written


def test_two_identities_kept_with_one_uuid_are_parted_by_doctor(home: Path) -> None:
    """Issue 45 item 15: identity files copied by hand (EXP-002's and EXP-003's hold EXP-001's UUID). Before, every
    `doctor --repair` of the home failed on the registry's unique UUIDs once the registry was gone. Now `doctor`
    says so, the first keeps the UUID, --repair gives each other one its own, and a second repair finds nothing."""
    from conftest import write_experiment

    for experiment_id in ("EXP-002", "EXP-003"):
        write_experiment(home, experiment_id)
    assert cli(home, "doctor", "--repair").exit_code == 0
    identities = home / ".octlm" / "identities"
    first = uuid_of(home, "EXP-001")
    for experiment_id in ("EXP-002", "EXP-003"):
        (identities / experiment_id).write_text(f"{experiment_id} {first}\n")
    forget_registry(home)
    checked = json_out(cli(home, "doctor", "--json"))
    shared = [(p["where"], p["detail"]) for p in checked["problems"] if p["kind"] == "shared identity"]
    assert shared == [
        (f".octlm/identities/{e}", f"EXP-001's UUID too; EXP-001 keeps it, --repair gives {e} its own")
        for e in ("EXP-002", "EXP-003")
    ]
    repaired = cli(home, "doctor", "--repair", "--json")
    assert repaired.exit_code == 0, repaired.stderr
    uuids = {e: uuid_of(home, e) for e in ("EXP-001", "EXP-002", "EXP-003")}
    assert uuids["EXP-001"] == first and len(set(uuids.values())) == 3
    assert all(kept.identity(Home(home), e) == uuids[e] for e in uuids)
    assert json_out(cli(home, "doctor", "--repair", "--json"))["problems"] == []


def test_an_identity_copied_over_a_registered_one_gives_it_back_its_rows_uuid(home: Path) -> None:
    """The variant with the registry still there: EXP-001's identity file overwritten with EXP-002's UUID. The row
    holding the UUID decides who keeps it (EXP-002), and EXP-001 gets back the UUID its row holds, not a new one."""
    from conftest import write_experiment

    write_experiment(home, "EXP-002")
    assert cli(home, "doctor", "--repair").exit_code == 0
    own, other = uuid_of(home, "EXP-001"), uuid_of(home, "EXP-002")
    (home / ".octlm" / "identities" / "EXP-001").write_text(f"EXP-001 {other}\n")
    repaired = json_out(cli(home, "doctor", "--repair", "--json"))
    (shared,) = [p for p in repaired["problems"] if p["kind"] == "shared identity"]
    assert shared["where"] == ".octlm/identities/EXP-001" and shared["detail"].startswith("EXP-002's UUID too")
    assert kept.identity(Home(home), "EXP-001") == own and uuid_of(home, "EXP-001") == own
    forget_registry(home)
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert (uuid_of(home, "EXP-001"), uuid_of(home, "EXP-002")) == (own, other)
