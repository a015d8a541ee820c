"""``octlm registry export`` / ``import`` and the UUIDs behind them, between real homes with real training: two
homes that both allocated EXP-001 merge only under a prefix, in one transaction, and importing twice changes
nothing."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, json_out
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations
from test_pack import FIXTURE, ORIGIN, home_at, make_home

from octlm.exchange import records
from octlm.store import migrations
from octlm.store.registry import Registry

TYPES = {"experiment", "run", "checkpoint", "verification", "note", "run_file"}


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Homes A and B, each with its own EXP-001 (other learning rates) trained to step 4; B's export."""
    root = tmp_path_factory.mktemp("boxes")
    a, b = make_home(root / "a"), make_home(root / "b", training={"steps": 8, "learning_rate": 1e-3})
    for home in (a, b):
        assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert cli(b, "note", "EXP-001", "lower learning rate").exit_code == 0
    with Registry(b / "registry.db") as registry:  # a verdict, as verify-resume records one
        registry.add_verification("EXP-001", "verify-resume", "pass", {"split_at": [2]})
    export = root / "b.jsonl"
    result = cli(b, "registry", "export", "-o", str(export), "--json")
    assert result.exit_code == 0, result.stderr
    assert json_out(result)["experiments"] == ["EXP-001"] and json_out(result)["file"] == str(export)
    return a, b, export


def dump(home: Path) -> str:
    with sqlite3.connect(home / "registry.db") as conn:
        return "\n".join(conn.iterdump())


def counts(home: Path) -> dict[str, int]:
    tables = ("experiments", "runs", "checkpoints", "verifications", "notes", "metrics")
    with sqlite3.connect(home / "registry.db") as conn:
        return {table: conn.execute(f"select count(*) from {table}").fetchone()[0] for table in tables}


