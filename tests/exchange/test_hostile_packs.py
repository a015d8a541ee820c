"""Issue 25, the packs and imports side: a copied home changed and retrained never merges into the original (the
config fingerprint is compared, not the UUID alone); sparse members and members whose size differs from the
manifest's are refused before anything is copied; imported ``running`` runs are never live here; the manifest's
``octlm`` version is checked. Sparse tars are made by GNU tar's ``--sparse``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import cli, json_out, write_corpus, write_experiment

SHORT = {"training": {"steps": 8}, "checkpoint": {"interval": 4, "keep": 3}}
STEP = "octlm-pack/checkpoints/step-000004.pt"
MANIFEST = "octlm-pack/manifest.json"
RECORDS = "octlm-pack/registry.jsonl"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Home A trained EXP-001 to step 4 of 8; its pack."""
    home = tmp_path_factory.mktemp("a") / "home"
    write_corpus(home)
    write_experiment(home, **SHORT)
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    pack = home.parent / "EXP-001.tar"
    assert cli(home, "pack", "EXP-001", "-o", str(pack)).exit_code == 0
    return home, pack


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, (result.stdout, result.stderr)
    return lines[0]


def table(home: Path, sql: str) -> list[tuple]:
    if not (home / "registry.db").exists():
        return []
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql).fetchall()


def snapshot(home: Path) -> dict[str, object]:
    """Every file but the registry's, and the registry's rows."""
    files = {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}
    with sqlite3.connect(home / "registry.db") as conn:
        rows = list(conn.iterdump())
    return {**{k: v for k, v in files.items() if not k.startswith("registry.db")}, "rows": rows}


def rewrite(pack: Path, out: Path, change) -> Path:
    """A copy of ``pack`` whose members go through ``change(name, data) -> data``."""
    with tarfile.open(pack) as source, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as target:
        for info in source.getmembers():
            data = change(info.name, source.extractfile(info).read())
            info.size = len(data)
            target.addfile(info, io.BytesIO(data))
    return out


def with_manifest(pack: Path, out: Path, **fields) -> Path:
    def change(name: str, data: bytes) -> bytes:
        return json.dumps({**json.loads(data), **fields}).encode() if name == MANIFEST else data

    return rewrite(pack, out, change)


# ---------------------------------------------------------------- item 5: a known UUID with another config


def copied_and_retrained(home: Path, tmp_path: Path) -> Path:
    """A copy of ``home`` whose EXP-001 got another learning rate and was trained again from step 0."""
    copy = tmp_path / "copy"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("locks"))
    path = copy / "experiments" / "EXP-001.yaml"
    path.write_text(path.read_text().replace("learning_rate: 0.003", "learning_rate: 0.001"))
    result = cli(copy, "train", "EXP-001", "--restart", "--until", "4", "-q")
    assert result.exit_code == 0, result.stderr
    return copy


def fingerprint(home: Path) -> str:
    return table(home, "select config_hash from experiments where id = 'EXP-001'")[0][0]


@pytest.mark.slow
def test_a_copied_home_changed_and_retrained_never_merges_into_the_original(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    original = tmp_path / "original"
    shutil.copytree(trained[0], original, ignore=shutil.ignore_patterns("locks"))
    copy = copied_and_retrained(original, tmp_path)
    mine, theirs = fingerprint(original), fingerprint(copy)
    assert mine != theirs
    before = snapshot(original)
    assert cli(copy, "pack", "EXP-001", "-o", str(tmp_path / "copy.tar")).exit_code == 0
    assert cli(copy, "registry", "export", "-o", str(tmp_path / "copy.jsonl")).exit_code == 0
    for command in (["unpack", str(tmp_path / "copy.tar")], ["registry", "import", str(tmp_path / "copy.jsonl")]):
        result = cli(original, *command)
        assert result.exit_code == 3, (command, result.stdout, result.stderr)
        line = one_line(result)
        assert mine[:12] in line and theirs[:12] in line and "EXP-001" in line
        assert snapshot(original) == before and not list(original.glob(".unpack-*"))
    assert cli(original, "resume", "EXP-001", "-q").exit_code == 0  # the original goes on as before


# ---------------------------------------------------------------- item 6: sparse members, sizes


def sparse_pack(pack: Path, tmp_path: Path, size: int) -> Path:
    """``pack`` with its checkpoint replaced by a sparse file of ``size`` bytes (a few real ones), re-tarred by GNU
    tar --sparse: the member holds a few KB, its map declares ``size``."""
    tree = tmp_path / "tree"
    with tarfile.open(pack) as tar:
        tar.extractall(tree, filter="data")
        names = tar.getnames()
    checkpoint = tree / STEP
    with open(checkpoint, "r+b") as handle:
        handle.truncate(size)
        handle.seek(size - 6)
        handle.write(b"spare!")
    out = tmp_path / "sparse.tar"
    subprocess.run(
        ["tar", "--sparse", "--format=pax", "--no-recursion", "-C", str(tree), "-cf", str(out), *names], check=True
    )
    with tarfile.open(out) as tar:
        assert tar.getmember(STEP).sparse is not None  # really a sparse member
    assert out.stat().st_size < 1 << 20
    return out


def test_a_sparse_member_is_refused_before_anything_is_copied(trained: tuple[Path, Path], tmp_path: Path) -> None:
    evil = sparse_pack(trained[1], tmp_path, 1 << 30)  # 1 GiB declared, a few KB in the tar
    home = tmp_path / "b"
    home.mkdir()
    result = cli(home, "unpack", str(evil))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert "is sparse" in line.replace(str(evil), "") and "step-000004.pt" in line
    assert table(home, "select id from experiments") == [] and not list(home.glob(".unpack-*"))
    assert sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) < 1 << 20


