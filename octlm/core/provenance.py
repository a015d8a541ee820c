"""Where a run came from: the command line, the versions (octlm's own, ``__version__``, is kept here: every layer
records it, so its owner is the package that imports nothing of octlm), the git state of the home.

The git state is read from the repository's files (``HEAD``, loose refs, ``packed-refs``), never by
running git: git obeys the repository's own config (``core.fsmonitor``, hooks, clean filters named
by ``.gitattributes``), and a home is often a copied or unpacked folder that nobody vetted. So a
run records the commit but not whether the work tree is dirty (``git_dirty`` stays null): telling
that needs git to read the work tree, which is exactly what runs the home's code.
"""

from __future__ import annotations

import os
import platform
import re
import stat
import sys
from pathlib import Path
from typing import TypedDict

__version__ = "0.1.0"  # octlm's; pyproject.toml says the same (tests/test_public_face.py holds them together)

OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 repositories
REF_NAME = re.compile(r"refs/[A-Za-z0-9._/+-]+")
SMALL, PACKED_REFS_MAX = 4096, 64 << 20  # bytes read of a ref file, of packed-refs


def argv() -> list[str]:
    return [os.path.basename(sys.argv[0]), *sys.argv[1:]]


def _read(path: Path, limit: int = SMALL) -> str | None:
    """A small regular file's text; None for anything else (missing, a FIFO, a device, too big, binary)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return os.read(fd, limit).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _git_dir(folder: Path) -> Path | None:
    """The git directory of the checkout holding ``folder``: a ``.git`` folder, or the one a ``.git`` file names."""
    for candidate in (folder, *folder.parents):
        dot = candidate / ".git"
        if dot.is_dir():
            return dot
        text = _read(dot)
        if text is not None and text.startswith("gitdir:"):
            return candidate / text[len("gitdir:") :].strip()  # an absolute path replaces candidate
    return None


def _packed(common: Path, name: str) -> str | None:
    for line in (_read(common / "packed-refs", PACKED_REFS_MAX) or "").splitlines():
        object_id, _, ref = line.partition(" ")
        if ref == name:
            return object_id
    return None


def head_commit(git_dir: Path) -> str | None:
    """HEAD's commit, following symbolic refs through loose ref files and ``packed-refs``."""
    common_text = _read(git_dir / "commondir")  # a linked worktree shares its refs with the main one
    common = git_dir / common_text.strip() if common_text else git_dir
    value = _read(git_dir / "HEAD")
    for _ in range(8):  # symbolic refs may chain; a loop is not followed forever
        if value is None:
            return None
        value = value.strip()
        if OBJECT_ID.fullmatch(value):
            return value
        name = value.removeprefix("ref:").strip()
        if not value.startswith("ref:") or not REF_NAME.fullmatch(name) or ".." in name.split("/"):
            return None  # not a ref octlm reads (and never a path outside the repository)
        value = _read(git_dir / name) or _read(common / name) or _packed(common, name)
    return None


def git_state(folder: Path) -> tuple[str | None, int | None]:
    """(HEAD commit, None) of the git checkout holding ``folder``: read from its files, nothing executed.

    The second value (whether tracked files are modified) is no longer determined, see the module's note.
    """
    try:
        git_dir = _git_dir(folder.resolve())
    except (OSError, RuntimeError):
        return None, None
    return (head_commit(git_dir) if git_dir else None), None


class RunProvenance(TypedDict):
    """Where a run came from: the provenance columns of its registry row."""

    argv: list[str]  # stored as JSON text
    octlm_version: str
    python_version: str
    torch_version: str
    git_commit: str | None
    git_dirty: int | None  # 1 when the work tree had changes, 0 when clean


def run_fields(home_root: Path) -> RunProvenance:
    """The provenance columns of a registry run row (asked by a training process, which has torch loaded)."""
    import torch

    commit, dirty = git_state(home_root)
    return {
        "argv": argv(),
        "octlm_version": __version__,
        "python_version": platform.python_version(),
        "torch_version": str(torch.__version__),
        "git_commit": commit,
        "git_dirty": dirty,
    }
