"""``octlm verify-run`` of an experiment that does not exist: one line naming it, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

from conftest import cli


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def test_verify_run_of_an_unknown_experiment_says_so_and_writes_nothing(home: Path) -> None:
    before = _tree(home)
    result = cli(home, "verify-run", "EXP-404")
    assert result.exit_code == 2
    assert "unknown experiment EXP-404" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _tree(home) == before  # no registry, no lock file made for it
