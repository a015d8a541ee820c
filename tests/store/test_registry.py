from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import octlm
from sqlite_utils import Database

from octlm.core.errors import Refused
from octlm.core.records import METRIC_FIELDS
from octlm.store import base, migrations
from octlm.store import registry as registry_module
from octlm.store.registry import KNOWN_MIGRATIONS, Registry


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[1] for row in conn.execute(f"pragma table_info({table})")}


def test_migrations_build_the_schema_on_a_blank_database(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    assert {"id", "description", "created", "yaml_path", "config_json", "config_hash"} <= columns(path, "experiments")
    assert {
        "kind",
        "status",
        "start_step",
        "end_step",
        "host",
        "pid",
        "argv",
        "octlm_version",
        "python_version",
        "torch_version",
        "device",
        "dtype",
        "threads",
        "git_commit",
        "git_dirty",
        "data_hash",
        "tokenizer_hash",
        "latest_metrics",
        "final_metrics",
        "error",
    } <= columns(path, "runs")
    assert {
        "experiment_id",
        "run_id",
        "step",
        "path",
        "sha256",
        "size",
        "tokens",
        "created",
        "config_hash",
        "data_hash",
        "tokenizer_hash",
    } <= columns(path, "checkpoints")
    assert {"experiment_id", "kind", "verdict", "details"} <= columns(path, "verifications")
    with sqlite3.connect(path) as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
        applied = [r[0] for r in conn.execute("select name from _sqlite_migrations order by id")]
    assert applied == list(KNOWN_MIGRATIONS) == migrations.NAMES
    Registry(path).close()  # reopening applies nothing twice
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*) from _sqlite_migrations").fetchone()[0] == len(KNOWN_MIGRATIONS)


def test_the_migrations_build_the_schema_main_built(tmp_path: Path) -> None:
    """Every table, index and view as main's migrations built them, m001 to m006 (tests/fixtures/exchange-v1/make.py):
    moving the columns into data changed none of them."""
    path = tmp_path / "registry.db"
    with sqlite3.connect(path) as conn:
        migrations.migration_set().apply(Database(conn), stop_before="m007_data_order_evaluation")
    with sqlite3.connect(path) as conn:
        schema = conn.execute("select type, name, tbl_name, sql from sqlite_master order by type, name").fetchall()
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "exchange-v1" / "schema.json"
    assert [list(row) for row in schema] == json.loads(fixture.read_text())


def test_registry_from_a_newer_octlm_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "insert into _sqlite_migrations (migration_set, name, applied_at) values ('octlm', 'm999_future', 'now')"
        )
    with pytest.raises(Refused, match="newer octlm"):
        Registry(path)


def test_registry_module_never_imports_torch() -> None:
    modules = ("store.registry", "views.show", "views.details", "views.listing", "views.side_by_side")
    modules = (*modules, "views.curves.plots")
    imports = ", ".join(f"octlm.{name}" for name in (*modules, "store.experiments", "cli.app"))
    code = f"import sys; import {imports}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.slow
