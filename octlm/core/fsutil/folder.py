"""A folder the user names for output (``octlm export``'s ``-o DIR``, a model or a tracker's files), written whole:
checked first (``check_folder``: never a link, a file, a folder holding the home, any octlm home, or a folder the
home keeps; a folder that is not empty only with ``force``), then built beside it under a temporary name and
renamed into place (``publish``), so that DIR is whole or untouched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from octlm.core.errors import Refused
from octlm.core.fsutil.atomic import fsync_dir

HOME_FOLDERS = ("experiments", "runs", "cache", "locks", "checkpoints")  # what a home keeps: never written into


def check_folder(home_root: Path, target: Path, force: bool) -> None:
    """Refuse a link, a file, a folder holding the home, any octlm home (this one or another: a folder with
    ``registry.db`` or ``experiments/``, even with ``force``), and a non-empty folder without ``force``."""
    if target.is_symlink():
        raise Refused(f"{target} is a symbolic link: give the folder itself")
    if target.exists() and not target.is_dir():
        raise Refused(f"{target} exists and is not a folder: give a folder")
    marks = [name for name in ("registry.db", "experiments") if os.path.lexists(target / name)]
    if marks:
        raise Refused(
            f"{target} is an octlm home (it holds {' and '.join(marks)}): export never replaces a home, "
            "--force or not; give another folder"
        )
    resolved, root = target.resolve(), Path(home_root).resolve()
    if root.is_relative_to(resolved):
        raise Refused(f"{target} holds the home {home_root}: export to another folder")
    for folder in HOME_FOLDERS:
        if resolved.is_relative_to(root / folder):
            raise Refused(f"{target} is inside the home's {folder}/, which octlm keeps: export to another folder")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise Refused(f"{target} exists and is not empty: give --force to replace it, or another folder")


def publish(target: Path, force: bool, build: Callable[[Path], list[str]]) -> list[str]:
    """Build the folder under a temporary name beside ``target``, then rename it into place (replacing an
    empty folder, or with ``force`` a full one, removed only once the new one is in place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o777 & ~umask)  # mkdtemp's folder is private; the export is as mkdir makes it
        files = build(temporary)
        fsync_dir(temporary)
        _swap(temporary, target, force)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    fsync_dir(target.parent)
    return files


def _swap(temporary: Path, target: Path, force: bool) -> None:
    if not target.is_dir() or not any(target.iterdir()):
        os.replace(temporary, target)  # over nothing, or over an empty folder: one atomic rename
        return
    if not force:  # filled while the export was written
        raise Refused(f"{target} exists and is not empty: give --force to replace it, or another folder")
    old = target.parent / f".{target.name}.{secrets.token_hex(8)}.old"
    os.replace(target, old)
    try:
        os.replace(temporary, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