def test_a_member_larger_than_its_manifest_entry_is_refused(trained: tuple[Path, Path], tmp_path: Path) -> None:
    grown = rewrite(
        trained[1], tmp_path / "grown.tar", lambda name, data: data + b"\0" * 4096 if name == STEP else data
    )
    home = tmp_path / "b"
    home.mkdir()
    result = cli(home, "unpack", str(grown))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert "step-000004.pt" in line and "size" in line
    assert table(home, "select id from experiments") == [] and not list(home.glob(".unpack-*"))


HUGE = 32 << 20  # a header's declared bytes: what tarfile would read whole before anything could look at it


def _huge_headers(out: Path, how: str, before: Path | None = None) -> Path:
    """A tar whose member (after ``before``'s members, if given) carries ``HUGE`` bytes of headers, as ``how`` says."""
    gnu = how == "a GNU long name"
    header = {"comment": "x" * HUGE} if how == "a global PAX header" else None
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT if gnu else tarfile.PAX_FORMAT, pax_headers=header) as tar:
        if before is not None:
            with tarfile.open(before) as source:
                for info in source.getmembers():
                    tar.addfile(info, source.extractfile(info))
        info = tarfile.TarInfo("octlm-pack/" + ("a" * HUGE if gnu else "tokenizer.json"))
        info.size = 2
        if how.startswith("a PAX header"):
            info.pax_headers = {"comment": "x" * HUGE}
        tar.addfile(info, io.BytesIO(b"{}"))
    return out


