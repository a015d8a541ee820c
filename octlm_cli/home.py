"""Where an octlm home is, and the paths inside it.

A home holds ``experiments/``, ``registry.db``, ``checkpoints/``, ``runs/``, ``cache/`` and ``locks/``.
Nothing here creates folders on import; folders are made on first write.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput

ID_PATTERN = re.compile(r"EXP-[0-9]{1,9}")
ID_HELP = "experiment IDs look like EXP-008 (EXP- followed by digits)"


def validate_id(value: str) -> str:
    """Return ``value`` if it is a well-formed experiment ID; never accepts anything path-like."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise BadInput(f"malformed experiment ID {shown}: {ID_HELP}")
    return value


def id_number(experiment_id: str) -> int:
    return int(experiment_id.split("-", 1)[1])


def find_home(explicit: str | os.PathLike | None = None, start: Path | None = None) -> Path:
    """``--home`` or ``OCTLM_HOME``; else the nearest folder at or above ``start`` that has
    ``experiments/`` or ``registry.db`` and may be adopted; else ``start`` itself.

    The search stops at the first folder owned by another user and below the filesystem root,
    and never adopts a world-writable folder (sticky or not): anyone could have planted a home
    there. Such folders are homes only when named with ``--home`` or ``OCTLM_HOME``.
    """
    chosen = explicit if explicit not in (None, "") else os.environ.get("OCTLM_HOME") or None
    if chosen is not None:
        try:
            path = Path(chosen).expanduser()
        except RuntimeError as error:  # "~nosuchuser/x"
            raise BadInput(f"home {chosen!r}: {error}") from None
        if path.exists() and not path.is_dir():
            raise BadInput(f"home {path} is not a folder: pass --home with a folder")
        return path.resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if folder == folder.parent and folder != here:
            break  # the filesystem root is never adopted by searching upwards
        try:
            info = folder.stat()
        except OSError:
            break
        if info.st_uid != os.geteuid():
            break
        if not info.st_mode & stat.S_IWOTH and _looks_like_home(folder):
            return folder
    return here


def _looks_like_home(folder: Path) -> bool:
    return (folder / "experiments").is_dir() or (folder / "registry.db").is_file()


class _Under:
    """A path in the home: ``home.registry`` is ``home.root / "registry.db"``."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, home: Home, owner: type) -> Path:
        return home.root / self.name


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def locate(cls, explicit: str | os.PathLike | None = None) -> Home:
        return cls(find_home(explicit))

    experiments = _Under("experiments")
    registry = _Under("registry.db")
    runs = _Under("runs")
    cache = _Under("cache")
    locks = _Under("locks")

    def config_path(self, experiment_id: str) -> Path:
        return self.experiments / f"{validate_id(experiment_id)}.yaml"

    def checkpoint_dir(self, experiment_id: str) -> Path:
        return self.root / "checkpoints" / validate_id(experiment_id)

    def lock_path(self, experiment_id: str) -> Path:
        """The experiment's lock file, outside the folders users delete."""
        return self.locks / f"{validate_id(experiment_id)}.lock"

    def run_file(self, experiment_id: str, suffix: str = "") -> Path:
        return self.runs / f"{validate_id(experiment_id)}{suffix}.jsonl"

    def ensure_writable(self) -> None:
        """Fail with one clear line when the home cannot be written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise BadInput(f"home {self.root} cannot be created: {error.strerror}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise BadInput(f"home {self.root} is not writable: choose another with --home or OCTLM_HOME")
