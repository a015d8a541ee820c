"""``octlm pack`` / ``unpack`` between real homes with real training: a run packed on one home resumes on another
bit for bit; a damaged or unsafe pack is refused before anything is registered or written outside the home."""

from __future__ import annotations

import io
import json
import shutil
import socket
import sqlite3
import tarfile
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, json_out, write_corpus, write_experiment

from octlm.store.runs import runfile
from octlm.train import checkpoint

SHORT = {"training": {"steps": 8}, "checkpoint": {"interval": 4, "keep": 3}}
STEP = "octlm-pack/checkpoints/step-000004.pt"
ROOT_MANIFEST = "octlm-pack/manifest.json"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "exchange-v1"  # made by main at d1ee02a (see its make.py)
ORIGIN = "/tmp/octlm-fixture/box-a"  # where make.py made the fixture's home, on the box it named box-a


def make_home(root: Path, **sections: dict) -> Path:
    """A home with the tests' corpus and a tiny EXP-001 of 8 steps (``sections`` change its config)."""
    write_corpus(root)
    write_experiment(root, **{**SHORT, **sections})
    return root


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Home A trained EXP-001 to step 4 of 8 and was "preempted"; its pack."""
    home = make_home(tmp_path_factory.mktemp("a") / "home")
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    pack = home.parent / "EXP-001.tar"
    result = cli(home, "pack", "EXP-001", "-o", str(pack), "--json")
    assert result.exit_code == 0, result.stderr
    report = json_out(result)
    assert report["experiment"] == "EXP-001" and report["steps"] == [4] and report["bytes"] == pack.stat().st_size
    return home, pack


def home_at(root: Path) -> Path:
    """The fixture's home as main left it (registry, YAML, run files, checkpoints), copied to ``root``."""
    kept = FIXTURE / "home"
    shutil.copytree(kept / "experiments", root / "experiments")
    shutil.copytree(kept / "run-files", root / "runs")
    shutil.copytree(kept / "checkpoint-files", root / "checkpoints")
    shutil.copy(kept / "registry.sqlite", root / "registry.db")
    return root.resolve()


def members(pack: Path) -> dict[str, bytes]:
    with tarfile.open(pack) as tar:
        return {info.name: (tar.extractfile(info) or io.BytesIO()).read() for info in tar.getmembers()}


def registered(home: Path) -> list[str]:
    if not (home / "registry.db").exists():
        return []
    with sqlite3.connect(home / "registry.db") as conn:
        return [row[0] for row in conn.execute("select id from experiments")]