@pytest.mark.parametrize(
    "how", ["a PAX header", "a GNU long name", "a global PAX header", "a PAX header after a real pack's members"]
)
def test_oversize_tar_headers_are_refused_before_they_are_read(
    trained: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    """Issue 45 item 18b: ``tarfile`` reads a PAX header or a GNU long name whole, by the size its block declares
    (a 300 MB PAX header took 952 MB before the pack was refused). A member's headers are read within a budget of a
    megabyte: past it the pack is refused in one line, having allocated far less than the header declares."""
    import tracemalloc

    evil = _huge_headers(tmp_path / "evil.tar", how, trained[1] if how.endswith("members") else None)
    home = tmp_path / "b"
    home.mkdir()
    cli(home, "unpack", str(evil))  # once untraced: what importing the modules costs is not the header's
    tracemalloc.start()
    try:
        result = cli(home, "unpack", str(evil))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < HUGE // 8, f"{peak:,} bytes allocated for a pack with {HUGE:,} bytes of headers"
    line = one_line(result)
    assert result.exit_code == 3 and "tar headers" in line and "1,048,576 bytes" in line, line
    assert table(home, "select id from experiments") == [] and not list(home.glob(".unpack-*"))


# ---------------------------------------------------------------- item 8: imported running runs


def export_with_a_running_run(home: Path, tmp_path: Path, **run: object) -> Path:
    """``home``'s export with its last run marked running on this box's host with this test's pid (alive)."""
    result = cli(home, "registry", "export")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    last = max(i for i, r in enumerate(records) if r["type"] == "run")
    records[last].update({"status": "running", "host": socket.gethostname(), "pid": os.getpid(), **run})
    out = tmp_path / "running.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def test_an_imported_running_run_is_unknown_and_removable_after_repair(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    """Issue 33 item 22: a row imported as running on this very host, with no start time, can never be shown alive:
    it reads crashed, ``doctor --repair`` marks it so (no --other-hosts needed), and ``rm`` proceeds."""
    path = export_with_a_running_run(trained[0], tmp_path, pid_start=None)
    home = tmp_path / "b"
    home.mkdir()
    assert cli(home, "registry", "import", str(path)).exit_code == 0
    statuses = [row[0] for row in table(home, "select status from runs order by id")]
    assert statuses[-1] == f"unknown (host {socket.gethostname()})" and "running" not in statuses
    assert json_out(cli(home, "show", "EXP-001", "--json"))["runs"][-1]["status"] == "crashed"
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert table(home, "select status from runs order by id")[-1][0] == "crashed"
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 0


def test_an_imported_run_of_another_host_still_waits_for_other_hosts(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    path = export_with_a_running_run(trained[0], tmp_path, pid_start=None, host="elsewhere")
    home = tmp_path / "b"
    home.mkdir()
    assert cli(home, "registry", "import", str(path)).exit_code == 0
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 3  # another host's run cannot be checked here
    assert cli(home, "doctor", "--repair", "--other-hosts").exit_code == 0
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 0


def test_a_running_row_without_a_pid_start_time_is_not_alive(tmp_path: Path) -> None:
    from octlm.core.liveness import alive, effective_status, start_time

    assert start_time(os.getpid()) is not None  # this box records start times
    assert not alive(os.getppid(), None)
    row = {"status": "running", "host": socket.gethostname(), "pid": os.getppid(), "pid_start": None}
    assert effective_status(row)["status"] == "crashed"
    assert alive(os.getppid(), start_time(os.getppid()))


# ---------------------------------------------------------------- item 10: the manifest's octlm version


def test_a_pack_from_a_newer_octlm_is_refused_and_an_older_one_unpacks(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    newer = with_manifest(trained[1], tmp_path / "newer.tar", octlm="99.0.0")
    home = tmp_path / "b"
    home.mkdir()
    result = cli(home, "unpack", str(newer))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert "99.0.0" in line and "newer" in line and "upgrade" in line
    assert table(home, "select id from experiments") == []
    bad = with_manifest(trained[1], tmp_path / "bad.tar", octlm="not a version")
    result = cli(home, "unpack", str(bad))
    assert result.exit_code == 2 and "octlm version" in one_line(result)
    older = with_manifest(trained[1], tmp_path / "older.tar", octlm="0.0.1")
    result = cli(home, "unpack", str(older))
    assert result.exit_code == 0, result.stderr
    assert table(home, "select id from experiments") == [("EXP-001",)]


# ---------------------------------------------------------------- item 11: data.sources outside the home


def pointing_at(records: list[dict], source: str) -> list[dict]:
    for record in records:
        if record["type"] == "experiment":
            record["yaml"] = record["yaml"].replace("corpus/*.txt", source)
            assert source in record["yaml"]
    return records


def export_pointing_at(home: Path, tmp_path: Path, source: str) -> Path:
    records = [json.loads(line) for line in cli(home, "registry", "export").stdout.splitlines()]
    out = tmp_path / "pointing.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in pointing_at(records, source)))
    return out


def pack_pointing_at(pack: Path, tmp_path: Path, source: str) -> Path:
    """``pack`` with its experiment's data.sources changed, the manifest's checksum of its records with it."""
    with tarfile.open(pack) as tar:
        data = tar.extractfile(RECORDS).read()
    records = pointing_at([json.loads(line) for line in data.decode().splitlines()], source)
    changed = "".join(json.dumps(r) + "\n" for r in records).encode()
    entry = {"sha256": hashlib.sha256(changed).hexdigest(), "size": len(changed)}

    def change(name: str, data: bytes) -> bytes:
        if name == MANIFEST:
            manifest = json.loads(data)
            manifest["files"]["registry.jsonl"] = entry
            return json.dumps(manifest).encode()
        return changed if name == RECORDS else data

    return rewrite(pack, tmp_path / "pointing.tar", change)


@pytest.mark.parametrize("kind", ["absolute", "parent"])
def test_sources_outside_the_home_are_refused_unless_allowed(
    trained: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "words.txt").write_text("private words " * 100)
    source = str(secret / "*.txt") if kind == "absolute" else "../secret/*.txt"
    for command, made in (
        ("registry import", export_pointing_at(trained[0], tmp_path, source)),
        ("unpack", pack_pointing_at(trained[1], tmp_path, source)),
    ):
        home = tmp_path / command.replace(" ", "-")
        home.mkdir()
        result = cli(home, *command.split(), str(made))
        assert result.exit_code == 3, (command, result.stdout, result.stderr)
        line = one_line(result)
        assert source in line and "--allow-outside-sources" in line
        assert table(home, "select id from experiments") == [] and not (home / "experiments").exists()
        result = cli(home, *command.split(), str(made), "--allow-outside-sources")
        assert result.exit_code == 0, (command, result.stderr)
        assert source in (home / "experiments" / "EXP-001.yaml").read_text()


def test_sources_inside_the_data_root_are_accepted(
    trained: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    (root / "shared").mkdir(parents=True)
    monkeypatch.setenv("OCTLM_DATA_ROOT", str(root))
    home = tmp_path / "b"
    home.mkdir()
    made = export_pointing_at(trained[0], tmp_path, str(root / "shared" / "*.txt"))
    assert cli(home, "registry", "import", str(made)).exit_code == 0
    relative = export_pointing_at(trained[0], tmp_path, "shared/*.txt")
    other = tmp_path / "c"
    other.mkdir()
    assert cli(other, "registry", "import", str(relative)).exit_code == 0
