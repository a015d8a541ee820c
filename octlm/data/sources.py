"""Where a corpus's documents come from: ``data.sources`` resolved, before any document is read, to the builtins by name
and to data files with their sizes and formats (``formats``: by the name's ending, ``.parquet``, ``.jsonl.zst``, ...,
else text by content: a file whose first ``SNIFF`` bytes hold no NUL byte and decode as UTF-8), each checked to be a
regular file; relative sources start at the data root (the home, or ``OCTLM_DATA_ROOT``). A folder is every file below
it, hidden files and version-control folders left out (the filesystem's root is refused); a folder a ``datasets`` object
was saved to (``save_to_disk``: its ``state.json``) is its Arrow files. A binary file is skipped and counted in a folder
or a glob, and refused when it is named. A format whose packages are missing (the data extra) is refused here, before
anything is read. ``check_readable`` asks the same before ``new`` or ``sweep new`` writes anything, so a source that
holds nothing is refused there, not at ``train``. Torch-free."""

from __future__ import annotations

import codecs
import glob
import json
import os
from pathlib import Path
from typing import NamedTuple

from octlm.core.errors import BadInput
from octlm.core.fsutil import check_regular, open_regular, read_regular
from octlm.core.home import Home
from octlm.core.reporting import counted
from octlm.data.formats import EXTRA, FORMATS, missing, recognized

BUILTINS = ("builtin:docs", "builtin:stdlib")
SNIFF = 8192  # bytes of a file's start that tell text from binary (as git and grep tell them)
VCS = frozenset({"CVS", "_darcs", "RCS", "SCCS"})  # version-control folders a leading dot does not hide already
SAVED = ("state.json", "dataset_info.json")  # what save_to_disk writes beside its Arrow files: read as neither


class Planned(NamedTuple):
    """A data file to read: its path, its size when planned, and its format (a name of ``formats.FORMATS``)."""

    path: Path
    size: int
    format: str


Item = str | Planned  # a builtin's name, or a data file


class Plan(NamedTuple):
    items: list[tuple[int, Item]]  # each with the index of the source it comes from
    skipped: int  # binary files left out of folders and globs


def data_root(home: Home) -> Path:
    """Relative ``data.sources`` resolve here: ``OCTLM_DATA_ROOT`` if set, else the home."""
    root = os.environ.get("OCTLM_DATA_ROOT")
    return Path(root).resolve() if root else home.root


def _saved(folder: Path) -> list[Path] | None:
    """The Arrow files of a folder ``save_to_disk`` wrote, in its ``state.json``'s order; None for another folder."""
    if (folder / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file()) or ["train"]
        example = folder / ("train" if "train" in splits else splits[0])
        raise BadInput(
            f"data.sources: {folder} holds a DatasetDict (splits: {', '.join(splits)}); name one split's folder, "
            f"such as {example}"
        )
    state = folder / SAVED[0]
    if not (state.is_file() and (folder / SAVED[1]).is_file()):
        return None
    try:
        names = [entry["filename"] for entry in json.loads(read_regular(state, max_bytes=1 << 20))["_data_files"]]
        return [folder / _plain(name) for name in names]
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput(f"data.sources: {state} names no Arrow files (_data_files); save the dataset again") from None


def _plain(name: object) -> str:
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise ValueError(name)
    return name


def _expanded(path: Path) -> list[Path]:
    """A file found by a glob, or a folder a dataset was saved to as its files; another folder is no data file."""
    return (_saved(path) or []) if path.is_dir() else [path]


def _folder(folder: Path) -> list[Path]:
    saved = _saved(folder)
    if saved is not None:
        return saved
    found = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if any(part.startswith(".") or part in VCS for part in parts) or path.is_dir():
            continue
        if path.name == "dataset_dict.json":
            _saved(path.parent)  # a DatasetDict: one line saying to name one of its splits
        if path.name in SAVED and _saved(path.parent) is not None:
            continue  # a saved dataset's own records: its Arrow files are read by their names
        found.append(path)
    return found