def refused(home: Path, pack: Path, code: int, *args: str) -> str:
    """Unpack ``pack`` expecting exit ``code``: one line, no traceback, nothing registered, no staging left."""
    before = registered(home)
    result = cli(home, "unpack", str(pack), *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert registered(home) == before and not list(home.glob(".unpack-*"))
    return result.stderr


@pytest.mark.slow
def test_a_packed_run_resumes_on_another_home_bit_for_bit(packed: tuple[Path, Path], tmp_path: Path) -> None:
    home_a, pack = packed
    home_b, home_c = make_home(tmp_path / "b"), make_home(tmp_path / "c")
    (home_b / "experiments" / "EXP-001.yaml").unlink()  # box B has only the corpus
    result = cli(home_b, "unpack", str(pack), "--json")
    assert result.exit_code == 0, result.stderr
    report = json_out(result)
    assert (report["experiment"], report["changed"], report["checkpoints"]) == ("EXP-001", True, [4])
    assert report["rows"]["experiments"] == 1 and report["rows"]["checkpoints"] == 1
    assert cli(home_b, "resume", "EXP-001", "-q").exit_code == 0
    assert cli(home_c, "train", "EXP-001", "-q").exit_code == 0  # the uninterrupted run
    final = "checkpoints/EXP-001/step-000008.pt"
    assert_same_training_state(checkpoint.read(home_b / final), checkpoint.read(home_c / final))
    records = [runfile.without_timings(runfile.read(h / "runs" / "EXP-001.jsonl")) for h in (home_b, home_c)]
    assert records[0] == records[1] and records[0][-1]["step"] == 8
    assert [list(r) for r in records[0]] == [list(r) for r in records[1]]  # the records' own key order, too
    assert cli(home_b, "doctor").exit_code == 0
    with sqlite3.connect(home_a / "registry.db") as a, sqlite3.connect(home_b / "registry.db") as b:
        uuid_sql = "select uuid from experiments where id = 'EXP-001'"
        assert a.execute(uuid_sql).fetchone() == b.execute(uuid_sql).fetchone()  # the same experiment
        assert b.execute("select count(*) from runs").fetchone()[0] == 2  # A's train, B's resume


def test_packing_the_same_state_twice_gives_the_same_bytes(packed: tuple[Path, Path]) -> None:
    home, pack = packed
    again = pack.with_name("again.tar")
    result = cli(home, "pack", "EXP-001", "-o", str(again))
    assert result.exit_code == 0 and "step" in result.stdout
    assert again.read_bytes() == pack.read_bytes()
    with tarfile.open(pack) as tar:
        names = tar.getnames()
        assert names == sorted(names) and {(m.mtime, m.uid, m.gid, m.uname, m.mode) for m in tar} == {
            (0, 0, 0, "", 0o644)
        }


def test_unpacking_twice_changes_nothing(packed: tuple[Path, Path], tmp_path: Path) -> None:
    home = tmp_path / "d"
    assert cli(home, "unpack", str(packed[1])).exit_code == 0
    before = sorted(str(p.relative_to(home)) for p in home.rglob("*") if "locks" not in p.parts)
    dump = "\n".join(sqlite3.connect(home / "registry.db").iterdump())
    result = cli(home, "unpack", str(packed[1]))
    assert result.exit_code == 0 and "nothing changed" in result.stdout
    again = json_out(cli(home, "unpack", str(packed[1]), "--json"))
    assert again["changed"] is False and again["rows"] == {}
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*") if "locks" not in p.parts) == before
    assert "\n".join(sqlite3.connect(home / "registry.db").iterdump()) == dump


@pytest.mark.slow
def test_a_taken_id_is_refused_unless_unpacked_under_another(packed: tuple[Path, Path], tmp_path: Path) -> None:
    home = make_home(tmp_path / "e", training={"steps": 8, "learning_rate": 1e-3})
    assert cli(home, "doctor", "--repair").exit_code == 0  # registers this home's own EXP-001 (another UUID)
    message = refused(home, packed[1], 3)
    assert "EXP-001" in message and "--as" in message
    result = cli(home, "unpack", str(packed[1]), "--as", "A-EXP-001", "--json")
    assert result.exit_code == 0, result.stderr
    assert (json_out(result)["experiment"], json_out(result)["from"]) == ("A-EXP-001", "EXP-001")
    assert (home / "experiments" / "A-EXP-001.yaml").is_file()
    resumed = cli(home, "resume", "A-EXP-001", "--json", "-q")  # its step-4 checkpoint names EXP-001
    assert resumed.exit_code == 0, resumed.stderr
    assert json_out(resumed)["end_step"] == 8
    assert cli(home, "doctor").exit_code == 0  # the unpacked checkpoint is not foreign


def _rewrite(pack: Path, out: Path, change) -> Path:
    """A copy of ``pack`` whose members go through ``change(info, data) -> [(info, data)]``."""
    with tarfile.open(pack) as source, tarfile.open(out, "w") as target:
        for info in source.getmembers():
            data = source.extractfile(info).read()
            for new, payload in change(info, data):
                target.addfile(new, io.BytesIO(payload) if payload is not None else None)
    return out


def test_a_flipped_byte_in_a_packed_checkpoint_registers_nothing(packed: tuple[Path, Path], tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.tar"
    shutil.copy(packed[1], damaged)
    with tarfile.open(damaged) as tar:
        info = tar.getmember(STEP)
    data = bytearray(damaged.read_bytes())
    data[info.offset_data + info.size // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    home = tmp_path / "f"
    assert "checksum" in refused(home, damaged, 3)
    assert registered(home) == [] and not (home / "checkpoints").exists() and not (home / "experiments").exists()


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink", "hardlink", "device"])
def test_unsafe_members_are_refused(packed: tuple[Path, Path], tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside.txt"

    def change(info: tarfile.TarInfo, data: bytes):
        yield info, data
        if info.name == STEP:
            evil = tarfile.TarInfo({"parent": "octlm-pack/../../outside.txt", "absolute": str(outside)}.get(kind, "x"))
            if kind in ("symlink", "hardlink", "device"):
                evil.name, evil.linkname = "octlm-pack/checkpoints/step-000009.pt", str(outside)
                evil.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}.get(kind, tarfile.CHRTYPE)
                yield evil, None
            else:
                evil.size = 4
                yield evil, b"evil"

    evil = _rewrite(packed[1], tmp_path / "evil.tar", change)
    home = tmp_path / "g"
    message = refused(home, evil, 3)
    assert "nothing was written" in message
    assert not outside.exists() and registered(home) == []


def test_bad_files_get_one_line(packed: tuple[Path, Path], tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert "no such file" in refused(home, tmp_path / "missing.tar", 2)
    (tmp_path / "text.tar").write_text("not a tar at all\n" * 100)
    assert "not an octlm pack" in refused(home, tmp_path / "text.tar", 2)
    data = packed[1].read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2])
    refused(home, tmp_path / "cut.tar", 2)

    def newer(info: tarfile.TarInfo, data: bytes):
        if info.name.endswith("manifest.json"):
            data = json.dumps({**json.loads(data), "version": 99}).encode()
            info.size = len(data)
        yield info, data

    assert "newer" in refused(home, _rewrite(packed[1], tmp_path / "newer.tar", newer), 3)
    result = cli(home, "pack", "EXP-404", "-o", str(tmp_path / "x.tar"))
    assert result.exit_code in (2, 3) and "Traceback" not in result.stderr


def test_a_pack_made_by_main_unpacks_with_every_row(tmp_path: Path) -> None:
    home, pack = tmp_path / "home", FIXTURE / "EXP-001.tar"
    result = cli(home, "unpack", str(pack), "--json")
    assert result.exit_code == 0, result.stderr
    report = json_out(result)
    assert (report["experiment"], report["from"], report["changed"], report["checkpoints"]) == (
        "EXP-001",
        "EXP-001",
        True,
        [8],
    )
    assert report["rows"] == {
        "experiments": 1,
        "runs": 2,
        "checkpoints": 1,
        "verifications": 1,
        "notes": 1,
        "metrics": 3,
    }
    packed = [json.loads(line) for line in members(pack)["octlm-pack/registry.jsonl"].decode().splitlines()]
    exported = [json.loads(line) for line in cli(home, "registry", "export").stdout.splitlines()]
    where = ("remote_host", "remote_path")  # packed: box A's file; here: this home's
    assert [{k: v for k, v in r.items() if k not in where} for r in exported] == [
        {k: v for k, v in r.items() if k not in where} for r in packed
    ]
    assert (home / "checkpoints" / "EXP-001" / "step-000008.pt").read_bytes() == members(pack)[
        "octlm-pack/checkpoints/step-000008.pt"
    ]
    assert json_out(cli(home, "unpack", str(pack), "--json"))["changed"] is False


def test_packing_main_s_home_writes_main_s_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = home_at(tmp_path / "home")
    monkeypatch.setattr(socket, "gethostname", lambda: "box-a")
    assert cli(home, "pack", "EXP-001", "-o", str(tmp_path / "EXP-001.tar")).exit_code == 0
    now, then = members(tmp_path / "EXP-001.tar"), members(FIXTURE / "EXP-001.tar")
    records = "octlm-pack/registry.jsonl"  # names the home it was packed in: main's, and this one
    assert now[records] == then[records].replace(ORIGIN.encode(), str(home).encode())
    manifest = [json.loads(m[ROOT_MANIFEST]) for m in (now, then)]
    for entry in manifest:
        del entry["files"]["registry.jsonl"]
    assert manifest[0] == manifest[1]
    assert {k: v for k, v in now.items() if k not in (records, ROOT_MANIFEST)} == {
        k: v for k, v in then.items() if k not in (records, ROOT_MANIFEST)
    }


def test_a_pack_carries_the_evaluations_block_by_block(packed: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 36: a moved run keeps its per-block evaluations (``blocks.jsonl`` in the pack), so the home it moves to
    can still pair it; a home that has the file already keeps its own; the same pack twice changes nothing."""
    home_a, pack = packed
    kept = home_a / "runs" / "EXP-001-blocks.jsonl"
    assert members(pack)["octlm-pack/blocks.jsonl"] == kept.read_bytes() and kept.stat().st_size > 0
    home_b = write_corpus(tmp_path / "b")
    assert cli(home_b, "unpack", str(pack)).exit_code == 0
    assert (home_b / "runs" / "EXP-001-blocks.jsonl").read_bytes() == kept.read_bytes()
    assert json_out(cli(home_b, "unpack", str(pack), "--json"))["changed"] is False


def test_a_run_still_training_in_its_home_is_brought_up_to_date_by_a_later_pack(tmp_path: Path) -> None:
    """Issue 49: a trial on a Ray node ships a pack at each checkpoint while its run is still ``running`` there; the
    driver records that run as ``unknown (host ...)`` (another home's process, never checked here) and a later pack
    of the same run, further or ended, brings the row up to date, where it used to stay as first seen. A run here
    that no import found running is never rewritten, and the same pack twice changes nothing."""
    home_a = make_home(tmp_path / "a")
    assert cli(home_a, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    with sqlite3.connect(home_a / "registry.db") as conn:  # as a pack made between two steps sees it
        conn.execute("update runs set status = 'running', ended = null")
    first, later = tmp_path / "first.tar", tmp_path / "later.tar"
    assert cli(home_a, "pack", "EXP-001", "-o", str(first)).exit_code == 0
    assert cli(home_a, "resume", "EXP-001", "-q").exit_code == 0  # a second run: 4 -> 8
    with sqlite3.connect(home_a / "registry.db") as conn:
        conn.execute("update runs set status = 'completed', end_step = 6 where start_step = 0")  # it went on
        ours = conn.execute("select uuid, status, end_step from runs order by id").fetchall()
    assert cli(home_a, "pack", "EXP-001", "-o", str(later)).exit_code == 0
    home_b = tmp_path / "b"
    assert cli(home_b, "unpack", str(first)).exit_code == 0
    sql = "select uuid, status, end_step from runs order by id"
    with sqlite3.connect(home_b / "registry.db") as conn:
        assert conn.execute(sql).fetchall() == [(ours[0][0], f"unknown (host {socket.gethostname()})", 4)]
    again = json_out(cli(home_b, "unpack", str(first), "--json"))
    assert again["changed"] is False and again["rows"] == {}  # not further: nothing to bring up to date
    assert cli(home_b, "unpack", str(later)).exit_code == 0
    with sqlite3.connect(home_b / "registry.db") as conn:
        assert conn.execute(sql).fetchall() == ours  # the first run brought up to date, the second one added
        conn.execute("update runs set status = 'completed by hand' where start_step = 4")
    assert json_out(cli(home_b, "unpack", str(later), "--json"))["changed"] is False  # never found running here
