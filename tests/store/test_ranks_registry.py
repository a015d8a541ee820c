"""Data-parallel runs in the registry: the m005 migration (world_size, nnodes, backend, resharded_from on
``runs``), their round trip through ``Registry.start_run``, and the ``ranks`` column of ``octlm show ID``.
No training, no torch.distributed."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, json_out, write_experiment
from sqlite_utils import Database

from octlm.cli import render, show_view
from octlm.core.home import Home
from octlm.store import migrations
from octlm.store import registry as registry_module
from octlm.store.experiments import load, register
from octlm.store.registry import KNOWN_MIGRATIONS, Registry
from octlm.views import show as shows

RANKS = ("world_size", "nnodes", "backend", "resharded_from")
SHARDED = "4 gloo, 2 nodes, resharded from 2"


def table_info(path: Path, table: str) -> dict[str, tuple[str, int, Any]]:
    """{column: (type, notnull, default)}."""
    with sqlite3.connect(path) as conn:
        return {row[1]: (row[2], row[3], row[4]) for row in conn.execute(f"pragma table_info({table})")}


def registered(home: Path, experiment_id: str = "EXP-001") -> None:
    """The experiment's YAML (if missing) and its registry row, as ``octlm new`` leaves them."""
    if not (home / "experiments" / f"{experiment_id}.yaml").exists():
        write_experiment(home, experiment_id)
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))