def _files(source: str, home: Path) -> tuple[list[Path], str]:
    """The files a source names, and how to say it holds nothing readable ("": a file named, not found)."""
    try:
        pattern = Path(source).expanduser()
    except RuntimeError as error:  # "~nosuchuser/x"
        raise BadInput(f"data.sources: {source!r}: {error}") from None
    if not pattern.is_absolute():
        pattern = home / pattern
    if glob.has_magic(str(pattern)):  # hidden files match only a pattern that names them (glob's own rule)
        matches = sorted(glob.glob(str(pattern), recursive=True))
        return [file for match in matches for file in _expanded(Path(match))], f"{source!r} matches"
    if pattern.is_dir():
        if pattern.resolve() == pattern.resolve().parent:  # /proc, /dev, the home itself...: minutes of walking
            raise BadInput(f"data.sources: {source!r} is the whole filesystem; name the corpus's folder or a glob")
        return _folder(pattern), f"folder {pattern} holds"
    if not os.path.lexists(pattern):
        raise BadInput(f"data.sources: {pattern} does not exist")
    return [pattern], ""


def _checked(path: Path) -> int:
    """A data file's size, if it is a regular file (checked without opening it)."""
    try:
        return check_regular(path).st_size
    except FileNotFoundError:
        raise BadInput(f"data.sources: {path} does not exist (a link to nothing?)") from None
    except OSError as error:
        raise BadInput(f"data.sources: {path}: {error.strerror}; data sources must be regular files") from None


def not_text(path: Path) -> str:
    """Why a file is not text ("" when it is): a NUL byte or bytes that are not UTF-8 among its first ``SNIFF``."""
    try:
        fd = open_regular(path, max_bytes=None)
    except OSError as error:
        raise BadInput(f"data.sources: {path}: cannot be read: {error.strerror}") from None
    try:
        head = os.read(fd, SNIFF)
    finally:
        os.close(fd)
    if (nul := head.find(b"\0")) >= 0:
        return f"a NUL byte at offset {nul}"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < SNIFF)
    except UnicodeDecodeError as error:
        return f"undecodable byte at offset {error.start}"
    return ""


def _planned(path: Path, named: bool) -> Planned | None:
    """A file as it will be read; None for a binary file of a folder or a glob (a named one is refused)."""
    size, kind = _checked(path), recognized(path)
    why = not_text(path) if kind == "text" else ""
    if why and named:
        known = ", ".join(suffix for row in FORMATS.values() for suffix in row.suffixes)
        raise BadInput(
            f"data.sources: {path}: not UTF-8 text ({why}) nor a data file octlm reads ({known}); convert it to "
            "UTF-8 text or drop it"
        )
    if not why and (lacking := missing(kind)):
        raise BadInput(f"data.sources: {path} ({kind}) needs {' and '.join(lacking)} to be read; {EXTRA}")
    return None if why else Planned(path, size, kind)


def plan(sources: tuple[str, ...], home: Path) -> Plan:
    """Every source resolved and checked before any document is read: builtins by name, files with their sizes and
    formats, each with the index of the source it comes from; and how many binary files were skipped."""
    items: list[tuple[int, Item]] = []
    skipped = 0
    for index, source in enumerate(sources):
        if source in BUILTINS:
            items.append((index, source))
            continue
        if source.startswith("builtin:"):
            raise BadInput(f"data.sources: unknown builtin {source!r}; use builtin:docs or builtin:stdlib")
        paths, holds = _files(source, home)
        planned = [_planned(path, named=not holds) for path in paths]
        readable = [(index, file) for file in planned if file is not None]
        if not readable:
            binary = f" ({counted(len(planned), 'binary file')} skipped)" if planned else ""
            raise BadInput(f"data.sources: {holds} no text or data file{binary}")
        items += readable
        skipped += len(planned) - len(readable)
    return Plan(items, skipped)


def check_readable(sources: tuple[str, ...], home: Path) -> None:
    """Whether ``sources`` hold something to train on now, asked before anything is written (``new``, ``sweep new``,
    ``sweep extend``): BadInput, one line naming the source and what to do, unless every one is a builtin or resolves
    to at least one data file, each a regular file of text or of a format octlm reads, its packages installed. Only
    the first bytes of text files are read: it is ``plan``, which ``train`` runs too, so what counts as readable
    (``_files``, ``_planned``) is decided in one place for both, and widened there."""
    try:
        plan(sources, home)
    except BadInput as error:
        raise BadInput(
            f"{error}: nothing was written; give data.sources that hold text or data files (a path, a glob or a "
            "folder, relative to the home or OCTLM_DATA_ROOT), or builtin:docs"
        ) from None
