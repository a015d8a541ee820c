"""IDs with prefixes: new --id-prefix and OCTLM_ID_PREFIX, through new, train, fork, show and rm."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out, write_experiment


def test_id_prefix_counts_only_its_own_ids(home: Path) -> None:
    write_experiment(home, "BOX-007")
    write_experiment(home, "B-BOX-010")
    assert cli(home, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-008"
    assert cli(home, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-009"
    assert json_out(cli(home, "new", "--id-prefix", "gpu7-", "--json"))["id"] == "gpu7-001"
    assert cli(home, "new").stdout.strip() == "EXP-002"


def test_the_variable_and_the_option(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCTLM_ID_PREFIX", "BOX-")
    assert cli(home, "new").stdout.strip() == "BOX-001"
    assert cli(home, "new", "--id-prefix", "C-").stdout.strip() == "C-001"  # the option wins
    assert cli(home, "new", "EXP-050").stdout.strip() == "EXP-050"  # an ID given is taken as is
    monkeypatch.setenv("OCTLM_ID_PREFIX", "")
    assert cli(home, "new").stdout.strip() == "EXP-051"
    monkeypatch.setenv("OCTLM_ID_PREFIX", "x y")
    assert cli(home, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-002"  # an invalid variable unused


@pytest.mark.parametrize(
    ("args", "variable", "message"),
    [
        (["--id-prefix", "BOX"], None, "--id-prefix: malformed ID prefix 'BOX'"),
        (["--id-prefix", "../"], None, "--id-prefix: malformed ID prefix '../'"),
        ([], "BOX", "OCTLM_ID_PREFIX: malformed ID prefix 'BOX'"),
        (["EXP-009", "--id-prefix", "BOX-"], None, "--id-prefix goes without an ID"),
    ],
)
def test_an_invalid_prefix_is_one_line_and_exit_2(
    home: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], variable: str | None, message: str
) -> None:
    if variable is not None:
        monkeypatch.setenv("OCTLM_ID_PREFIX", variable)
    result = cli(home, "new", *args)
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]
    assert not (home / "registry.db").exists()


@pytest.mark.slow
def test_a_prefixed_id_through_new_train_fork_show_and_rm(home: Path) -> None:
    write_experiment(home, "B-EXP-001", training={"steps": 4})
    assert cli(home, "train", "B-EXP-001", "--until", "4", "-q").exit_code == 0
    assert (home / "checkpoints" / "B-EXP-001" / "step-000004.pt").is_file()
    assert (home / "locks" / "B-EXP-001.lock").exists() and (home / "runs" / "B-EXP-001.jsonl").is_file()
    fork = cli(home, "new", "--init-from", "B-EXP-001@4", "--id-prefix", "B-EXP-", "--json")
    assert fork.exit_code == 0, fork.stderr
    assert json_out(fork)["id"] == "B-EXP-002" and json_out(fork)["config"]["init"]["parent"] == "B-EXP-001@4"
    detail = json_out(cli(home, "show", "B-EXP-001", "--json"))
    assert "B-EXP-001" in str(detail)
    listed = [row["id"] for row in json_out(cli(home, "show", "--json"))["experiments"]]
    assert listed == ["B-EXP-001", "B-EXP-002", "EXP-001"]
    assert cli(home, "show", "EXP-001", "B-EXP-001").exit_code == 0
    assert cli(home, "rm", "B-EXP-001", "--yes").exit_code == 0
    assert not (home / "runs" / "B-EXP-001.jsonl").exists() and (home / "experiments" / "EXP-001.yaml").is_file()
    assert [row["id"] for row in json_out(cli(home, "show", "--json"))["experiments"]] == ["B-EXP-002", "EXP-001"]
