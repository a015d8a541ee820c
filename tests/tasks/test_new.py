"""Issue 47 item 5: ``octlm new``'s work is a use case of ``tasks/lifecycle`` (``new``), not the command's: called
from Python with what the command would parse, it builds the config, checks it and writes and registers the
experiment (or its seed replicates), and says which experiments share its fingerprint; the command only renders."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_corpus

from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.store.experiments import load
from octlm.tasks.lifecycle import NewExperiment, new


def test_new_is_one_use_case_a_caller_other_than_the_command_line_can_call(tmp_path: Path) -> None:
    home = Home(write_corpus(tmp_path))
    first = new(home, NewExperiment(overrides=("training.steps=40",), description="first"))
    assert [c.id for c in first.configs] == ["EXP-001"] and first.twins == []
    assert load(home, "EXP-001") == first.configs[0] and first.configs[0].training.steps == 40
    twin = new(home, NewExperiment(experiment_id="BOX-007", from_id="EXP-001", description="first"))
    assert [c.id for c in twin.configs] == ["BOX-007"] and twin.twins == ["EXP-001"]  # the same fingerprint
    replicates = new(home, NewExperiment(from_id="EXP-001", seeds=3, prefix="R-"))
    seed = first.configs[0].training.seed  # the config's seed, then +1, +2
    assert [(c.id, c.training.seed) for c in replicates.configs] == [
        ("R-001", seed),
        ("R-002", seed + 1),
        ("R-003", seed + 2),
    ]
    assert replicates.twins == [] and all(load(home, c.id) == c for c in replicates.configs)
    with pytest.raises(BadInput, match="--with-optimizer goes with --init-from"):
        new(home, NewExperiment(with_optimizer=True))
    assert sorted(p.stem for p in home.root.joinpath("experiments").iterdir()) == [
        "BOX-007", "EXP-001", "R-001", "R-002", "R-003",
    ]  # fmt: skip
