"""The experiment list: --where operators and their strictness, archived experiments hidden unless --all."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import IDS, cli, json_out, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry


def listed(home: Path, *where: str) -> list[str]:
    args = [arg for expression in where for arg in ("--where", expression)]
    result = cli(home, "show", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return [row["id"] for row in json_out(result)["experiments"]]


def test_where_operators(five: Path) -> None:
    assert listed(five, "status=stopped") == ["EXP-004"]
    assert listed(five, "status==interrupted") == ["EXP-003"]
    assert listed(five, "status!=completed") == ["EXP-003", "EXP-004"]
    assert listed(five, "eval_loss==5.96") == IDS  # at the precision written
    assert listed(five, "eval_loss==5.97") == []
    assert listed(five, "train_loss>=6.26", "train_loss<6.3") == ["EXP-003"]
    assert listed(five, "description~TINY") == IDS and listed(five, "id~05") == ["EXP-005"]
    assert listed(five, "training.learning_rate<=0.002") == ["EXP-001", "EXP-002"]


@pytest.mark.parametrize(
    "expression, fragment",
    [
        ("colour=red", "--where colour: unknown key"),
        ("model.colour=1", "--where model.colour: unknown key"),
        ("eval_loss<<4", "malformed value '<4'"),
        ("eval_loss==", "malformed value ''"),
        ("eval_loss", "expected KEY OP VALUE"),
        ("eval_loss<abc", "eval_loss is a number"),
    ],
)
def test_where_is_strict(five: Path, expression: str, fragment: str) -> None:
    result = cli(five, "show", "--where", expression)
    assert result.exit_code == 2 and fragment in result.stderr and result.stdout == ""


def test_archived_hidden_unless_all_and_detail_shows_lifecycle(tmp_path: Path) -> None:
    home = tmp_path / "h"
    write_experiment(home, "EXP-001")
    write_experiment(
        home, "EXP-002", init={"parent": "EXP-001@4", "checkpoint": "checkpoints/forks/x.pt", "sha256": "a" * 64}
    )
    with Registry(home / "registry.db") as registry:
        for experiment_id in ("EXP-001", "EXP-002"):
            register(Home(home), registry, load(Home(home), experiment_id))
    with sqlite3.connect(home / "registry.db") as conn:
        columns = {row[1] for row in conn.execute("pragma table_info(experiments)")}
        if "archived" not in columns:
            pytest.skip("the registry keeps no archived flag yet")
        conn.execute("update experiments set archived = 1, tags = '[\"old\"]' where id = 'EXP-001'")
        conn.execute("update experiments set tags = '[\"baseline\", \"fork\"]' where id = 'EXP-002'")
    with Registry(home / "registry.db") as registry:
        registry.add_note("EXP-002", "lr too high")
    assert listed(home) == ["EXP-002"]
    everything = json_out(cli(home, "show", "--json", "--all"))["experiments"]
    assert [(row["id"], row["archived"], row["tags"]) for row in everything] == [
        ("EXP-001", True, ["old"]),
        ("EXP-002", False, ["baseline", "fork"]),
    ]
    assert listed(home, "tags=baseline") == ["EXP-002"]
    detail = json_out(cli(home, "show", "EXP-002", "--json"))
    assert detail["tags"] == ["baseline", "fork"] and detail["parent"] == "EXP-001@4" and not detail["archived"]
    text = cli(home, "show", "EXP-002").stdout.splitlines()
    assert "  tags: [baseline, fork]" in text and "  forked from: EXP-001@4" in text
    assert any(line.startswith("  note: ") and line.endswith("  lr too high") for line in text)
    assert [note["text"] for note in detail["notes"]] == ["lr too high"]
    assert "  archived: true" in cli(home, "show", "EXP-001").stdout.splitlines()