def one_line(result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.slow
def test_export_writes_one_record_per_line_with_its_version_and_type(boxes: tuple[Path, Path, Path]) -> None:
    _, home_b, export = boxes
    records = [json.loads(line) for line in export.read_text().splitlines()]
    assert {r["schema_version"] for r in records} == {1} and {r["type"] for r in records} == TYPES
    experiment = next(r for r in records if r["type"] == "experiment")
    assert experiment["id"] == "EXP-001" and "learning_rate: 0.001" in experiment["yaml"]
    checkpoint = next(r for r in records if r["type"] == "checkpoint")
    assert checkpoint["remote_path"] == str(home_b / "checkpoints" / "EXP-001" / "step-000004.pt")
    assert cli(home_b, "registry", "export").stdout == export.read_text()  # without -o: stdout


def test_a_colliding_id_is_refused_and_a_prefix_imports_it_beside(
    boxes: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    home = tmp_path / "a"
    shutil.copytree(boxes[0], home)
    before = dump(home)
    message = one_line(cli(home, "registry", "import", str(boxes[2])), 3)
    assert "EXP-001" in message and "--prefix" in message
    assert dump(home) == before and not (home / "experiments" / "B-EXP-001.yaml").exists()
    result = cli(home, "registry", "import", str(boxes[2]), "--prefix", "B-", "--json")
    assert result.exit_code == 0, result.stderr
    report = json_out(result)
    assert report["changed"] and report["experiments"][0] | {"uuid": None} == {
        "id": "B-EXP-001",
        "from": "EXP-001",
        "uuid": None,
        "status": "new",
    }
    assert report["rows"] == {
        "experiments": 1,
        "runs": 1,
        "checkpoints": 1,
        "verifications": 1,
        "notes": 1,
        "metrics": 1,
    }
    compared = json_out(cli(home, "show", "EXP-001", "B-EXP-001", "--json"))
    assert "training.learning_rate" in json.dumps(compared)
    plotted = cli(home, "show", "EXP-001", "B-EXP-001", "--plot", "--json")
    assert plotted.exit_code == 0 and "B-EXP-001" in plotted.stdout
    assert cli(home, "doctor").exit_code == 0  # the imported checkpoint stays on box B: not missing


def test_importing_the_same_export_again_changes_no_row(boxes: tuple[Path, Path, Path], tmp_path: Path) -> None:
    home = tmp_path / "a"
    shutil.copytree(boxes[0], home)
    assert cli(home, "registry", "import", str(boxes[2]), "--prefix", "B-").exit_code == 0
    rows, before = counts(home), dump(home)
    for args in (("--prefix", "B-"), ()):  # matched by UUID: the prefix no longer matters
        result = cli(home, "registry", "import", str(boxes[2]), *args, "--json")
        assert result.exit_code == 0, result.stderr
        assert json_out(result)["changed"] is False and json_out(result)["experiments"][0]["id"] == "B-EXP-001"
    assert counts(home) == rows and dump(home) == before
    assert "nothing changed" in cli(home, "registry", "import", str(boxes[2])).stdout


def test_export_writes_the_bytes_main_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The home main left (a trained, resumed, noted, tagged and verified experiment, and one imported from box B
    with its checkpoint remote there) exports to the very bytes main exported it to."""
    home = home_at(tmp_path / "home")
    monkeypatch.setattr(socket, "gethostname", lambda: "box-a")  # the box that names its local checkpoints
    expected = (FIXTURE / "registry.jsonl").read_bytes().replace(ORIGIN.encode(), str(home).encode())
    result = cli(home, "registry", "export", "-o", str(tmp_path / "now.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "now.jsonl").read_bytes() == expected
    assert cli(home, "registry", "export").stdout.encode() == expected
    types = [json.loads(line)["type"] for line in expected.decode().splitlines()]
    assert set(types) == TYPES and types.count("experiment") == 2


@pytest.mark.parametrize(
    "kind, typed",
    [
        ("experiment", records.ExportedExperiment),
        ("run", records.ExportedRun),
        ("checkpoint", records.ExportedCheckpoint),
        ("verification", records.ExportedVerification),
        ("note", records.ExportedNote),
        ("run_file", records.ExportedRunFile),
    ],
)
def test_the_record_types_name_the_fields_an_export_writes(kind: str, typed: type) -> None:
    """Each record's TypedDict: the envelope and the required fields, then the optional ones (derived from its
    table's columns), in the order an export writes them."""
    assert tuple(typed.__annotations__) == (*records.ENVELOPE, *records.REQUIRED[kind], *records.OPTIONAL[kind])
    assert typed.__required_keys__ == {*records.ENVELOPE, *records.REQUIRED[kind]}
    table = {"experiment": "experiments", "run": "runs", "checkpoint": "checkpoints", "run_file": "metrics"}.get(
        kind, kind + "s"
    )
    named = {"experiment_id": "experiment_uuid", "run_id": "run_uuid", "yaml_path": "yaml"}
    if kind != "run_file":  # every column goes out, as itself or as what names it, but the row's local id
        columns = {named.get(c, c) for c in migrations.TABLE_COLUMNS[table] if c != "id" or kind == "experiment"}
        assert columns == set(typed.__annotations__) - set(records.ENVELOPE)


def test_every_experiment_and_run_has_a_uuid_kept_forever(boxes: tuple[Path, Path, Path]) -> None:
    with Registry(boxes[0] / "registry.db", create=False) as registry:
        experiment = registry.experiment("EXP-001")
        runs = registry.runs("EXP-001")
    assert experiment is not None and len(experiment["uuid"]) == 36 and all(len(r["uuid"]) == 36 for r in runs)
    with Registry(boxes[0] / "registry.db") as registry:  # registering again (every train does) keeps it
        registry.sync_experiment("EXP-001", description="again")
        assert (registry.experiment("EXP-001") or {})["uuid"] == experiment["uuid"]


def test_the_migration_gives_existing_rows_a_uuid(tmp_path: Path) -> None:
    path, old = tmp_path / "registry.db", Migrations(migrations.SET_NAME)
    for migration in migrations.migration_set()._migrations[:5]:  # the schema of m005, as an older octlm left it
        old(name=migration.name)(migration.fn)
    old.apply(Database(path))
    with sqlite3.connect(path) as conn:
        conn.executemany("insert into experiments (id) values (?)", [("EXP-001",), ("EXP-002",)])
        conn.execute("insert into runs (experiment_id, kind, status) values ('EXP-001', 'train', 'completed')")
    with Registry(path) as registry:
        keys = [row["uuid"] for row in registry.experiments()] + [registry.runs("EXP-001")[0]["uuid"]]
    assert len(set(keys)) == 3 and all(len(key) == 36 for key in keys)


def test_bad_exports_get_one_line(boxes: tuple[Path, Path, Path], tmp_path: Path) -> None:
    home, records = tmp_path / "h", boxes[2].read_text().splitlines()
    assert "no such file" in one_line(cli(home, "registry", "import", str(tmp_path / "missing.jsonl")), 2)
    cases = {
        "text.jsonl": ("not json\n", 2, "not JSON"),
        "newer.jsonl": (json.dumps({**json.loads(records[0]), "schema_version": 99}) + "\n", 3, "newer"),
        "kind.jsonl": (json.dumps({"schema_version": 1, "type": "spaceship"}) + "\n", 2, "unknown record type"),
        "orphan.jsonl": ("\n".join(records[1:]) + "\n", 2, "neither in the file nor here"),
    }
    for name, (text, code, words) in cases.items():
        (tmp_path / name).write_text(text)
        assert words in one_line(cli(home, "registry", "import", str(tmp_path / name)), code)
    assert "--prefix" in one_line(cli(home, "registry", "import", str(boxes[2]), "--prefix", "../"), 2)
    assert not (home / "registry.db").exists() or counts(home)["experiments"] == 0
