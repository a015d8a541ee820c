"""Reading never writes: linked, read-only and pending-migration registries, malformed rows and junk run files."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, json_out, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry

OCTLM = [sys.executable, "-m", "octlm"]


def run(home: Path | None, *args: str | bytes, **kwargs) -> subprocess.CompletedProcess:
    command = [*OCTLM, *(["--home", str(home)] if home else []), *args]
    env = {**os.environ, "NO_COLOR": "1", **kwargs.pop("env", {})}
    return subprocess.run(command, capture_output=True, timeout=120, env=env, **kwargs)


def recorded_run(home: Path, experiment_id: str = "EXP-001", **fields) -> int:
    """A registered experiment with one run row written through the registry's own API."""
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))
        return registry.start_run(experiment_id, "train", start_step=0, **fields)


def test_reads_never_write_a_linked_registry(home: Path, tmp_path: Path) -> None:
    assert cli(home, "new", "--description", "second").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("pragma journal_mode=delete")
    shutil.move(home / "registry.db", elsewhere / "registry.db")
    (home / "registry.db").symlink_to(elsewhere / "registry.db")
    before = (elsewhere / "registry.db").read_bytes()
    for args in (["show"], ["show", "EXP-002"], ["show", "EXP-001", "EXP-002", "--json"], ["doctor", "--json"]):
        assert cli(home, *args).exit_code in (0, 1), args
    assert (elsewhere / "registry.db").read_bytes() == before
    assert sorted(p.name for p in elsewhere.iterdir()) == ["registry.db"]
    assert not list(home.glob("registry.db-*"))
    with sqlite3.connect(elsewhere / "registry.db") as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "delete"


def test_show_works_on_a_read_only_medium(home: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    assert cli(home, "new", "--description", "second").exit_code == 0
    assert not list(home.glob("registry.db-*"))  # the last writer folded the WAL back in
    mount = f"mount --bind '{home}' '{home}' && mount -o remount,ro,bind '{home}' '{home}'"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} && ! touch '{home}/x'"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {probe.stderr!r}")
    show = f"{mount} && exec {' '.join(OCTLM)} --home '{home}' show --json"
    done = subprocess.run(["unshare", "-m", "sh", "-c", show], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [(e["id"], e["description"]) for e in json.loads(done.stdout)["experiments"]] == [
        ("EXP-001", "tiny test experiment"),  # a file not registered yet: its YAML speaks for it
        ("EXP-002", "second"),
    ]


@pytest.mark.slow
def test_show_and_doctor_work_in_a_home_made_read_only(home: Path) -> None:
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv")
    assert cli(home, "new", "--description", "second").exit_code == 0
    paths = [home, home / "experiments", home / "registry.db", *(home / "experiments").iterdir()]
    for path in paths:  # chmod a-w, as a user for whom the home is read-only (root, less its override)
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        if subprocess.run([*drop, "sh", "-c", f"touch '{home}/x'"], capture_output=True).returncode == 0:
            pytest.skip("cannot drop the permission override here")
        shown, checked = (
            subprocess.run([*drop, *OCTLM, "--home", str(home), *args], capture_output=True, text=True, timeout=60)
            for args in (["show", "--json"], ["doctor", "--json"])
        )
        assert shown.returncode == 0, shown.stderr
        assert [e["description"] for e in json.loads(shown.stdout)["experiments"]] == ["tiny test experiment", "second"]
        assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr  # EXP-001 has no row
        assert [p["kind"] for p in json.loads(checked.stdout)["problems"]] == ["experiment without row"]
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


def test_a_pending_migration_is_read_in_memory_and_never_written(home: Path) -> None:
    recorded_run(home, latest_metrics={"eval_loss": 3.0})
    with sqlite3.connect(home / "registry.db") as conn:  # as the previous release left it
        conn.execute("delete from _sqlite_migrations where name like 'm003%'")
        conn.execute("alter table runs drop column pid_start")
    before = (home / "registry.db").read_bytes()
    listed = cli(home, "show", "--json")
    assert listed.exit_code == 0 and json_out(listed)["experiments"][0]["eval_loss"] == 3.0
    assert (home / "registry.db").read_bytes() == before
    with Registry(home / "registry.db") as registry:  # a writer migrates
        assert "pid_start" in registry.runs("EXP-001")[0]


def test_a_malformed_row_is_skipped_by_show_and_repaired_by_doctor(home: Path) -> None:
    write_experiment(home, "EXP-002")
    recorded_run(home, "EXP-001", latest_metrics={"eval_loss": 2.5})
    recorded_run(home, "EXP-002", latest_metrics={"eval_loss": 3.5})
    with sqlite3.connect(home / "registry.db") as conn:  # one damaged row, as a hand edit leaves it
        conn.execute("update runs set latest_metrics = '{\"eval_loss\": ' where experiment_id = 'EXP-002'")
        conn.execute("update experiments set config_json = '{' where id = 'EXP-002'")
    listed = cli(home, "show", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [(e["id"], e["eval_loss"]) for e in json_out(listed)["experiments"]] == [("EXP-001", 2.5), ("EXP-002", None)]
    assert listed.stderr.count("octlm: warning:") == 1 and "2 cells are not valid JSON" in listed.stderr  # one line
    assert "runs row 2: latest_metrics" in listed.stderr and "experiments row EXP-002: config_json" in listed.stderr
    assert cli(home, "show", "EXP-002").exit_code == 0 and cli(home, "show", "--csv").exit_code == 0
    checked = json_out(cli(home, "doctor", "--json"))
    assert sorted(p["where"] for p in checked["problems"] if p["kind"] == "malformed registry cell") == [
        "experiments row EXP-002",
        "runs row 2",
    ]
    assert not checked["healthy"]
    assert json_out(cli(home, "doctor", "--repair", "--json"))["healthy"]
    clean = cli(home, "show", "--json")
    assert clean.stderr == "" and json_out(clean)["experiments"][1]["steps"] == 12
    assert cli(home, "doctor").exit_code == 0


def test_junk_in_a_run_file_does_not_break_compare_or_plot(home: Path) -> None:
    write_experiment(home, "EXP-002")
    (home / "runs").mkdir()
    (home / "runs" / "EXP-001.jsonl").write_text(
        '[1, 2]\n"text"\n{"tokens": "many", "train_loss": 5.0}\n{"tokens": 64, "train_loss": NaN, "eval_loss": 4.0}\n'
    )
    (home / "runs" / "EXP-002.jsonl").write_text('{"tokens": 64, "train_loss": 3.0, "lr": "fast"}\n')
    for args in (["EXP-001", "EXP-002"], ["EXP-001", "EXP-002", "--plot"], ["EXP-001", "EXP-002", "--plot", "--json"]):
        result = cli(home, "show", *args)
        assert result.exit_code == 0, (args, result.stderr)
    compared = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))
    assert [e["best"]["train_loss"] for e in compared["experiments"]] == [5.0, 3.0]
