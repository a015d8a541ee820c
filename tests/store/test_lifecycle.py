"""The experiment lifecycle (issue 13): the m004 migration, metrics rows, rm, archive, tag, note, doctor's
repair of rows without a config and its honest advice, ``new --from`` descriptions, duplicate fingerprints
and forks (``--init-from``)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import cli, json_out, write_experiment
from sqlite_utils import Database
from typer.testing import CliRunner

from octlm.cli.app import app
from octlm.cli.commands import lifecycle as commands_lifecycle
from octlm.core.home import Home
from octlm.store import migrations
from octlm.store import registry as registry_module
from octlm.store.registry import KNOWN_MIGRATIONS, Registry

RECORD = {
    "step": 4,
    "tokens": 256,
    "lr": 0.003,
    "train_loss": 5.1,
    "eval_loss": 5.3,
    "perplexity": 200.3,
    "bits_per_byte": 2.1,
    "gradient_norm": 1.5,
    "elapsed_seconds": 0.4,
    "tokens_per_second": 640.0,
}


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[1] for row in conn.execute(f"pragma table_info({table})")}


def register(home: Path, *ids: str) -> None:
    """Experiments with a YAML file and a row each, and rows in every table that holds an experiment's."""
    for experiment_id in ids:
        if not (home / "experiments" / f"{experiment_id}.yaml").exists():
            write_experiment(home, experiment_id)
        assert cli(home, "tag", experiment_id, "+x").exit_code == 0  # registers it from its YAML
    with Registry(home / "registry.db") as registry:
        for experiment_id in ids:
            run = registry.start_run(experiment_id, "train", start_step=0)
            registry.finish_run(run, "stopped", end_step=4)
            path = f"checkpoints/{experiment_id}/step-000004.pt"
            registry.add_checkpoint(experiment_id=experiment_id, run_id=run, step=4, path=path, sha256="ab" * 32)
            registry.add_verification(experiment_id, "overfit", "pass", {"summary": "ok"}, run)
            registry.add_metrics(experiment_id, "train", run, RECORD)
            registry.add_note(experiment_id, f"note on {experiment_id}")


def files_of(home: Path, experiment_id: str) -> list[Path]:
    """Every kind of file rm removes, written for ``experiment_id``."""
    folder = home / "checkpoints" / experiment_id
    (folder / "overfit").mkdir(parents=True, exist_ok=True)
    made = [folder / "step-000004.pt", folder / "step-000004.sha256", folder / "tokenizer.json"]
    (home / "runs").mkdir(exist_ok=True)
    made += [home / "runs" / f"{experiment_id}.jsonl", home / "runs" / f"{experiment_id}-overfit.jsonl"]
    (home / "locks").mkdir(exist_ok=True)
    made.append(home / "locks" / f"{experiment_id}.lock")
    for path in made:
        path.write_text("x")
    return [home / "experiments" / f"{experiment_id}.yaml", *made]


def fake_checkpoint(home: Path, experiment_id: str = "EXP-001", step: int = 4, payload: bytes = b"weights") -> str:
    """A checkpoint file with its .sha256 file (fork only hashes bytes; it never loads them)."""
    folder = home / "checkpoints" / experiment_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"step-{step:06d}.pt").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    (folder / f"step-{step:06d}.sha256").write_text(f"{digest}  step-{step:06d}.pt\n")
    return digest


# ---------------------------------------------------------------- migration and metrics


