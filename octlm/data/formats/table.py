"""The one table of the formats ``data.sources`` reads, ``FORMATS`` (the package's docstring)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from octlm.data.formats.columns import columns, write_parquet, write_saved
from octlm.data.formats.files import Scan
from octlm.data.formats.records import json_lines, whole, write_lines, write_texts

DEFAULT_FIELD = "text"  # data.text_field's default: the field every record format reads unless told otherwise


@dataclass(frozen=True)
class Format:
    """One format ``data.sources`` reads (the module's docstring)."""

    help: str  # its sentence in data.sources' documentation
    suffixes: tuple[str, ...]  # the name endings that make a file of it (none: recognized by content)
    scan: Scan  # each document of a file: the suffix of its name, where it is read again, its bytes of text
    write: Callable[[Path, Sequence[str], str], Path]  # a file (or folder) of it in a folder, holding the texts
    needs: tuple[str, ...] = ()  # the packages it imports (the data extra's), checked before anything is read
    records: bool = False  # whether data.text_field names the field (or column) its text is in


def _row(help: str, suffix: str, codec: str, *, records: bool, needs: tuple[str, ...] = ()) -> Format:
    if records:
        return Format(help, (suffix,), json_lines(codec), write_lines(codec, suffix), needs, records)
    return Format(help, (suffix,) if suffix else (), whole(codec), write_texts(codec, suffix), needs, records)


ZSTD, PYARROW = ("zstandard",), ("pyarrow",)
FORMATS: dict[str, Format] = {
    "text": _row(
        "a file of none of the formats below that decodes as UTF-8 text, whatever its name (told by its content; in a "
        "folder or a glob, binary files are skipped and counted, hidden files and version-control folders left out): "
        "one document",
        "",
        "",
        records=False,
    ),
    "jsonl": _row(
        "JSON Lines, a document a line, its text in the field data.text_field names", ".jsonl", "", records=True
    ),
    "jsonl.gz": _row("JSON Lines compressed with gzip", ".jsonl.gz", "gzip", records=True),
    "jsonl.zst": _row("JSON Lines compressed with zstandard", ".jsonl.zst", "zstd", records=True, needs=ZSTD),
    "txt.gz": _row("a text file compressed with gzip, one document", ".txt.gz", "gzip", records=False),
    "txt.zst": _row(
        "a text file compressed with zstandard, one document", ".txt.zst", "zstd", records=False, needs=ZSTD
    ),
    "parquet": Format(
        "Parquet (files, folders or globs of shards), a document a row, its text in the column data.text_field "
        "names, read a row group at a time",
        (".parquet",),
        columns("Parquet"),
        write_parquet,
        PYARROW,
        records=True,
    ),
    "arrow": Format(
        "a folder a Hugging Face datasets object was saved to (save_to_disk; its state.json names its Arrow "
        "files), or .arrow files: a document a row, its text in the column data.text_field names",
        (".arrow",),
        columns("Arrow"),
        write_saved,
        PYARROW,
        records=True,
    ),
}


def recognized(path: Path) -> str:
    """The format a data file is read as by its name: a row with the name ending it has, else ``text``."""
    return next((name for name, row in FORMATS.items() if row.suffixes and path.name.endswith(row.suffixes)), "text")


def missing(name: str) -> list[str]:
    """The packages a format needs that cannot be imported here (found without importing them)."""
    return [package for package in FORMATS[name].needs if not _found(package)]


def _found(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # hidden or half-installed: sys.modules[package] is None
        return False


def sources_doc() -> str:
    """``data.sources``' documentation, made from the table."""
    rows = [f"{', '.join(row.suffixes) or name}: {row.help}" for name, row in FORMATS.items()]
    needing = [name for name, row in FORMATS.items() if row.needs]
    return (
        "builtin:docs, builtin:stdlib, or paths, globs and folders of data files, relative to the home (or "
        f"OCTLM_DATA_ROOT): {'; '.join(rows)}; {', '.join(needing)} need the data extra (octlm[data])"
    )
