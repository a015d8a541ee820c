"""Issue 34 item 2: the samplers' one table (tasks/sweeps/planning/samplers.SAMPLERS). Every member is a choice of
``sweep new --sampler`` (its help and the generated docs/reference/commands.md), is documented in the sweeps
guide, and makes real trials in a real registry through ``sweep new``, counted before they are made."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out, write_corpus, write_experiment

OPTIONS = {  # each sampler's options for a sweep of 4 configurations (the asking one: 2 made now, 2 asked later)
    "grid": ["--grid", "training.learning_rate=1e-3,2e-3,3e-3,4e-3"],
    "random": ["--random", "4", "--range", "training.learning_rate=1e-4:1e-2:log"],
    "tpe": ["--trials", "4", "--parallel", "2", "--range", "training.learning_rate=1e-4:1e-2:log"],
}
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", list(OPTIONS))
def test_every_sampler_of_the_table_is_a_choice_documented_and_makes_trials(name: str, tmp_path: Path) -> None:
    from octlm.tasks.sweeps.planning.samplers import SAMPLERS

    assert list(SAMPLERS) == list(OPTIONS)  # this list and the table agree: a new sampler needs its case here
    sampler = SAMPLERS[name]
    helped = cli(tmp_path, "sweep", "new", "--help").stdout
    assert name in helped.split("--sampler ")[1].split()[0].split("|")  # the option's metavar lists it
    assert f"--sampler {name}" in (DOCS / "guide" / "sweeps.md").read_text() or name in ("grid", "random")
    assert name in (DOCS / "reference" / "commands.md").read_text()
    write_corpus(tmp_path)
    write_experiment(tmp_path, "EXP-001")
    made = cli(tmp_path, "sweep", "new", name, "--from", "EXP-001", "--sampler", name, *OPTIONS[name], "--json")
    assert made.exit_code == 0, made.stderr
    said = json_out(made)
    assert said["spec"]["sampler"] == name
    rates = {trial["params"]["training.learning_rate"] for trial in said["trials"]}
    assert len(rates) == len(said["trials"]) == (2 if sampler.asks else 4)
    assert all(1e-4 <= rate <= 1e-2 for rate in rates)


def test_a_sampler_not_in_the_table_is_one_line(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    write_experiment(tmp_path, "EXP-001")
    made = cli(tmp_path, "sweep", "new", "x", "--from", "EXP-001", "--sampler", "cmaes", "--seeds", "2")
    assert made.exit_code == 2
    assert "--sampler cmaes: choose one of grid, random, tpe" in made.stderr