def test_sixteen_parallel_new_calls_get_sixteen_distinct_ids(tmp_path: Path) -> None:
    home = tmp_path / "parallel"
    home.mkdir()
    with ThreadPoolExecutor(max_workers=16) as pool:  # each call is its own OS process
        results = list(pool.map(lambda _: octlm(home, "new", "--preset", "day1", timeout=120), range(16)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    ids = [r.stdout.strip() for r in results]
    assert sorted(ids) == [f"EXP-{n:03d}" for n in range(1, 17)]
    assert sorted(p.stem for p in (home / "experiments").glob("*.yaml")) == sorted(ids)
    with sqlite3.connect(home / "registry.db") as conn:
        assert sorted(r[0] for r in conn.execute("select id from experiments")) == sorted(ids)
    assert not list((home / "experiments").glob(".new-*"))


@pytest.mark.slow
def test_parallel_new_calls_after_rm_never_give_a_removed_id_and_keep_the_highest_beside_the_registry(
    tmp_path: Path,
) -> None:
    """Issue 45 item 5, under concurrency: eight ``new`` at once after the newest experiments were removed take
    eight distinct IDs past every one given before, and the mark ``.octlm/ids.json`` keeps ends at the highest given,
    as the registry's does: written with the registry's write lock held, a slower writer never lowers it."""
    home = tmp_path / "parallel"
    for expected in ("EXP-001", "EXP-002", "EXP-003"):
        assert octlm(home, "new").stdout.strip() == expected
    for experiment_id in ("EXP-003", "EXP-002"):
        assert octlm(home, "rm", experiment_id, "--yes").returncode == 0
    with ThreadPoolExecutor(max_workers=8) as pool:  # each call is its own OS process
        results = list(pool.map(lambda _: octlm(home, "new", timeout=120), range(8)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    assert sorted(r.stdout.strip() for r in results) == [f"EXP-{n:03d}" for n in range(4, 12)]
    assert json.loads((home / ".octlm" / "ids.json").read_text())["highest"] == {"EXP-": 11}
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select prefix, highest from id_marks").fetchall() == [("EXP-", 11)]


def test_m011_seeds_the_marks_from_the_experiments_there_and_a_removal_never_lowers_one(tmp_path: Path) -> None:
    """A registry of an older octlm (m010) learns the highest number of each prefix from its rows when migrated; rows
    inserted together (a sweep's trials, ``new --seeds``) raise them as ``new`` does, and removing a row lowers none."""
    path = tmp_path / "registry.db"
    with sqlite3.connect(path) as conn:
        migrations.migration_set().apply(Database(conn), stop_before="m011_id_marks")
        for experiment_id in ("EXP-007", "EXP-002", "B-EXP-012", "junk"):
            conn.execute("insert into experiments (id) values (?)", (experiment_id,))
    with Registry(path) as registry:
        assert registry.id_marks() == {"EXP-": 7, "B-EXP-": 12}
        registry.remove_experiment("EXP-007")
        registry.add_experiments([{"id": "EXP-009"}, {"id": "BOX-003"}])
        registry.remove_experiment("EXP-009")
        assert registry.id_marks() == {"EXP-": 9, "B-EXP-": 12, "BOX-": 3}


def filled(path: Path) -> Registry:
    """A registry with one experiment, one finished run, a checkpoint and a verdict, all written through the API."""
    registry = Registry(path)
    config = {"description": "first", "training": {"steps": 12, "learning_rate": 0.003}}
    registry.add_experiment(
        "EXP-001",
        description="first",
        preset="day1",
        yaml_path="experiments/EXP-001.yaml",
        config_json=json.dumps(config),
        config_hash="h1",
    )
    run = registry.start_run("EXP-001", "train", start_step=0, argv=["octlm", "train", "EXP-001"])
    registry.update_run(run, latest_metrics={"step": 4, "eval_loss": 3.5}, end_step=4)
    registry.finish_run(run, "completed", end_step=4, final_metrics={"step": 4, "eval_loss": 3.5})
    registry.add_checkpoint(
        experiment_id="EXP-001",
        run_id=run,
        step=4,
        path="checkpoints/EXP-001/step-000004.pt",
        sha256="ab" * 32,
        size=10,
        tokens=64,
        config_hash="h1",
        data_hash="d",
        tokenizer_hash="t",
        metrics={"eval_loss": 3.5},
    )
    registry.add_verification("EXP-001", "overfit", "pass", {"summary": "loss 0.1"}, run)
    return registry


def ordered_columns(path: Path, table: str) -> tuple[str, ...]:
    with sqlite3.connect(path) as conn:
        return tuple(row[1] for row in conn.execute(f"pragma table_info({table})"))


def test_column_tuples_mirror_the_schema(tmp_path: Path) -> None:
    """The columns are derived from the migrations (what they create and add): they must be what a migrated
    database has, in its order; the rows' TypedDicts name the same; and writes refuse anything else."""
    path = tmp_path / "registry.db"
    with filled(path) as registry:
        with pytest.raises(ValueError, match="checkpoints: unknown column 'kind'"):  # another table's column
            registry.add_checkpoint(experiment_id="EXP-001", step=8, path="c/8", kind="train")
        with pytest.raises(ValueError, match="runs: unknown column 'id'"):  # the database's own
            registry.update_run(1, id=5)
    with sqlite3.connect(path) as conn:
        sql = "select name from sqlite_master where type = 'table' and name != '_sqlite_migrations'"
        tables = {name for (name,) in conn.execute(sql)}
    experiment_tables, sweep_tables = set(registry_module.EXPERIMENT_TABLES), set(base.SWEEP_TABLES)  # m009's
    assert set(migrations.TABLE_COLUMNS) == tables == experiment_tables | sweep_tables | set(base.HOME_TABLES)
    for table, writable, row in (
        ("experiments", registry_module.EXPERIMENT_COLUMNS, registry_module.ExperimentRow),
        ("runs", registry_module.RUN_COLUMNS, registry_module.RunRow),
        ("checkpoints", registry_module.CHECKPOINT_COLUMNS, registry_module.CheckpointRow),
        ("verifications", registry_module.VERIFICATION_COLUMNS, registry_module.VerificationRow),
        ("notes", registry_module.NOTE_COLUMNS, registry_module.NoteRow),
        ("metrics", registry_module.METRIC_COLUMNS, registry_module.MetricRow),
    ):
        assert migrations.TABLE_COLUMNS[table] == ordered_columns(path, table) == tuple(row.__annotations__), table
        assert ("id", *writable) == ordered_columns(path, table)
    view = tuple(registry_module.SummaryRow.__annotations__)  # the summary view's columns as a read returns them
    assert view == ordered_columns(path, "experiment_summary")
    assert set(registry_module.METRIC_TABLE_FIELDS) == set(
        METRIC_FIELDS
    )  # a new run-file field needs a migration adding it
    assert list(migrations.ADDED) == [name for name in migrations.NAMES if name in migrations.ADDED]
    assert all(column in migrations.TABLE_COLUMNS[table] for table, column in registry_module.JSON_CELLS)
    assert registry_module.JSON_COLUMNS == {column for _, column in registry_module.JSON_CELLS}


def test_commands_that_find_the_registry_migrated_never_load_sqlite_utils(tmp_path: Path) -> None:
    """The columns come from the migrations without sqlite-utils (it costs a new or show some 0.15 s)."""
    path = tmp_path / "registry.db"
    filled(path).close()
    code = (
        "import sys; from pathlib import Path; from octlm.store.registry import Registry; "
        "from octlm.exchange import importing, packing, reading, records; "
        f"r = Registry(Path({str(path)!r})); r.add_experiment('EXP-002', description='x'); r.close(); "
        "print('sqlite_utils' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    "write",
    [
        lambda r, run: r.start_run("EXP-001", "train", colour="red"),
        lambda r, run: r.update_run(run, colour="red"),
        lambda r, run: r.finish_run(run, "completed", colour="red"),
        lambda r, run: r.add_checkpoint(experiment_id="EXP-001", step=8, path="c/8", colour="red"),
        lambda r, run: r.update_run(run, **{"end_step = 0, status": "x"}),  # a key is never SQL
        lambda r, run: r.add_metrics("EXP-001", "train", run, {"step": 8, "colour": "red"}),
    ],
)
def test_writes_refuse_unknown_columns_and_write_nothing(tmp_path: Path, write) -> None:
    path = tmp_path / "registry.db"
    with filled(path) as registry:
        run = registry.runs("EXP-001")[0]["id"]
        before = (registry.runs("EXP-001"), registry.checkpoints("EXP-001"))
        with pytest.raises(ValueError, match="unknown column '(colour|end_step = 0, status)'"):
            write(registry, run)
        assert (registry.runs("EXP-001"), registry.checkpoints("EXP-001")) == before


def test_named_reads_return_decoded_rows(tmp_path: Path) -> None:
    with filled(tmp_path / "registry.db") as registry:
        [experiment] = registry.experiments()
        assert experiment["id"] == "EXP-001" and experiment["config_hash"] == "h1"
        assert registry.experiment_ids() == ["EXP-001"]
        assert registry.configs() == {
            "EXP-001": {"description": "first", "training": {"steps": 12, "learning_rate": 0.003}}
        }
        [run] = registry.runs("EXP-001")
        assert run["argv"] == ["octlm", "train", "EXP-001"]
        assert run["latest_metrics"] == run["final_metrics"] == {"step": 4, "eval_loss": 3.5}
        assert run["status"] == "completed" and run["ended"] is not None
        assert registry.has_training_run("EXP-001") and not registry.has_training_run("EXP-002")
        assert registry.running_runs() == []
        [row] = registry.checkpoints("EXP-001")
        assert row["metrics"] == {"eval_loss": 3.5} and row["tokens"] == 64
        assert registry.digests(tmp_path, "EXP-001") == {str(tmp_path / row["path"]): "ab" * 32}
        [verdict] = registry.verifications("EXP-001")
        assert verdict["details"] == {"summary": "loss 0.1"} and verdict["run_id"] == run["id"]
        [summary] = registry.summary_rows()
        assert (summary["id"], summary["status"], summary["step"], summary["steps"]) == ("EXP-001", "completed", 4, 12)
        assert summary["eval_loss"] == 3.5 and summary["last_verdict"] == "overfit: pass"


def test_malformed_json_cells_read_as_none(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    filled(path).close()
    with sqlite3.connect(path) as conn:  # a cell damaged outside octlm
        conn.execute("update runs set argv = '[\"octlm', final_metrics = '{'")
        conn.execute("update checkpoints set metrics = 'not json'")
        conn.execute("update verifications set details = '{\"summary\": '")
        conn.execute("update experiments set config_json = '{'")
    with Registry(path, create=False) as registry:
        [run] = registry.runs("EXP-001")
        assert run["argv"] is None and run["final_metrics"] is None
        assert run["latest_metrics"] == {"step": 4, "eval_loss": 3.5}
        assert registry.checkpoints("EXP-001")[0]["metrics"] is None
        assert registry.verifications("EXP-001")[0]["details"] == {}
        assert registry.configs() == {"EXP-001": {}}


def test_a_run_of_a_dead_process_reads_crashed(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with filled(tmp_path / "registry.db") as registry:
        run = registry.start_run("EXP-001", "resume", pid=gone.pid)
        [stuck] = registry.running_runs()
        assert stuck["id"] == run and stuck["status"] == "crashed"
        assert registry.runs("EXP-001")[-1]["status"] == "crashed"


def test_a_missing_registry_answers_every_read_empty_and_stays_missing(tmp_path: Path) -> None:
    path = tmp_path / "none" / "registry.db"
    with Registry(path, create=False) as registry:
        assert registry.conn is None
        assert registry.experiments() == [] and registry.experiment_ids() == [] and registry.configs() == {}
        assert registry.experiment("EXP-001") is None and registry.summary_rows() == []
        assert registry.runs("EXP-001") == [] and registry.running_runs() == []
        assert not registry.has_training_run("EXP-001")
        assert registry.checkpoints("EXP-001") == [] and registry.digests(tmp_path, "EXP-001") == {}
        assert registry.verifications("EXP-001") == []
        assert registry.metrics("EXP-001") == [] and registry.notes("EXP-001") == []
        assert registry.row_counts("EXP-001") == {} and registry.same_config("h") == []
        with pytest.raises(Refused):
            registry.remove_checkpoint("c/1")
    assert not path.parent.exists()
