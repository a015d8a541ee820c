"""Where a corpus's documents come from: ``data.sources`` resolved, before anything is read, to the builtins by
name and to the data files (``.txt``, ``.md``, ``.jsonl``; paths, globs and folders) with their sizes, each checked
to be a regular file; relative sources start at the data root (the home, or ``OCTLM_DATA_ROOT``). ``check_readable``
asks the same before ``new`` or ``sweep new`` writes anything, so a source that holds nothing is refused there, not
at ``train``. Torch-free."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from octlm.core.errors import BadInput
from octlm.core.fsutil import check_regular
from octlm.core.home import Home

SUFFIXES = (".txt", ".md", ".jsonl")
BUILTINS = ("builtin:docs", "builtin:stdlib")
Item = str | tuple[Path, int]  # a builtin's name, or a data file and its size


def data_root(home: Home) -> Path:
    """Relative ``data.sources`` resolve here: ``OCTLM_DATA_ROOT`` if set, else the home."""
    root = os.environ.get("OCTLM_DATA_ROOT")
    return Path(root).resolve() if root else home.root


def _data_file(path: Path) -> bool:
    return path.suffix in SUFFIXES and not path.is_dir()


def _files(source: str, home: Path) -> list[Path]:
    try:
        pattern = Path(source).expanduser()
    except RuntimeError as error:  # "~nosuchuser/x"
        raise BadInput(f"data.sources: {source!r}: {error}") from None
    if not pattern.is_absolute():
        pattern = home / pattern
    if glob.has_magic(str(pattern)):
        matches = [Path(p) for p in sorted(glob.glob(str(pattern), recursive=True))]
        matches = [p for p in matches if _data_file(p)]
        if not matches:
            raise BadInput(f"data.sources: {source!r} matches no .txt, .md or .jsonl file")
        return matches
    if pattern.is_dir():
        matches = sorted(p for p in pattern.rglob("*") if _data_file(p))
        if not matches:
            raise BadInput(f"data.sources: folder {pattern} holds no .txt, .md or .jsonl file")
        return matches
    if not os.path.lexists(pattern):
        raise BadInput(f"data.sources: {pattern} does not exist")
    if pattern.suffix not in SUFFIXES:
        raise BadInput(f"data.sources: {pattern}: unsupported file type {pattern.suffix!r}; use .txt, .md or .jsonl")
    return [pattern]


def _checked(path: Path) -> tuple[Path, int]:
    """A data file and its size, if it is a regular file (checked without opening it)."""
    try:
        return path, check_regular(path).st_size
    except FileNotFoundError:
        raise BadInput(f"data.sources: {path} does not exist (a link to nothing?)") from None
    except OSError as error:
        raise BadInput(f"data.sources: {path}: {error.strerror}; data sources must be regular files") from None


def plan(sources: tuple[str, ...], home: Path) -> list[tuple[int, Item]]:
    """Every source resolved and checked before anything is read: builtins by name, files with their sizes,
    each with the index of the source it comes from."""
    plan: list[tuple[int, Item]] = []
    for index, source in enumerate(sources):
        if source in BUILTINS:
            plan.append((index, source))
        elif source.startswith("builtin:"):
            raise BadInput(f"data.sources: unknown builtin {source!r}; use builtin:docs or builtin:stdlib")
        else:
            plan += [(index, _checked(path)) for path in _files(source, home)]
    return plan


def check_readable(sources: tuple[str, ...], home: Path) -> None:
    """Whether ``sources`` hold something to train on now, asked before anything is written (``new``, ``sweep new``,
    ``sweep extend``): BadInput, one line naming the source and what to do, unless every one is a builtin or resolves
    to at least one data file, each a regular file. Nothing is read: it is ``plan``, which ``train`` runs too, so what
    counts as readable (``_data_file``, ``_files``) is decided in one place for both, and widened there."""
    try:
        plan(sources, home)
    except BadInput as error:
        raise BadInput(
            f"{error}: nothing was written; give data.sources that hold a .txt, .md or .jsonl file (a path, a glob "
            "or a folder, relative to the home or OCTLM_DATA_ROOT), or builtin:docs"
        ) from None
