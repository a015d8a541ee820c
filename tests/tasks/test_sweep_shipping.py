"""``sweep pack`` / ``sweep unpack`` (issue 27): a sweep's trials split into shards for node-local homes, worked
there, shipped back and merged by the sweep's UUID; the same folder twice changes nothing; bad folders get one
line. Real homes, real registries, real workers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, json_out, octlm, write_corpus, write_experiment

from octlm.core import layout
from octlm.train import checkpoint

pytestmark = pytest.mark.slow
TINY = {"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1}


def rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql).fetchall()


def final(home: Path, experiment_id: str) -> checkpoint.Record:
    step, path = layout.checkpoints(home / "checkpoints" / experiment_id)[-1]
    return checkpoint.read(path)


def test_a_sweep_shipped_in_shards_to_node_homes_and_back_merges_every_trial(tmp_path: Path) -> None:
    driver = write_corpus(tmp_path / "driver")
    write_experiment(driver, training=TINY, checkpoint={"interval": 2, "keep": 10})
    made = cli(driver, "sweep", "new", "lr", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,3e-3")
    assert made.exit_code == 0, made.stderr
    assert cli(driver, "sweep", "new", "lr2", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    ship = tmp_path / "shared" / "lr"
    packed = json_out(cli(driver, "sweep", "pack", "lr", "-o", str(ship), "--shards", "2", "--json"))
    assert packed["folders"] == [str(ship / "shard-0"), str(ship / "shard-1")]
    assert sorted(p.name for p in (ship / "shard-1").iterdir()) == ["EXP-003.tar", "sweep.json"]
    for grow in (("retry", "lr"), ("extend", "lr", "--seeds", "2")):  # issue 36: not while its trials are away
        refused = cli(driver, "sweep", *grow)
        assert refused.exit_code == 3 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"sweep lr is shipped to {ship}" in refused.stderr and "octlm sweep unpack" in refused.stderr
    for index in (0, 1):
        node = write_corpus(tmp_path / f"node-{index}")  # a node-local home: the data, no registry yet
        folder = str(ship / f"shard-{index}")
        assert octlm(node, "sweep", "unpack", folder).returncode == 0
        assert cli(node, "sweep", "retry", "lr").exit_code == 0  # the mark is the driver's, not shipped with it
        again = octlm(node, "sweep", "unpack", folder)
        assert again.returncode == 0 and "nothing changed" in again.stderr
        done = octlm(node, "work", "lr", "--threads", "1", "--until-empty", "-q")
        assert done.returncode == 0, done.stderr
        assert rows(node, "select experiment_id, status from sweep_trials") == [(f"EXP-00{2 + index}", "done")]
        assert octlm(node, "sweep", "pack", "lr", "-o", folder).returncode == 0  # back, for the driver
    for index in (0, 1):
        merged = json_out(cli(driver, "sweep", "unpack", str(ship / f"shard-{index}"), "--json"))
        assert merged["trials"] == {f"EXP-00{2 + index}": "further"} and merged["changed"]
        assert cli(driver, "sweep", "retry", "lr").exit_code == (3 if index == 0 else 0)  # until every shard is back
    status = json_out(cli(driver, "sweep", "status", "lr", "--json"))
    assert status["complete"] and all(t["step"] == 4 and t["value"] is not None for t in status["trials"])
    assert_same_training_state(final(driver, "EXP-003"), final(tmp_path / "node-1", "EXP-003"))
    unchanged = cli(driver, "sweep", "unpack", str(ship / "shard-0"))
    assert unchanged.exit_code == 0 and "1 kept; nothing changed" in unchanged.stderr
    assert rows(driver, "select count(*) from sweeps") == [(2,)]  # lr2 untouched, lr not doubled


def test_shipping_refuses_what_it_cannot_do_in_one_line(home: Path, tmp_path: Path) -> None:
    halving = ("--grid", "training.learning_rate=1e-3,3e-3", "--halving", "4,12", "--keep", "0.5")
    assert cli(home, "sweep", "new", "sh", "--from", "EXP-001", *halving).exit_code == 0
    split = cli(home, "sweep", "pack", "sh", "-o", str(tmp_path / "x"), "--shards", "2")
    assert split.exit_code == 2 and "ship it whole" in split.stderr and not (tmp_path / "x").exists()
    assert cli(home, "sweep", "pack", "nope", "-o", str(tmp_path / "y")).exit_code == 2
    not_one = cli(home, "sweep", "unpack", str(tmp_path))
    assert not_one.exit_code == 2 and "not a sweep written by `octlm sweep pack`" in not_one.stderr
    assert len(not_one.stderr.strip().splitlines()) == 1
    other = write_corpus(tmp_path / "other")
    write_experiment(other)
    assert cli(other, "sweep", "new", "sh", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    assert cli(home, "sweep", "pack", "sh", "-o", str(tmp_path / "whole")).exit_code == 0
    clash = cli(other, "sweep", "unpack", str(tmp_path / "whole"))
    assert clash.exit_code == 3, clash.stderr  # the name is another sweep there (or its IDs other experiments)
