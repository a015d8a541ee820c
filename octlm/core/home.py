"""Where an octlm home is, and the paths inside it.

A home holds ``experiments/``, ``registry.db``, ``checkpoints/``, ``runs/``, ``cache/`` and ``locks/``.
Nothing here creates folders on import; folders are made on first write. The experiment ID rule lives here
(``validate_id``, ``validate_prefix``); the registry's path and the lock paths are handed out only after
``mounts.refuse_network_home`` found the home on no network filesystem. ``Home.refuse_links`` refuses a folder of
the home (``checkpoints/<ID>``, ``runs``, ``locks``, ...) that is a symbolic link or resolves outside the home: octlm
deletes and writes only inside its home.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from octlm.core.errors import BadInput, Refused
from octlm.core.mounts import refuse_network_home

ID_MAX_CHARS = 64
_SEGMENT = r"[A-Za-z][A-Za-z0-9]*"
PREFIX_PATTERN = re.compile(rf"(?:{_SEGMENT}-)+")
ID_PATTERN = re.compile(rf"({PREFIX_PATTERN.pattern})([0-9]{{1,9}})")
ID_HELP = (
    f"experiment IDs look like EXP-008, BOX-001 or B-EXP-001: segments of letters and digits (each starting "
    f"with a letter) joined by '-', then '-' and 1 to 9 digits, at most {ID_MAX_CHARS} characters"
)
DEFAULT_PREFIX = "EXP-"
CACHE_VARIABLE = "OCTLM_CACHE_DIR"  # a cache folder outside the home, named on purpose


def validate_id(value: str) -> str:
    """Return ``value`` if it is a well-formed experiment ID; never accepts anything path-like."""
    if not isinstance(value, str) or len(value) > ID_MAX_CHARS or ID_PATTERN.fullmatch(value) is None:
        shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
        raise BadInput(f"malformed experiment ID {shown}: {ID_HELP}")
    return value


def validate_prefix(value: str, source: str = "--id-prefix") -> str:
    """Return ``value`` if IDs can be made of it (``BOX-`` gives ``BOX-001``): segments of letters and digits,
    each starting with a letter, each followed by '-', with room for three digits within ``ID_MAX_CHARS``.
    ``source`` names where the value came from (an option or a variable) in the one-line refusal."""
    if isinstance(value, str) and len(value) + 3 <= ID_MAX_CHARS and PREFIX_PATTERN.fullmatch(value) is not None:
        return value
    shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
    raise BadInput(
        f"{source}: malformed ID prefix {shown}: segments of letters and digits, each starting with a letter and "
        f"ending in '-' (e.g. BOX- or B-EXP-), at most {ID_MAX_CHARS - 3} characters"
    )


def split_id(experiment_id: str) -> tuple[str, int]:
    """An ID's prefix (with its last '-') and its number: ``B-EXP-012`` is ``("B-EXP-", 12)``."""
    match = ID_PATTERN.fullmatch(validate_id(experiment_id))
    assert match is not None  # validated above
    return match.group(1), int(match.group(2))


def id_number(experiment_id: str) -> int:
    return split_id(experiment_id)[1]


def id_sort_key(experiment_id: str) -> tuple[str, int, str]:
    """IDs in order: by prefix, then by number (``EXP-999`` before ``EXP-1000``); other text last, as is."""
    try:
        prefix, number = split_id(experiment_id)
    except BadInput:
        return ("\U0010ffff", 0, str(experiment_id))
    return (prefix, number, experiment_id)


def find_home(explicit: str | os.PathLike[str] | None = None, start: Path | None = None) -> Path:
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
    def locate(cls, explicit: str | os.PathLike[str] | None = None) -> Home:
        return cls(find_home(explicit))

    experiments = _Under("experiments")
    runs = _Under("runs")
    locks = _Under("locks")

    @property
    def cache(self) -> Path:
        """The token files and shared tokenizers: ``cache/`` in the home, or the folder ``OCTLM_CACHE_DIR`` names
        (``verify-resume`` gives its scratch homes the experiment's own so; a user may share one between homes)."""
        named = os.environ.get(CACHE_VARIABLE)
        return Path(named).expanduser().resolve() if named else self.root / "cache"

    def own_folders(self) -> tuple[Path, ...]:
        """The home's folders every writer checks first (``refuse_links``): runs, locks, experiments, and the cache
        when it is the home's own."""
        own_cache = () if os.environ.get(CACHE_VARIABLE) else (self.cache,)
        return (self.runs, self.locks, self.experiments, *own_cache)

    @property
    def registry(self) -> Path:
        """``registry.db``; every opening of the registry asks for it here, so a home on a network filesystem
        is refused first (``mounts.refuse_network_home``)."""
        refuse_network_home(self.root)
        return self.root / "registry.db"

    def config_path(self, experiment_id: str) -> Path:
        return self.experiments / f"{validate_id(experiment_id)}.yaml"

    def checkpoint_dir(self, experiment_id: str) -> Path:
        return self.root / "checkpoints" / validate_id(experiment_id)

    def lock_path(self, experiment_id: str) -> Path:
        """The experiment's lock file, outside the folders users delete (refused on a network filesystem)."""
        refuse_network_home(self.root)
        return self.locks / f"{validate_id(experiment_id)}.lock"

    def run_file(self, experiment_id: str, suffix: str = "") -> Path:
        return self.runs / f"{validate_id(experiment_id)}{suffix}.jsonl"

    def live_events(self, experiment_id: str) -> Path:
        """The folder ``training.tensorboard`` writes the run's TensorBoard events to while it trains (one folder of
        ``runs/tensorboard/``, which ``tensorboard --logdir`` reads whole)."""
        return self.runs / "tensorboard" / validate_id(experiment_id)

    def refuse_links(self, *paths: Path) -> None:
        """Refused (exit 3) when a folder on the way from the root to each of ``paths`` (those that exist) is a
        symbolic link or resolves outside the home; the root itself may be reached through links."""
        root = self.root.resolve()
        for path in paths:
            current = self.root
            for part in path.relative_to(self.root).parts:
                current = current / part
                try:
                    linked = stat.S_ISLNK(os.lstat(current).st_mode)
                except FileNotFoundError:
                    break
                if linked or not current.resolve().is_relative_to(root):
                    where = (
                        f"a symbolic link to {os.readlink(current)}" if linked else f"outside it ({current.resolve()})"
                    )
                    raise Refused(
                        f"{current} is {where}: octlm writes and deletes only inside the home {self.root}; "
                        "make it a plain folder of the home (move what it holds into it), nothing was changed"
                    )

    def ensure_writable(self) -> None:
        """Fail with one clear line when the home cannot be written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise BadInput(f"home {self.root} cannot be created: {error.strerror}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise BadInput(f"home {self.root} is not writable: choose another with --home or OCTLM_HOME")
