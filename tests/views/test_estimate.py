"""The expected duration said before a long run, from earlier run files on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_experiment

from octlm.core.home import Home
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.views import estimate


def test_the_expected_duration_of_a_long_run(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_experiment(home, "EXP-002")  # the same config fingerprint, registered as train registers it
    with Registry(home / "registry.db") as registry:
        experiments.register(Home(home), registry, experiments.load(Home(home), "EXP-002"))
    for number in range(3, 40):  # a home of many experiments: none of their YAML is read for the estimate
        write_experiment(home, f"EXP-{number:03d}", training={"learning_rate": 1e-3 + number * 1e-6})
    (home / "runs").mkdir()
    (home / "runs" / "EXP-002.jsonl").write_text('{"step": 100, "elapsed_seconds": 180.0}\n')
    folder = home / "checkpoints" / "EXP-002"
    folder.mkdir(parents=True)
    with open(folder / "step-000100.pt", "wb") as handle:
        handle.truncate(146_000_000)
    config = experiments.load(Home(home), "EXP-001")
    parsed: list[str] = []
    real_load = experiments.load
    monkeypatch.setattr(experiments, "load", lambda h, i, *a, **k: parsed.append(i) or real_load(h, i, *a, **k))
    line = estimate.expected(Home(home), config, 0, 10_000)
    assert parsed == []  # the fingerprints come from the registry (issue 34)
    monkeypatch.undo()
    assert line == "10,000 steps at about 1.8 s/step: about 5 h; 146 MB per checkpoint, keeping 3"
    assert estimate.expected(Home(home), experiments.load(Home(home), "EXP-001"), 0, 10) is None  # 18 s is not long
    write_experiment(home, "EXP-040", training={"learning_rate": 1e-3})
    assert (
        estimate.expected(Home(home), experiments.load(Home(home), "EXP-040"), 0, 10_000) is None
    )  # another config: no figure
