from __future__ import annotations

import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from octlm_cli import migrations
from octlm_cli.errors import Refused
from octlm_cli.registry import KNOWN_MIGRATIONS, Registry

from conftest import octlm


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[1] for row in conn.execute(f"pragma table_info({table})")}


def test_migrations_build_the_schema_on_a_blank_database(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    assert {"id", "description", "created", "yaml_path", "config_json", "config_hash"} <= columns(path, "experiments")
    assert {"kind", "status", "start_step", "end_step", "host", "pid", "argv", "octlm_version", "python_version",
            "torch_version", "device", "dtype", "threads", "git_commit", "git_dirty", "data_hash", "tokenizer_hash",
            "latest_metrics", "final_metrics", "error"} <= columns(path, "runs")
    assert {"experiment_id", "run_id", "step", "path", "sha256", "size", "tokens", "created", "config_hash",
            "data_hash", "tokenizer_hash"} <= columns(path, "checkpoints")
    assert {"experiment_id", "kind", "verdict", "details"} <= columns(path, "verifications")
    with sqlite3.connect(path) as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
        applied = [r[0] for r in conn.execute("select name from _sqlite_migrations order by id")]
    assert applied == list(KNOWN_MIGRATIONS) == migrations.NAMES
    Registry(path).close()  # reopening applies nothing twice
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*) from _sqlite_migrations").fetchone()[0] == len(KNOWN_MIGRATIONS)


def test_registry_from_a_newer_octlm_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("insert into _sqlite_migrations (migration_set, name, applied_at) values ('octlm', 'm999_future', 'now')")
    with pytest.raises(Refused, match="newer octlm"):
        Registry(path)


def test_registry_module_never_imports_torch() -> None:
    import subprocess

    code = "import sys; import octlm_cli.registry, octlm_cli.show, octlm_cli.experiments; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


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
