"""The expected duration said before a long run, from earlier run files on this machine."""

from __future__ import annotations

from pathlib import Path

from conftest import write_experiment

from octlm.core.home import Home
from octlm.store import experiments
from octlm.views import estimate


def test_the_expected_duration_of_a_long_run(home: Path) -> None:
    write_experiment(home, "EXP-002")  # the same config fingerprint
    (home / "runs").mkdir()
    (home / "runs" / "EXP-002.jsonl").write_text('{"step": 100, "elapsed_seconds": 180.0}\n')
    folder = home / "checkpoints" / "EXP-002"
    folder.mkdir(parents=True)
    with open(folder / "step-000100.pt", "wb") as handle:
        handle.truncate(146_000_000)
    line = estimate.expected(Home(home), experiments.load(Home(home), "EXP-001"), 0, 10_000)
    assert line == "10,000 steps at about 1.8 s/step: about 5 h; 146 MB per checkpoint, keeping 3"
    assert estimate.expected(Home(home), experiments.load(Home(home), "EXP-001"), 0, 10) is None  # 18 s is not long
    write_experiment(home, "EXP-003", training={"learning_rate": 1e-3})
    assert (
        estimate.expected(Home(home), experiments.load(Home(home), "EXP-003"), 0, 10_000) is None
    )  # another config: no figure
