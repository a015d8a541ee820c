"""How a checkpoint's files are named, the one place that spells it (torch-free).

A checkpoint of step N is ``step-NNNNNN.pt`` (the step in at least six digits) in its track's folder, and beside
it ``step-NNNNNN.sha256``, the sidecar: one line ``<sha256>  <file name>``, written before the checkpoint is
renamed into place. A crash can leave a ``.tmp`` file or a sidecar without its checkpoint behind (leftovers).

``unpack`` stages a pack in ``.unpack-<pid>-<start time>-<random>/`` at the home's root (``staging_prefix``), and a
command that makes many experiments at once (``sweep new``, ``sweep extend``, ``new --seeds``) their files in
``.new-<pid>-<start time>-<random>/``, so ``doctor`` can tell the folder of a live process from one a killed process
left behind (``staging_folders``).
"""

from __future__ import annotations

import re
from pathlib import Path

from octlm.core.fsutil import TEMPORARY_SUFFIX, atomic_write, read_regular

CHECKPOINT = re.compile(r"step-(\d{6,12})\.pt")
FILE = re.compile(r"step-(\d{6,12})\.(?:pt|sha256)")  # a checkpoint or its sidecar
SIDECAR_SUFFIX = ".sha256"
MAX_SIDECAR_BYTES = 4096


STAGING = re.compile(r"\.(?:unpack-(?:(\d+)-(\d+)-)?|new-(\d+)-(\d+)-).+")  # an older unpack's: .unpack-<random>
NEW = "new"  # the staging of experiments made many at once


def staging_prefix(pid: int, start: int | None, kind: str = "unpack") -> str:
    """The name a staging folder starts with: what stages (``unpack``, ``NEW``), its process's pid and start time (0:
    unknown)."""
    return f".{kind}-{pid}-{start or 0}-"


def staging_folders(root: Path) -> list[tuple[Path, int | None, int | None]]:
    """Every staging folder at the home's root, with the pid and start time of the process that made it (None,
    None for an older octlm's unpack); ``path.name`` says which kind."""
    found = []
    for path in sorted(root.glob(".*-*")) if root.is_dir() else []:
        match = STAGING.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            pid, start = match.group(1) or match.group(3), match.group(2) or match.group(4)
            found.append((path, int(pid) if pid else None, int(start) or None if start else None))
    return found


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}.pt"


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / checkpoint_name(step)


def step_of(name: str) -> int | None:
    """The step a checkpoint file name stands for; None for any other name."""
    match = CHECKPOINT.fullmatch(name)
    return int(match.group(1)) if match else None


def sidecar(path: Path) -> Path:
    """The checksum file of the checkpoint at ``path``."""
    return path.with_suffix(SIDECAR_SUFFIX)


def write_sidecar(path: Path, digest: str) -> None:
    atomic_write(sidecar(path), f"{digest}  {path.name}\n".encode())


def read_sidecar(path: Path) -> str | None:
    """The sha256 the sidecar of ``path`` names; None when it is missing, unreadable or empty (never a link)."""
    try:
        return read_regular(sidecar(path), max_bytes=MAX_SIDECAR_BYTES, follow=False).decode().split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file in ``folder``, by step."""
    if not folder.is_dir():
        return []
    found = ((step_of(path.name), path) for path in folder.iterdir())
    return sorted((step, path) for step, path in found if step is not None)


def remove(path: Path) -> None:
    """A checkpoint and its sidecar."""
    path.unlink(missing_ok=True)
    sidecar(path).unlink(missing_ok=True)


def leftovers(folder: Path) -> list[Path]:
    """Temporary files and orphaned sidecars left by a crash."""
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.iterdir()
        if path.name.endswith(TEMPORARY_SUFFIX)
        or (path.suffix == SIDECAR_SUFFIX and not path.with_suffix(".pt").exists())
    )


def clean_leftovers(folder: Path) -> list[Path]:
    found = leftovers(folder)
    for path in found:
        path.unlink(missing_ok=True)
    return found