def column(text: str, header: str) -> list[str]:
    """The cells under ``header`` in the plain (piped) runs table of ``octlm show ID``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["#", "kind", "status"])
    head = lines[start]
    left = head.index(f"  {header}  ") + 2
    right = left + len(header) + 2
    while right < len(head) and head[right] == " ":
        right += 1
    cells = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells.append(line[left:right].strip())
    return cells


# ---------------------------------------------------------------- migration


def test_a_fresh_registry_has_the_rank_columns(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    info = table_info(path, "runs")
    assert info["world_size"] == ("INTEGER", 1, "1")
    assert info["nnodes"] == ("INTEGER", 1, "1")
    assert info["backend"] == ("TEXT", 0, None)
    assert info["resharded_from"] == ("INTEGER", 0, None)
    assert set(RANKS) <= set(registry_module.RUN_COLUMNS)
    assert set(registry_module.RUN_COLUMNS) == set(info) - {"id"}
    assert "m005_ranks" in KNOWN_MIGRATIONS and KNOWN_MIGRATIONS[-1] == migrations.NAMES[-1]
    assert list(KNOWN_MIGRATIONS) == migrations.NAMES


def test_an_m004_registry_migrates_with_one_rank_on_its_old_runs(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    with sqlite3.connect(path) as conn:
        migrations.migration_set().apply(Database(conn), stop_before="m005_ranks")
        conn.execute("insert into experiments (id, description, config_json) values ('EXP-001', 'old', '{}')")
        conn.execute(
            "insert into runs (experiment_id, kind, status, start_step, end_step) "
            "values ('EXP-001', 'train', 'completed', 0, 12)"
        )
    assert "world_size" not in table_info(path, "runs")
    with Registry(path, create=False) as reader:  # read-only: migrated on a copy in memory, the file untouched
        [run] = reader.runs("EXP-001")
        assert {key: run[key] for key in RANKS} == {
            "world_size": 1,
            "nnodes": 1,
            "backend": None,
            "resharded_from": None,
        }
    assert "world_size" not in table_info(path, "runs")
    with Registry(path) as registry:
        [run] = registry.runs("EXP-001")
        assert (run["status"], run["end_step"], run["world_size"], run["nnodes"]) == ("completed", 12, 1, 1)
        assert run["backend"] is None and run["resharded_from"] is None
    assert set(RANKS) <= set(table_info(path, "runs"))
    with sqlite3.connect(path) as conn:
        applied = [r[0] for r in conn.execute("select name from _sqlite_migrations order by id")]
    assert applied == list(KNOWN_MIGRATIONS)


# ---------------------------------------------------------------- writes and reads


def test_start_run_records_the_ranks_and_they_round_trip(tmp_path: Path) -> None:
    home = tmp_path / "home"
    registered(home)
    with Registry(home / "registry.db") as registry:
        plain = registry.start_run("EXP-001", "train", start_step=0)
        registry.finish_run(plain, "completed", end_step=12)
        sharded = registry.start_run(
            "EXP-001", "resume", start_step=12, world_size=4, nnodes=2, backend="gloo", resharded_from=2
        )
        registry.update_run(sharded, end_step=16)
        registry.finish_run(sharded, "completed", end_step=24)
        two = registry.start_run("EXP-001", "train", start_step=0, world_size=2, nnodes=1, backend="nccl")
        first, second, third = registry.runs("EXP-001")
    assert {key: first[key] for key in RANKS} == {"world_size": 1, "nnodes": 1, "backend": None, "resharded_from": None}
    assert {key: second[key] for key in RANKS} == {"world_size": 4, "nnodes": 2, "backend": "gloo", "resharded_from": 2}
    assert (second["id"], second["end_step"], second["status"]) == (sharded, 24, "completed")
    assert (third["id"], third["world_size"], third["backend"], third["resharded_from"]) == (two, 2, "nccl", None)
    with Registry(home / "registry.db", create=False) as reader:  # a read-only reader sees the same
        assert [run["world_size"] for run in reader.runs("EXP-001")] == [1, 4, 2]


# ---------------------------------------------------------------- show


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({}, "1"),
        ({"world_size": 1, "nnodes": 1, "backend": None, "resharded_from": None}, "1"),
        ({"world_size": 1, "backend": "gloo"}, "1"),  # a backend only for several ranks
        ({"world_size": 4, "backend": "gloo"}, "4 gloo"),
        ({"world_size": 8, "nnodes": 2, "backend": "nccl"}, "8 nccl, 2 nodes"),
        ({"world_size": 4, "nnodes": 2, "backend": None}, "4, 2 nodes"),
        ({"world_size": 4, "nnodes": 2, "backend": "gloo", "resharded_from": 2}, SHARDED),
        ({"world_size": 1, "nnodes": 1, "resharded_from": 4}, "1, resharded from 4"),
        ({"world_size": None, "nnodes": None}, "1"),
        ({"world_size": "x", "nnodes": -3}, "1"),  # damaged outside octlm: one process
    ],
)
def test_ranks_text(fields: dict[str, Any], text: str) -> None:
    assert show_view.ranks(fields) == text


def test_show_detail_has_a_ranks_column(tmp_path: Path) -> None:
    home = tmp_path / "home"
    registered(home)
    with Registry(home / "registry.db") as registry:
        plain = registry.start_run("EXP-001", "train", start_step=0, threads=2)
        registry.finish_run(plain, "completed", end_step=12)
        sharded = registry.start_run(
            "EXP-001", "resume", start_step=12, world_size=4, nnodes=2, backend="gloo", resharded_from=2
        )
        registry.finish_run(sharded, "completed", end_step=24)
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.split()[:3] == ["#", "kind", "status"])
    names = header.split()
    assert names.index("ranks") == names.index("threads") + 1
    assert column(result.stdout, "ranks") == ["1", SHARDED]

    document = json_out(cli(home, "show", "EXP-001", "--json"))
    raw = [{key: run[key] for key in RANKS} for run in document["runs"]]
    assert raw == [
        {"world_size": 1, "nnodes": 1, "backend": None, "resharded_from": None},
        {"world_size": 4, "nnodes": 2, "backend": "gloo", "resharded_from": 2},
    ]


def test_show_reads_an_m004_registry_as_one_rank(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_experiment(home)
    path = home / "registry.db"
    with sqlite3.connect(path) as conn:
        migrations.migration_set().apply(Database(conn), stop_before="m005_ranks")
        conn.execute("insert into experiments (id, description, config_json) values ('EXP-001', 'old', '{}')")
        conn.execute(
            "insert into runs (experiment_id, kind, status, start_step, end_step, threads) "
            "values ('EXP-001', 'train', 'completed', 0, 12, 2)"
        )
    result = cli(home, "show", "EXP-001")
    assert result.exit_code == 0, result.stderr
    assert column(result.stdout, "ranks") == ["1"]
    assert json_out(cli(home, "show", "EXP-001", "--json"))["runs"][0]["world_size"] == 1
    assert "world_size" not in table_info(path, "runs")  # show only reads: the file keeps its schema


def draw(home: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> str:
    """``octlm show EXP-001`` as drawn on a terminal ``width`` columns wide."""
    buffer = io.StringIO()
    console = render.PlainConsole(width=width, file=buffer, force_terminal=True, color_system=None, soft_wrap=False)
    monkeypatch.setattr(render, "terminal", lambda: True)
    monkeypatch.setattr(render, "out_console", lambda: console)
    request = shows.ShowRequest(ids=("EXP-001",))
    show_view.write(shows.run(Home(home), request), request)
    return buffer.getvalue()


def test_ranks_stays_at_120_columns_and_gives_way_on_a_narrow_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    registered(home)
    with Registry(home / "registry.db") as registry:
        run = registry.start_run(
            "EXP-001",
            "train",
            start_step=0,
            pid=17537,
            host="box",
            device="cpu",
            dtype="float32",
            threads=2,
            world_size=4,
            backend="gloo",
        )
        registry.finish_run(run, "completed", end_step=12, latest_metrics={"train_loss": 5.1, "eval_loss": 5.3})
    wide = draw(home, monkeypatch, 120)
    assert max(len(line) for line in wide.splitlines()) <= 120
    header = next(line for line in wide.splitlines() if line.lstrip().startswith("#") and "kind" in line)
    assert "ranks" in header.split() and "4 gloo" in wide
    capsys.readouterr()
    narrow = draw(home, monkeypatch, 60)
    header = next(line for line in narrow.splitlines() if line.lstrip().startswith("#") and "kind" in line)
    assert "ranks" not in header.split() and "4 gloo" not in narrow
    assert "ranks" in capsys.readouterr().err  # the note names the columns left out
