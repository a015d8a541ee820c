"""Issue 48 items 4 and 5: runs in the user's tracker, read back by the tracker's own reader. The family's one test
file (docs/modules.md, "Families"), parametrized by ``exchange.trackers.TRACKERS``: each row's files, written by
``octlm export NAME`` from two experiments like the README's (one, then another ``--from`` it with another learning
rate) and from a sweep of two learning rates by two seeds, are read back with the reader the row names (TensorBoard's
event accumulator; trackio's CSV importer) and hold every scalar of every run file, at the precision the row says,
each run in the folder its seed replicates share; a row that keeps the config holds it, and the fingerprints
``show`` says. A row that writes live (``training.tensorboard``) does so while training, across a resume that cuts
the run file back, without changing a bit of the run, and a writer that fails warns once and the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_training_state, cli, holds, json_out, records, write_corpus, write_experiment

from octlm.config import flatten
from octlm.exchange.trackers import SCALARS, TRACKERS, ReadBack, Tracker
from octlm.store.registry import Registry
from octlm.store.runs import runfile
from octlm.train import checkpoint

pytestmark = pytest.mark.slow
os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="trackio-"))  # trackio fixes its store when imported
README = ("EXP-001", "EXP-002")
LIVE = [name for name, row in TRACKERS.items() if row.live]
WANTED = set(SCALARS.values())  # what every tracker carries: losses, rate, norm, errors, bits per byte, tokens/s


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EXP-001 and EXP-002 (from it, another learning rate) as the README makes them; the sweep ``lr`` (two learning
    rates by two seeds) worked to its end; LIVE-001 with live events, trained to 12 and resumed from step 8."""
    home = write_corpus(tmp_path_factory.mktemp("trackers") / "home")
    write_experiment(home, "EXP-001")
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    lower = ("--set", "training.learning_rate=1e-3", "--set", "training.min_learning_rate=1e-4")
    made = cli(home, "new", "EXP-002", "--from", "EXP-001", *lower)
    assert made.exit_code == 0 and cli(home, "train", "EXP-002", "-q").exit_code == 0
    grid = ("--grid", "training.learning_rate=1e-3,3e-3", "--seeds", "2")
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", *grid).exit_code == 0
    assert cli(home, "work", "lr", "--until-empty", "-q").exit_code == 0
    write_experiment(home, "LIVE-001", training={"tensorboard": True, "log_interval": 2})
    assert cli(home, "train", "LIVE-001", "-q").exit_code == 0
    assert cli(home, "resume", "LIVE-001", "--step", "8", "-q").exit_code == 0  # the run file cut back to step 8
    return home


def float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def expected(home: Path, experiment_id: str, row: Tracker, fields: set[str]) -> dict[str, list[tuple[int, float]]]:
    """The run file's numbers of ``fields`` by step, as the row's tool keeps them."""
    kept: dict[str, list[tuple[int, float]]] = {}
    for record in runfile.read(home / "runs" / f"{experiment_id}.jsonl"):
        for field in fields:
            value = record.get(field)
            if isinstance(value, (int, float)):
                kept.setdefault(field, []).append((record["step"], float32(value) if row.bits == 32 else float(value)))
    return kept


def export(home: Path, name: str, out: Path, *names: str) -> dict[str, Any]:
    result = cli(home, "export", name, *names, "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    said = json_out(result)
    holds(said, "octlm export tensorboard|csv ID|SWEEP... -o DIR --json")
    for run in said["runs"]:
        holds(run, "octlm export tensorboard|csv ID|SWEEP... -o DIR --json: each of runs")
    assert sorted(f for run in said["runs"] for f in run["files"]) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
    )
    return said


def holds_run_files(home: Path, row: Tracker, read: dict[str, ReadBack], said: dict[str, Any]) -> None:
    """Every run of the export read back as the run file says it, in its group's folder; with the config, the
    fingerprints of ``show`` as text."""
    assert sorted(read) == sorted(f"{run['group']}/{run['id']}" for run in said["runs"])
    for run in said["runs"]:
        found = read[f"{run['group']}/{run['id']}"]
        assert WANTED <= set(found["scalars"]), WANTED - set(found["scalars"])
        assert found["scalars"] == expected(home, run["id"], row, set(found["scalars"])), run["id"]
        assert run["records"] == len(runfile.read(home / "runs" / f"{run['id']}.jsonl"))
        if row.keeps_config:
            config = json_out(cli(home, "show", run["id"], "--json"))
            for key, value in flatten(config["config"]).items():
                value = json.dumps(value) if isinstance(value, list) else value  # a list as its JSON text
                assert (found["config"] or {}).get(key) == value, key
            assert all(str(value) in found["text"]["octlm/fingerprints"] for value in config["fingerprints"].values())


@pytest.mark.parametrize("name", list(TRACKERS))  # every member of the table: a new one is tested without a line here
def test_every_tracker_reads_back_the_run_files_of_two_experiments_and_a_sweep(
    name: str, trained: Path, tmp_path: Path
) -> None:
    row = TRACKERS[name]
    said = export(trained, name, tmp_path / "readme", *README)
    holds_run_files(trained, row, row.read(tmp_path / "readme"), said)
    groups = {run["id"]: run["group"] for run in said["runs"]}
    assert groups == {
        "EXP-001": "training.learning_rate=0.003,training.min_learning_rate=0.0003",
        "EXP-002": "training.learning_rate=0.001,training.min_learning_rate=0.0001",
    }
    said = export(trained, name, tmp_path / "sweep", "lr")
    holds_run_files(trained, row, row.read(tmp_path / "sweep"), said)
    with Registry(trained / "registry.db") as registry:
        trials = registry.trials(registry.sweep("lr")["id"])  # type: ignore[index]
    by_config = {t["experiment_id"]: t["group_key"] for t in trials}
    folders = {run["id"]: run["group"] for run in said["runs"]}
    assert sorted(folders) == sorted(by_config) and len(set(folders.values())) == len(set(by_config.values())) == 2
    for a in folders:  # seed replicates in one folder, named by the key the sweep varies; other configs apart
        assert all((folders[a] == folders[b]) == (by_config[a] == by_config[b]) for b in folders)
        assert folders[a].startswith("training.learning_rate=")


