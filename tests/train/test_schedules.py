"""Learning-rate schedules: every row of the family's table (config/schedules.SCHEDULES) against its own edges and
keys, wsd's promise and rule, and a wsd run forked in its stable phase with more steps equal to a run started with
them.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, json_out, tiny_config, write_experiment

from octlm.config import TrainingConfig, describe_keys, from_dict
from octlm.config.schedules import EXAMPLE, SCHEDULES, rate_of, wsd
from octlm.core import layout
from octlm.store.runs import runfile
from octlm.train import checkpoint


def final(home: Path, step: int, experiment: str = "EXP-001") -> checkpoint.Record:
    return checkpoint.read(layout.checkpoint_path(home / "checkpoints" / experiment, step))


@pytest.mark.slow
def test_a_wsd_run_forked_in_its_stable_phase_with_more_steps_equals_a_run_started_with_them(home: Path) -> None:
    wsd = {"schedule": "wsd", "decay_fraction": 0.25, "steps": 24, "warmup_steps": 2, "eval_interval": 4}
    kept = {"interval": 4, "keep": 20}
    write_experiment(
        home, "EXP-001", data={"sampling": "epochs"}, model={"dropout": 0.1}, training=wsd, checkpoint=kept
    )
    write_experiment(
        home,
        "EXP-002",
        data={"sampling": "epochs"},
        model={"dropout": 0.1},
        training={**wsd, "steps": 40},
        checkpoint=kept,
    )
    for experiment in ("EXP-001", "EXP-002"):
        assert cli(home, "train", experiment, "-q").exit_code == 0
    made = cli(home, "new", "--init-from", "EXP-001@8", "--with-optimizer", "--set", "training.steps=40", "--json")
    assert made.exit_code == 0, made.stderr
    fork = json_out(made)["id"]
    assert json_out(made)["config"]["init"]["step"] == 8
    assert cli(home, "train", fork, "-q").exit_code == 0
    for step in (12, 16, 20, 24, 28, 32, 36, 40):  # every checkpoint both keep, step for step
        assert_same_training_state(final(home, step, fork), final(home, step, "EXP-002"))
    assert final(home, 40, fork).receipt == final(home, 40, "EXP-002").receipt
    records = [runfile.without_timings(runfile.read(home / "runs" / f"{e}.jsonl")) for e in (fork, "EXP-002")]
    assert records[0] == records[1]


def test_wsd_before_its_decay_does_not_depend_on_the_steps_and_refuses_a_decay_it_cannot_make() -> None:
    """wsd's own promise (a longer budget changes nothing before the decay) and its rule (``wsd_problem``), which
    the config applies through the row: one line naming training.decay_fraction."""
    from octlm.config import from_dict
    from octlm.core.errors import ConfigError

    def rates(steps: int) -> list[float]:
        return [wsd(s, **{**EXAMPLE, "steps": steps}) for s in range(80)]

    assert rates(500) == rates(100)
    for decay_fraction, steps in ((0.0, 100), (0.95, 100)):  # no decay; a decay that begins inside the warmup
        training = {"schedule": "wsd", "steps": steps, "warmup_steps": 10, "decay_fraction": decay_fraction}
        with pytest.raises(ConfigError, match=r"training\.decay_fraction: wsd decays over the last"):
            from_dict(tiny_config(training=training))
    from_dict(tiny_config(training={"schedule": "cosine", "warmup_steps": 10, "decay_fraction": 0.0}))  # wsd's alone


# Each key a row reads, moved so that the config stays valid and far enough that a floor or a clamp binds (the floor
# near the peak): the rates must move with it (the key is read, not named for show).
MOVED = {"steps": 120, "warmup_steps": 12, "learning_rate": 0.5, "min_learning_rate": 0.9, "decay_fraction": 0.3}


@pytest.mark.parametrize("name", list(SCHEDULES))  # every member of the table: a new one is tested without a line here
def test_every_schedule_of_the_table_is_a_documented_choice_that_reads_its_keys_and_meets_its_edges(name: str) -> None:
    """Issue 47 item 1: each row of the schedules' one table (config/schedules.SCHEDULES) is a choice of
    training.schedule whose documentation carries the row's help (``octlm config keys``, docs/reference/config.md);
    its function takes exactly the keys the row names, each of which moves its rates, and no other key does; under
    the family's worked example (``EXAMPLE``) it passes through the row's own ``edges``, never leaves (0, peak] and
    stays at its last value past the last step."""
    row = SCHEDULES[name]
    key = next(key for key in describe_keys() if key["key"] == "training.schedule")
    assert name in key["doc"].split(":")[0] and f"{name} {row.help}" in key["doc"]
    reference = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "config.md").read_text()
    assert row.help in reference
    parameters = inspect.signature(row.rate).parameters
    assert list(parameters)[0] == "step" and set(list(parameters)[1:]) == set(row.keys)
    assert set(row.keys) <= {field.name for field in fields(TrainingConfig)}

    def rates(**changed: float) -> list[float]:
        training = from_dict(tiny_config(training={**EXAMPLE, **changed, "schedule": name})).training
        assert row.problem(training) is None
        return [rate_of(training)(step) for step in range(2 * EXAMPLE["steps"] + 50)]  # past every moved last step

    example = rates()
    for step, rate in row.edges:
        assert example[step] == pytest.approx(rate), step
    assert all(0 < rate <= EXAMPLE["learning_rate"] for rate in example)
    assert len(set(example[EXAMPLE["steps"] :])) == 1  # past the last step, its value there
    for moved, value in MOVED.items():
        assert (rates(**{moved: value}) != example) == (moved in row.keys), moved
    assert set(row.keys) <= set(MOVED)  # a row reading another key adds how to move it to MOVED
