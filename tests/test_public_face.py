"""octlm's face from Python (``octlm.load``, ``octlm.runs``), used the way the README shows; and the config read
once on the way from ``octlm train`` to its checkpoints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli

import octlm
from octlm.core.records import RUN_RECORD_FIELDS


@pytest.fixture
def trained(home: Path) -> Path:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    return home


@pytest.mark.slow
def test_load_and_runs_as_the_readme_shows(trained: Path) -> None:
    import torch

    model, tokenizer, config = octlm.load("EXP-001", home=trained)
    ids = tokenizer.encode("The quick brown fox", add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))
    assert logits.shape == (1, len(ids), config.tokenizer.vocab_size)
    assert config.id == "EXP-001" and config.training.steps == 12 and not model.training
    earlier, _, _ = octlm.load("EXP-001", step=8, home=trained)
    assert not torch.equal(earlier.embedding.weight, model.embedding.weight)
    records = octlm.runs("EXP-001", home=trained)
    assert [r["step"] for r in records if "eval_loss" in r] == [4, 8, 12]
    assert all(set(r) <= set(RUN_RECORD_FIELDS) for r in records)


@pytest.mark.slow
def test_errors_are_octlm_errors_with_one_line(trained: Path) -> None:
    with pytest.raises(octlm.BadInput, match="unknown experiment EXP-404"):
        octlm.load("EXP-404", home=trained)
    with pytest.raises(octlm.Refused, match="no checkpoint at step 5"):
        octlm.load("EXP-001", step=5, home=trained)
    with pytest.raises(octlm.BadInput, match="malformed experiment ID"):
        octlm.runs("../etc", home=trained)


def test_importing_octlm_loads_no_torch() -> None:
    code = "import sys, octlm; print('torch' in sys.modules, sorted(octlm.__all__))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split(" ", 1)[0] == "False", done.stdout


@pytest.mark.slow
def test_train_reads_the_config_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Profile pinning, the rank check, the estimate and the run all use the one config the command loaded."""
    from octlm.store import experiments

    loads: list[str] = []
    original = experiments.load

    def counted(where, experiment_id):
        loads.append(experiment_id)
        return original(where, experiment_id)

    monkeypatch.setattr(experiments, "load", counted)
    for command in (
        ("train", "EXP-001", "--until", "4"),
        ("resume", "EXP-001"),
        ("overfit", "EXP-001", "--max-loss", "100"),
    ):
        loads.clear()
        result = cli(home, *command, "-q")
        assert result.exit_code == 0, result.stderr
        assert loads == ["EXP-001"], command


def test_the_version_has_one_owner_and_pyproject_agrees() -> None:
    """octlm's version lives in core (every layer records it; core imports nothing of octlm), and is the package's."""
    import tomllib

    import octlm
    from octlm.core import provenance

    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]
    assert octlm.__version__ == provenance.__version__ == declared