def test_a_blank_database_gets_every_lifecycle_column_and_the_metrics_table(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    Registry(path).close()
    assert {"archived", "tags"} <= columns(path, "experiments")
    assert columns(path, "notes") == {"id", "experiment_id", "created", "text", "uuid"}
    assert columns(path, "metrics") == {"id", *registry_module.METRIC_COLUMNS}
    assert set(registry_module.NOTE_COLUMNS) == columns(path, "notes") - {"id"}
    assert {"archived", "tags"} <= columns(path, "experiment_summary")
    with sqlite3.connect(path) as conn:
        indexes = [row[1] for row in conn.execute("pragma index_list(metrics)")]
        indexed = [[c[2] for c in conn.execute(f"pragma index_info({name})")] for name in indexes]
    assert ["experiment_id", "track", "step"] in indexed
    assert "m004_lifecycle_metrics" in KNOWN_MIGRATIONS and KNOWN_MIGRATIONS[-1] == migrations.NAMES[-1]


def test_an_m003_database_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    with sqlite3.connect(path) as conn:
        migrations.migration_set().apply(Database(conn), stop_before="m004_lifecycle_metrics")
        conn.execute("insert into experiments (id, description, config_json) values ('EXP-001', 'old', '{}')")
    assert "archived" not in columns(path, "experiments")
    with Registry(path, create=False) as reader:  # read-only: migrated on a copy in memory, the file untouched
        assert reader.summary_rows()[0]["archived"] == 0 and reader.summary_rows()[0]["tags"] == []
    assert "archived" not in columns(path, "experiments")
    with Registry(path) as registry:
        [row] = registry.experiments()
        assert (row["id"], row["description"], row["archived"], row["tags"]) == ("EXP-001", "old", 0, [])
        assert registry.notes("EXP-001") == [] and registry.metrics("EXP-001") == []
    assert "metrics" in {r[0] for r in sqlite3.connect(path).execute("select name from sqlite_master")}


def test_metrics_rows_are_added_cut_back_and_read_per_track(tmp_path: Path) -> None:
    with Registry(tmp_path / "registry.db") as registry:
        registry.add_experiment("EXP-001", description="d", config_json="{}", config_hash="h")
        registry.add_experiment("EXP-002", description="d", config_json="{}", config_hash="h")
        for step in (1, 2, 3, 4):
            registry.add_metrics("EXP-001", "train", 1, {"step": step, "train_loss": 6.0 - step, "lr": 1e-3})
        registry.add_metrics("EXP-001", "train", 1, RECORD)  # an evaluation at step 4 beside the log record
        registry.add_metrics("EXP-001", "overfit", 2, {"step": 3, "train_loss": 0.1})
        registry.add_metrics("EXP-002", "train", 3, {"step": 9, "train_loss": 1.0})
        rows = registry.metrics("EXP-001")
        assert [r["step"] for r in rows] == [1, 2, 3, 4, 4] and rows[0]["eval_loss"] is None
        assert rows[-1]["perplexity"] == 200.3 and rows[-1]["run_id"] == 1 and rows[-1]["track"] == "train"
        registry.cut_metrics("EXP-001", "train", 2)  # a resume from step 2
        assert [r["step"] for r in registry.metrics("EXP-001")] == [1, 2]
        assert [r["step"] for r in registry.metrics("EXP-001", "overfit")] == [3]
        assert [r["step"] for r in registry.metrics("EXP-002")] == [9]
        with pytest.raises(ValueError, match="unknown column 'colour'"):
            registry.add_metrics("EXP-001", "train", 1, {"step": 5, "colour": "red"})
        with pytest.raises(ValueError, match="unknown column 'experiment_id'"):
            registry.add_metrics("EXP-001", "train", 1, {"step": 5, "experiment_id": "EXP-002"})
        with pytest.raises(ValueError, match="unknown track"):
            registry.add_metrics("EXP-001", "eval", 1, {"step": 5})
        assert [r["step"] for r in registry.metrics("EXP-001")] == [1, 2]


# ---------------------------------------------------------------- rm


def test_rm_removes_rows_and_files_and_never_another_experiment(home: Path) -> None:
    register(home, "EXP-001", "EXP-0010", "EXP-002")  # EXP-0010's files start with "EXP-001"
    mine, theirs = files_of(home, "EXP-001"), files_of(home, "EXP-0010") + files_of(home, "EXP-002")
    result = cli(home, "rm", "EXP-001", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    removed = json_out(result)
    assert list(removed["rows"].items()) == [
        ("experiments", 1),
        ("runs", 1),
        ("verifications", 1),
        ("checkpoints", 1),
        ("notes", 1),
        ("metrics", 1),
    ]
    assert "checkpoints/EXP-001/" in removed["files"] and "locks/EXP-001.lock" in removed["files"]
    assert not any(path.exists() for path in mine) and not (home / "checkpoints" / "EXP-001").exists()
    assert all(path.exists() for path in theirs)
    with Registry(home / "registry.db") as registry:
        assert registry.row_counts("EXP-001") == {}
        for other in ("EXP-0010", "EXP-002"):
            assert registry.row_counts(other) == {
                t: 1 for t in ("metrics", "notes", "checkpoints", "verifications", "runs", "experiments")
            }
    listed = [row["id"] for row in json_out(cli(home, "show", "--json"))["experiments"]]
    assert "EXP-001" not in listed and {"EXP-0010", "EXP-002"} <= set(listed)
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 2  # gone: unknown now


def test_rm_keep_files_removes_only_the_rows(home: Path) -> None:
    register(home, "EXP-001")
    kept = files_of(home, "EXP-001")
    result = cli(home, "rm", "EXP-001", "--keep-files", "-y")
    assert result.exit_code == 0 and "files kept" in result.stdout
    assert all(path.exists() for path in kept)
    with Registry(home / "registry.db") as registry:
        assert registry.row_counts("EXP-001") == {}


def test_rm_asks_on_a_terminal_and_refuses_off_one_without_yes(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    register(home, "EXP-001")
    refused = cli(home, "rm", "EXP-001")
    assert refused.exit_code == 2 and "pass --yes" in refused.stderr and refused.stderr.count("\n") == 1
    monkeypatch.setattr(commands_lifecycle, "_interactive", lambda: True)
    declined = CliRunner().invoke(app, ["--home", str(home), "rm", "EXP-001"], input="n\n")
    assert declined.exit_code == 3 and "remove EXP-001: rows experiments 1, runs 1," in declined.stderr
    assert "files experiments/EXP-001.yaml" in declined.stderr and "nothing was removed" in declined.stderr
    assert (home / "experiments" / "EXP-001.yaml").exists()
    accepted = CliRunner().invoke(app, ["--home", str(home), "rm", "EXP-001"], input="y\n")
    assert accepted.exit_code == 0 and not (home / "experiments" / "EXP-001.yaml").exists()


def test_rm_refuses_while_the_experiment_is_locked(home: Path) -> None:
    register(home, "EXP-001")
    code = (
        "import time\nfrom pathlib import Path\nfrom octlm.store.locking import ExperimentLock\n"
        f"with ExperimentLock(Path({str(home / 'locks' / 'EXP-001.lock')!r}), 'EXP-001'):\n"
        "    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for extra in ([], ["--keep-files"]):
            result = cli(home, "rm", "EXP-001", "--yes", *extra)
            assert result.exit_code == 3 and f"pid {holder.pid}" in result.stderr, result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert (home / "experiments" / "EXP-001.yaml").exists()
    with Registry(home / "registry.db") as registry:
        assert registry.row_counts("EXP-001")["runs"] == 1
        running = registry.start_run("EXP-001", "train")  # this process: alive
        assert cli(home, "rm", "EXP-001", "--yes").exit_code == 3
        registry.finish_run(running, "stopped")
    assert cli(home, "rm", "EXP-001", "--yes").exit_code == 0


# ---------------------------------------------------------------- archive, tag, note


def test_archive_and_unarchive(home: Path) -> None:
    first = cli(home, "archive", "EXP-001", "--json")  # registered on the way
    assert first.exit_code == 0 and json_out(first) == {"id": "EXP-001", "archived": True, "changed": True}
    assert "EXP-001 was archived already" in cli(home, "archive", "EXP-001").stdout
    with Registry(home / "registry.db", create=False) as registry:
        assert registry.summary_rows()[0]["archived"] == 1
    assert cli(home, "unarchive", "EXP-001").stdout.strip() == "unarchived EXP-001"
    with Registry(home / "registry.db", create=False) as registry:
        assert registry.experiment("EXP-001")["archived"] == 0
    unknown = cli(home, "archive", "EXP-404")
    assert unknown.exit_code == 2 and "unknown experiment EXP-404" in unknown.stderr


def test_tags_are_added_and_removed(home: Path) -> None:
    assert cli(home, "tag", "EXP-001", "+baseline", "+lr", "wide").stdout.strip() == "baseline lr wide"
    removed = json_out(cli(home, "tag", "EXP-001", "+day1", "--json", "--", "-lr"))
    assert removed == {"id": "EXP-001", "tags": ["baseline", "day1", "wide"], "added": ["day1"], "removed": ["lr"]}
    assert cli(home, "tag", "EXP-001").stdout.strip() == "baseline day1 wide"
    with Registry(home / "registry.db", create=False) as registry:
        assert registry.summary_rows()[0]["tags"] == ["baseline", "day1", "wide"]
    bad = cli(home, "tag", "EXP-001", "+two words")
    assert bad.exit_code == 2 and "a tag is" in bad.stderr


def test_notes_are_added_and_listed(home: Path) -> None:
    assert cli(home, "note", "EXP-001", "lr", "looks", "high").stdout.strip() == "noted EXP-001 (note 1)"
    assert json_out(cli(home, "note", "EXP-001", "second", "--json"))["text"] == "second"
    listed = json_out(cli(home, "note", "EXP-001", "--json"))["notes"]
    assert [n["text"] for n in listed] == ["lr looks high", "second"]
    assert "lr looks high" in cli(home, "note", "EXP-001").stdout
    assert cli(home, "note", "EXP-001", " ").exit_code == 2
    assert cli(home, "note", "EXP-404", "x").exit_code == 2


# ---------------------------------------------------------------- doctor


def test_doctor_removes_the_rows_of_an_experiment_without_config(home: Path) -> None:
    from octlm.tasks import doctor

    register(home, "EXP-001", "EXP-002")
    (home / "experiments" / "EXP-002.yaml").unlink()
    checked = doctor.run(Home(home))
    [problem] = [p for p in checked["problems"] if p["kind"] == "row without config"]
    assert problem["repairable"] and not problem["repaired"]
    assert checked["advice"] == "problems found: run `octlm doctor --repair`"
    repaired = json_out(cli(home, "doctor", "--repair", "--json"))
    assert repaired["healthy"] and repaired["advice"] == "healthy"
    with Registry(home / "registry.db") as registry:
        assert registry.row_counts("EXP-002") == {} and registry.row_counts("EXP-001")["notes"] == 1
    assert cli(home, "doctor").exit_code == 0


def test_doctor_recommends_repair_only_when_it_can_help(home: Path) -> None:
    from octlm.tasks import doctor

    assert cli(home, "tag", "EXP-001").exit_code == 0  # registered: the one problem is EXP-002's file
    (home / "experiments" / "EXP-002.yaml").write_text("model: {colour: red}\n")
    report = doctor.run(Home(home))
    assert [p["kind"] for p in report["problems"]] == ["invalid config"]
    assert not report["problems"][0]["repairable"]
    assert "--repair cannot fix" in report["advice"] and "run `octlm doctor --repair`" not in report["advice"]
    assert doctor.advice([]) == "healthy"


@pytest.mark.slow
def test_a_run_rebuilt_before_the_last_step_reads_stopped(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    for path in home.glob("registry.db*"):
        path.unlink()
    assert json_out(cli(home, "doctor", "--repair", "--json"))["healthy"]
    [run] = json_out(cli(home, "show", "EXP-001", "--json"))["runs"]
    assert (run["status"], run["end_step"], run["target_step"]) == ("stopped", 4, 12)


# ---------------------------------------------------------------- new --from, fingerprints, forks


def test_new_from_describes_its_parent_and_warns_about_a_twin(home: Path) -> None:
    varied = cli(home, "new", "--from", "EXP-001", "--set", "training.learning_rate=1e-3")
    assert varied.exit_code == 0 and "warning" not in varied.stderr
    described = yaml.safe_load((home / "experiments" / "EXP-002.yaml").read_text())["description"]
    assert described == "from EXP-001: training.learning_rate=1e-3"  # as the README shows it
    twin = cli(home, "new", "--from", "EXP-001", "--json")
    assert "octlm: warning: same config fingerprint as EXP-001\n" in twin.stderr
    assert json_out(twin)["same_fingerprint"] == ["EXP-001"] and json_out(twin)["config"]["description"] == (
        "from EXP-001"
    )
    chosen = cli(home, "new", "--from", "EXP-001", "--set", "training.steps=8", "--description", "mine")
    assert chosen.exit_code == 0
    assert yaml.safe_load((home / "experiments" / "EXP-004.yaml").read_text())["description"] == "mine"


def test_init_from_writes_the_checkpoint_path_and_sha256(home: Path) -> None:
    digest = fake_checkpoint(home)
    result = cli(
        home,
        "new",
        "--from",
        "EXP-001",
        "--init-from",
        "EXP-001@4",
        "--with-optimizer",
        "--set",
        "training.steps=24",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    written = yaml.safe_load((home / "experiments" / "EXP-002.yaml").read_text())
    # The fork keeps its own link to the parent's bytes: the parent's retention or rm cannot take it away.
    assert written["init"] == {
        "parent": "EXP-001@4",
        "checkpoint": f"checkpoints/forks/{digest}.pt",
        "sha256": digest,
        "optimizer": True,
        "step": 4,  # with the optimizer, the fork continues the parent's run at its step
    }
    kept = home / "checkpoints" / "forks" / f"{digest}.pt"
    assert kept.read_bytes() == (home / "checkpoints" / "EXP-001" / "step-000004.pt").read_bytes()
    assert written["training"]["steps"] == 24 and written["description"] == "from EXP-001@4: training.steps=24"
    assert "warning" not in result.stderr  # the parent's checkpoint is part of the fingerprint
    alone = cli(home, "new", "--init-from", "EXP-001@4", "--json")  # the parent's config is the base
    assert alone.exit_code == 0 and json_out(alone)["config"]["init"]["optimizer"] is False
    assert json_out(alone)["config"]["model"] == json_out(result)["config"]["model"]
    (home / "checkpoints" / "EXP-001" / "step-000004.pt").unlink()  # the parent's retention takes it
    assert kept.is_file()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--init-from", "EXP-001"], 2, "expected ID@STEP"),
        (["--init-from", "EXP-001@four"], 2, "expected ID@STEP"),
        (["--init-from", "../x@4"], 2, "expected ID@STEP"),
        (["--init-from", "EXP-009@4"], 2, "unknown experiment EXP-009"),
        (["--init-from", "EXP-001@8"], 2, "no checkpoint at step 8; its checkpoints are at steps 4"),
        (["--with-optimizer"], 2, "--with-optimizer goes with --init-from"),
        (["--init-from", "EXP-001@6"], 3, "checksum mismatch"),
    ],
)
def test_init_from_errors_are_one_line(home: Path, args: list[str], code: int, message: str) -> None:
    fake_checkpoint(home)
    fake_checkpoint(home, step=6)
    (home / "checkpoints" / "EXP-001" / "step-000006.pt").write_bytes(b"truncat")
    result = cli(home, "new", "--from", "EXP-001", *args)
    assert (result.exit_code, result.stderr.count("\n")) == (code, 1) and message in result.stderr, result.stderr
    assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]


def test_lifecycle_commands_never_import_torch() -> None:
    code = "import sys, octlm.tasks.lifecycle, octlm.cli.commands.lifecycle; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_metrics_table_holds_json_free_numbers(tmp_path: Path) -> None:
    with Registry(tmp_path / "registry.db") as registry:
        registry.add_experiment("EXP-001", description="d", config_json="{}", config_hash="h")
        registry.add_metrics("EXP-001", "train", None, {"step": 1, "train_loss": float("nan")})
        [row] = registry.metrics("EXP-001")
    assert row["train_loss"] is None and json.dumps(row)


def test_malformed_tags_read_as_empty_and_doctor_clears_them(home: Path) -> None:
    from octlm.tasks import doctor

    assert cli(home, "tag", "EXP-001", "+a").exit_code == 0
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update experiments set tags = '[\"a'")
    with Registry(home / "registry.db", create=False) as registry:
        assert registry.experiment("EXP-001")["tags"] == [] and registry.summary_rows()[0]["tags"] == []
        assert registry.malformed_cells() == [("experiments", "EXP-001", "tags")]
    report = doctor.run(Home(home), repair=True)
    assert report["healthy"] and [p["kind"] for p in report["problems"]] == ["malformed registry cell"]
    assert cli(home, "tag", "EXP-001", "+b").stdout.strip() == "b"
