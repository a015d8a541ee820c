"""An untrusted home runs nothing: its git config, a package planted in the working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, json_out

OCTLM = Path(sys.executable).with_name("octlm")  # the console script, as a user runs it (not `python -m`)


ENV = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}  # one core each: other tests may run beside


def last_run(home: Path) -> dict:
    return json_out(cli(home, "show", "EXP-001", "--json"))["runs"][-1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_homes_git_config_never_runs(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "fsmonitor-ran"
    git = ["git", "-C", str(home), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "experiments", "corpus"], ["commit", "-qm", "home"]):
        subprocess.run([*git, *args], check=True, timeout=30)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30).stdout.strip()
    (home / ".gitattributes").write_text("* filter=evil\n")  # a clean filter that `git status` would run
    for key, value in (("core.fsmonitor", f"touch {marker}"), ("filter.evil.clean", f"touch {marker}; cat")):
        subprocess.run([*git, "config", key, value], check=True, timeout=30)
    (home / "corpus" / "doc0.txt").touch()  # stale stat data: git would re-read the file through the filter
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    assert not marker.exists()
    assert last_run(home)["git_commit"] == head


def test_a_planted_package_in_the_working_directory_never_runs(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "planted-ran"
    planted = tmp_path / "cwd" / "octlm"
    planted.mkdir(parents=True)
    (tmp_path / "cwd" / "octlm_cli").symlink_to(planted)
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (planted / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run(
        [str(OCTLM), "--home", str(home), "verify-resume", "EXP-001", "--split-at", "6", "--json"],
        cwd=planted.parent,
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )
    assert not marker.exists()
    assert done.returncode == 0, done.stderr
    assert json_out(done)["identical"]
