"""Learning-rate schedules: their edges, and a wsd run forked in its stable phase with more steps equal to a run
started with them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, json_out, write_experiment

from octlm.core import layout
from octlm.store.runs import runfile
from octlm.train import checkpoint
from octlm.train.schedule import SCHEDULES


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


def test_the_schedules_at_their_edges() -> None:
    from octlm.train.schedule import constant, linear, wsd

    assert wsd(0, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == pytest.approx(0.1)
    assert wsd(79, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == 1.0
    assert wsd(100, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) == pytest.approx(0.1)
    longer = [wsd(s, peak=1.0, floor=0.1, warmup_steps=10, total_steps=500, decay_fraction=0.2) for s in range(80)]
    assert longer == [
        wsd(s, peak=1.0, floor=0.1, warmup_steps=10, total_steps=100, decay_fraction=0.2) for s in range(80)
    ]
    assert linear(10, peak=1.0, floor=0.0, warmup_steps=10, total_steps=110) == 1.0
    assert linear(60, peak=1.0, floor=0.0, warmup_steps=10, total_steps=110) == pytest.approx(0.5)
    assert (
        constant(5, peak=2.0, warmup_steps=10) == pytest.approx(1.2) and constant(50, peak=2.0, warmup_steps=10) == 2.0
    )


@pytest.mark.parametrize("name", list(SCHEDULES))  # every member of the table: a new one is tested without a line here
def test_every_schedule_of_the_table_is_a_choice_documented_and_shaped_as_a_schedule(name: str) -> None:
    """Issue 34 item 2: the schedules' one table (train/schedule.SCHEDULES) against the config's choices and the
    key's documentation (octlm config keys, docs/reference/config.md), and each member's shape: a warmup from
    peak/warmup to the peak, never above the peak nor below the floor, at the floor (or the peak) at the end."""
    from octlm.config import describe_keys
    from octlm.config import from_dict as config_from
    from octlm.config.schema import SCHEDULES as CHOICES

    assert set(SCHEDULES) == set(CHOICES)  # the table and the config's choices agree
    documented = next(key for key in describe_keys() if key["key"] == "training.schedule")["doc"]
    assert name in documented
    keys = {key["key"] for key in describe_keys()}
    assert set(SCHEDULES[name].keys) <= keys
    from conftest import tiny_config

    training = {"schedule": name, "steps": 100, "warmup_steps": 10, "learning_rate": 1.0, "min_learning_rate": 0.1}
    schedule = SCHEDULES[name].build(config_from(tiny_config(training=training)).training)
    rates = [schedule(step) for step in range(120)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(0.1 - 1e-12 <= rate <= 1.0 + 1e-12 for rate in rates)
    assert rates[-1] == pytest.approx(1.0 if name == "constant" else 0.1)