@pytest.mark.parametrize("name", LIVE)
def test_live_events_are_the_exported_ones_across_a_resume_and_change_no_bit(
    name: str, trained: Path, tmp_path: Path
) -> None:
    """LIVE-001 wrote its events while it trained, then again from step 8 on resuming (its first file's steps 10 and
    12 hidden by the resume's purge, as the run file was cut): read back, they are the run file's, once a step, and
    what the export writes afterwards. A twin without the key trains the same bits; a writer that cannot write warns
    once and its run is the twin's. ``train --restart`` and ``rm`` take the events with the run."""
    row = TRACKERS[name]
    live = trained / "runs" / "tensorboard"
    assert len(list((live / "LIVE-001").iterdir())) == 2  # one file a session
    read = row.read(live)
    said = export(trained, name, tmp_path / "out", "LIVE-001")
    again = row.read(tmp_path / "out")
    assert list(read) == ["LIVE-001"] and read["LIVE-001"] == again[f"{said['runs'][0]['group']}/LIVE-001"]
    assert read["LIVE-001"]["scalars"] == expected(trained, "LIVE-001", row, set(read["LIVE-001"]["scalars"]))
    for twin, tensorboard in (("LIVE-002", False), ("LIVE-003", True)):
        write_experiment(trained, twin, training={"tensorboard": tensorboard, "log_interval": 2})
    (live / "LIVE-003").write_text("a file where the writer's folder goes")
    assert cli(trained, "train", "LIVE-002", "-q").exit_code == 0
    failing = cli(trained, "train", "LIVE-003")
    assert failing.exit_code == 0 and failing.stderr.count("training.tensorboard:") == 1, failing.stderr
    assert "the run goes on, unchanged" in failing.stderr and str(live / "LIVE-003") in failing.stderr
    for twin in ("LIVE-001", "LIVE-003"):  # the writer working (across a resume), and failing
        assert records(trained, twin) == records(trained, "LIVE-002")
        for step in (8, 12):
            ours = checkpoint.read(trained / "checkpoints" / twin / f"step-{step:06d}.pt")
            assert_same_training_state(
                ours, checkpoint.read(trained / "checkpoints" / "LIVE-002" / f"step-{step:06d}.pt")
            )
    assert cli(trained, "train", "LIVE-001", "--restart", "--yes", "-q").exit_code == 0  # the old events go with it
    assert len(list((live / "LIVE-001").iterdir())) == 1
    assert cli(trained, "rm", "LIVE-001", "--yes").exit_code == 0 and not (live / "LIVE-001").exists()


@pytest.mark.parametrize("name", list(TRACKERS))
def test_each_tracker_is_a_subcommand_that_needs_its_own_packages_and_refuses_in_one_line(
    name: str, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``octlm export NAME`` carries the row's help (and the generated reference does); the trackers extra names the
    packages its writer needs, the dev extra those of its reader; without a package the row needs, one line names
    the trackers extra and nothing is written; a name that is neither an ID nor a sweep, an ID
    never trained and a folder that is not empty are refused in one line, nothing written."""
    row, repo = TRACKERS[name], Path(__file__).resolve().parents[2]
    help_text = " ".join(cli(trained, "export", name, "-h").stdout.split())
    reference = (repo / "docs" / "reference" / "commands.md").read_text()
    assert row.help in help_text and row.help in " ".join(reference.split())
    extras = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert all(any(dep.startswith(p) for dep in extras["trackers"]) for p in row.needs)  # what users install
    assert all(any(dep.startswith(p) for dep in extras["dev"] + extras["trackers"]) for p in row.reader_needs)
    real = importlib.util.find_spec
    for package in row.needs:
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda wanted, *a, p=package: None if wanted == p else real(wanted, *a)
        )
        result = cli(trained, "export", name, "EXP-001", "-o", str(tmp_path / "refused"))
        assert (result.exit_code, result.stderr.count("\n")) == (2, 1) and "octlm[trackers]" in result.stderr
        monkeypatch.undo()
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("mine")
    write_experiment(trained, "EXP-009")  # never trained
    cases = [
        (("nosuch", "-o", str(tmp_path / "refused")), 2, "neither an experiment ID nor a sweep (sweeps: lr)"),
        (("EXP-009", "-o", str(tmp_path / "refused")), 2, "EXP-009 has no records yet"),
        (("EXP-404", "-o", str(tmp_path / "refused")), 2, "unknown experiment EXP-404"),
        (("EXP-001", "-o", str(full)), 3, "not empty: give --force"),
    ]
    for args, code, message in cases:
        result = cli(trained, "export", name, *args)
        assert (result.exit_code, result.stderr.count("\n")) == (code, 1) and message in result.stderr, result.stderr
    assert not (tmp_path / "refused").exists() and [p.name for p in full.iterdir()] == ["mine.txt"]
