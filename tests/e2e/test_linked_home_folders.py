"""Issue 25 item 2: a home folder that is a symbolic link (``checkpoints/<ID>``, ``runs``, ``locks``,
``experiments``) or resolves outside the home is refused before anything is written or deleted there: ``train
--restart`` once deleted ``step-*.pt`` files outside the home through a linked ``checkpoints/<ID>``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import cli

SHORT = ("--until", "4", "-q")


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, (result.stdout, result.stderr)
    return lines[0]


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_restart_through_a_linked_checkpoint_folder_deletes_nothing_outside(home: Path, tmp_path: Path) -> None:
    assert cli(home, "train", "EXP-001", *SHORT).exit_code == 0
    outside = tmp_path / "elsewhere"
    shutil.move(home / "checkpoints" / "EXP-001", outside)
    (home / "checkpoints" / "EXP-001").symlink_to(outside, target_is_directory=True)
    before = listing(outside)
    assert any(name.startswith("step-") for name in before)
    result = cli(home, "train", "EXP-001", "--restart", "--yes", *SHORT)
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert "checkpoints/EXP-001" in line and "symbolic link" in line
    assert listing(outside) == before


@pytest.mark.parametrize("name", ["runs", "locks", "experiments", "checkpoints"])
def test_a_linked_home_folder_is_refused_before_training_writes(home: Path, tmp_path: Path, name: str) -> None:
    outside = tmp_path / f"outside-{name}"
    if (home / name).exists():
        shutil.move(home / name, outside)
    else:
        outside.mkdir()
    (home / name).symlink_to(outside, target_is_directory=True)
    before = listing(outside)
    result = cli(home, "train", "EXP-001", *SHORT)
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert name in one_line(result) and "symbolic link" in one_line(result)
    assert listing(outside) == before
