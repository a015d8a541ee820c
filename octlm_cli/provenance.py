"""Where a run came from: the command line, the versions, the git state of the home."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from . import __version__


def argv() -> list[str]:
    return [os.path.basename(sys.argv[0]), *sys.argv[1:]]


def git_state(folder: Path) -> tuple[str | None, int | None]:
    """(HEAD commit, 1 if tracked files are modified else 0) of the git checkout holding ``folder``."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return commit.stdout.strip(), int(bool(dirty.stdout.strip()))
    except (OSError, subprocess.SubprocessError):
        return None, None


def run_fields(home_root: Path) -> dict[str, Any]:
    """The provenance columns of a registry run row."""
    commit, dirty = git_state(home_root)
    return {
        "argv": argv(),
        "octlm_version": __version__,
        "python_version": platform.python_version(),
        "torch_version": str(torch.__version__),
        "git_commit": commit,
        "git_dirty": dirty,
    }
