"""Issue 50 item 1: canonical pieces by default. ``octlm new`` (every preset, ``--from``, ``--seeds``, a sweep's
trials) writes ``training.micro_batches`` as the largest power of two that divides the batch and is at most 4, so a
new experiment continues exactly on 1, 2 or 4 ranks; a copy keeps its parent's pieces while they cut its batch (a
copy of EXP-008, which has none, has none); ``--set`` decides over both; ``show`` says which world sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out, write_corpus, write_experiment

from octlm import config as cfg
from octlm.config.presets import PRESETS
from octlm.core.home import Home
from octlm.store import experiments

REPOSITORY = Path(__file__).resolve().parents[2]


def pieces(home: Path, experiment_id: str) -> int:
    return experiments.load(Home(home), experiment_id).training.micro_batches


def made(home: Path, *args: str) -> str:
    result = cli(home, "new", *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_gives_a_new_experiment_four_pieces_and_show_says_where_it_moves(
    tmp_path: Path, preset: str
) -> None:
    made(tmp_path, "--preset", preset)
    assert pieces(tmp_path, "EXP-001") == 4  # batches of 8, 16, 16 and 32 blocks
    detail = json_out(cli(tmp_path, "show", "EXP-001", "--json"))
    assert detail["world_sizes"] == [1, 2, 4]
    assert detail["moves"] == "continues exactly on 1, 2 or 4 ranks (training.micro_batches 4)"
    assert "world sizes: continues exactly on 1, 2 or 4 ranks" in cli(tmp_path, "show", "EXP-001").stdout


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], 4),
        (["training.batch_size=6"], 2),
        (["training.batch_size=5"], 1),
        (["training.batch_size=2"], 2),
        (["training.batch_size=24"], 4),
        (["training.grad_accum_steps=2"], 0),  # accumulation cuts the batch its own way: no pieces
        (["training.micro_batches=0"], 0),  # off, as asked
        (["training.micro_batches=8"], 8),  # any K, as asked
        (["training.batch_size=6", "training.micro_batches=3"], 3),
    ],
)
def test_the_pieces_follow_the_batch_and_set_decides(tmp_path: Path, overrides: list[str], expected: int) -> None:
    made(tmp_path, *(arg for item in overrides for arg in ("--set", item)))
    assert pieces(tmp_path, "EXP-001") == expected
    assert cfg.new_pieces(8) == 4 and cfg.new_pieces(12) == 4 and cfg.new_pieces(10) == 2 and cfg.new_pieces(7) == 1


def test_a_copy_keeps_its_parents_pieces_while_they_cut_its_batch(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    write_experiment(tmp_path, "EXP-001")  # as the shipped EXP-008: no pieces
    assert pieces(tmp_path, made(tmp_path, "--from", "EXP-001")) == 0
    assert pieces(tmp_path, made(tmp_path, "--from", "EXP-001", "--set", "training.batch_size=8")) == 0
    parent = made(tmp_path, "--set", "training.batch_size=12")  # EXP-004: 4 pieces
    assert pieces(tmp_path, parent) == 4
    assert pieces(tmp_path, made(tmp_path, "--from", parent, "--set", "training.batch_size=24")) == 4  # they fit
    assert pieces(tmp_path, made(tmp_path, "--from", parent, "--set", "training.batch_size=6")) == 2  # they do not
    assert pieces(tmp_path, made(tmp_path, "--from", parent, "--set", "training.grad_accum_steps=3")) == 0
    two = made(tmp_path, "--set", "training.micro_batches=2")
    assert pieces(tmp_path, made(tmp_path, "--from", two, "--set", "training.batch_size=16")) == 2  # the parent's
    detail = json_out(cli(tmp_path, "show", "EXP-001", "--json"))
    assert detail["world_sizes"] is None and "only on the world size it trained on" in detail["moves"]


def test_replicates_and_a_sweeps_trials_have_pieces_that_fit(tmp_path: Path) -> None:
    result = cli(tmp_path, "new", "--seeds", "2", "--set", "training.batch_size=6")
    assert result.exit_code == 0, result.stderr
    assert [pieces(tmp_path, found) for found in result.stdout.split()] == [2, 2]
    base = made(tmp_path)
    grid = ["--grid", "training.batch_size=2,6,16"]
    assert cli(tmp_path, "sweep", "new", "batch", "--from", base, *grid).exit_code == 0
    trials = json_out(cli(tmp_path, "show", "--where", "tags~sweep:batch", "--json"))["experiments"]
    found = {experiments.load(Home(tmp_path), t["id"]).training.batch_size: pieces(tmp_path, t["id"]) for t in trials}
    assert found == {2: 2, 6: 2, 16: 4}


def test_the_shipped_exp_008_keeps_its_config_and_fingerprint() -> None:
    config = experiments.load(Home(REPOSITORY), "EXP-008")
    assert config.training.micro_batches == 0
    assert config.fingerprint == "659b88c4aea86494e43403d12fe222236d6317071b706ea724beed1566db3401"
