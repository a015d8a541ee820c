"""Find the documents of a corpus and split them into training and validation.

Sources (``data.sources``):
  builtin:docs    a frozen snapshot of octlm's own Markdown docs and Python sources (corpus
                  version docs-v1, package data checked against ``BUILTIN_DOCS_SHA256``), so no
                  later change to octlm's code moves an experiment's dataset hash
  builtin:stdlib  the running Python's standard-library ``.py`` files
  PATH or GLOB    data files, or folders of them, relative to the data root (the home, or
                  ``OCTLM_DATA_ROOT`` when set): any text file (one document), JSON Lines, Parquet,
                  Arrow and the compressed formats of ``formats.FORMATS``, a document a record whose
                  text is in the field ``data.text_field`` names (``sources.plan`` finds them)
The split is by a hash of each document's name, so it never depends on file order.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.core.errors import BadInput, Refused
from octlm.data import sources as sources_module
from octlm.data.formats import DEFAULT_FIELD, FORMATS, Budget, DataFile
from octlm.data.sources import Item

DEFAULT_MAX_BYTES = 4 << 30  # the most bytes of data files read in all when data.max_bytes is 0 (4 GiB)
PACKAGE = Path(__file__).resolve().parent


class Document:
    """A document: its name and its text. The text is held (builtin:docs, texts made in code) or read again
    from its file at each use (a text file, a builtin:stdlib module, a record by where it lies: a JSON line by its
    byte range, a Parquet row by its row group; ``formats``), so a corpus costs memory for its names only, whatever
    its size."""

    __slots__ = ("_at", "_held", "name", "size", "source")

    def __init__(self, name: str, text: str | None = None, *, at: tuple[Any, int, int] = (None, 0, 0), size: int = -1):
        self.name = name  # stable across machines for builtins ("builtin:docs/plan.md"), the path otherwise
        self.source = 0  # which of ``data.sources`` it came from (its index), for evaluations per source
        self._held = text
        self._at = at  # where the text is read again: a reader with ``text(a, b)`` and the two numbers it takes
        self.size = size if size >= 0 else len((text or "").encode("utf-8", "surrogatepass"))  # bytes of UTF-8

    @property
    def text(self) -> str:
        if self._held is not None:
            return self._held
        reader, a, b = self._at
        assert reader is not None, "a document holds its text or knows where it lies"
        return reader.text(a, b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Document) and (self.name, self.text) == (other.name, other.text)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Document({self.name!r}, {self.size} bytes)"


@dataclass(frozen=True)
class Corpus:
    train: tuple[Document, ...]
    validation: tuple[Document, ...]
    field: str = DEFAULT_FIELD  # data.text_field: where records hold their text
    skipped: int = 0  # binary files left out of folders and globs

    @functools.cached_property
    def content_hash(self) -> str:
        """SHA-256 over every document's split, name and text (one pass over the files, once), and the field records
        were read from when it is not the default (so that no existing dataset hash moves)."""
        digest = hashlib.sha256()
        if self.field != DEFAULT_FIELD:
            digest.update(f"text_field:{len(self.field)}:{self.field}".encode())
        for split, documents in (("train", self.train), ("validation", self.validation)):
            for document in documents:
                for part in (split, document.name, document.text):
                    encoded = part.encode("utf-8", "surrogatepass")
                    digest.update(len(encoded).to_bytes(8, "little"))
                    digest.update(encoded)
        return digest.hexdigest()


# The frozen builtin:docs corpus: octlm's docs and sources as of corpus version docs-v1, one JSON
# object per line ({"name", "text"}), in the order the split and the token stream follow. A new
# snapshot gets a new file, constant and source name; this one never changes.
BUILTIN_DOCS_FILE = PACKAGE / "corpora" / "docs-v1.jsonl"
BUILTIN_DOCS_SHA256 = "0df360b04e3854c1a3125905fd5dc60022639f55bc2e250287883772ba65cc04"


def builtin_docs() -> list[Document]:
    payload = BUILTIN_DOCS_FILE.read_bytes()
    if hashlib.sha256(payload).hexdigest() != BUILTIN_DOCS_SHA256:
        raise Refused(f"{BUILTIN_DOCS_FILE}: the builtin:docs snapshot does not match its checksum; reinstall octlm")
    records = [json.loads(line) for line in payload.decode("utf-8").splitlines()]
    return [Document(record["name"], record["text"]) for record in records]


def builtin_stdlib() -> list[Document]:
    return list(_stdlib())


def _stdlib() -> Iterator[Document]:
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in ("site-packages", "dist-packages") or "__pycache__" in relative.parts:
            continue
        try:
            file = DataFile.seen(path, newlines=True)
            size = len(file.text().encode("utf-8", "surrogatepass"))
        except (UnicodeDecodeError, OSError):
            continue  # a handful of stdlib test files are deliberately not UTF-8
        yield Document(f"builtin:stdlib/{relative.as_posix()}", at=(file, 0, -1), size=size)


def _name(path: Path, root: Path) -> str:
    """Documents are named relative to the data root, so a copied home splits the same way."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _read(item: Item, home: Path, budget: Budget, field: str) -> Iterator[Document]:
    if item == "builtin:docs":
        yield from builtin_docs()
    elif item == "builtin:stdlib":
        yield from _stdlib()
    elif isinstance(item, sources_module.Planned):
        name, scan = _name(item.path, home), FORMATS[item.format].scan
        for suffix, at, size in scan(DataFile.seen(item.path), field, budget):
            yield Document(name + suffix, at=at, size=size)


def documents(sources: tuple[str, ...], home: Path, max_bytes: int = 0, field: str = DEFAULT_FIELD) -> list[Document]:
    """The documents of ``sources`` in order; with ``max_bytes``, those up to that many bytes of text
    (at least one). Files are read lazily, so nothing past the cap is read, and never more than
    ``max(max_bytes, DEFAULT_MAX_BYTES)`` bytes of text in all. Records hold their text in ``field``."""
    return _documents(sources, home, max_bytes, field)[0]


def _documents(sources: tuple[str, ...], home: Path, max_bytes: int, field: str) -> tuple[list[Document], int]:
    """The documents, and how many binary files were skipped."""
    found: list[Document] = []
    total, budget = 0, Budget(max(max_bytes, DEFAULT_MAX_BYTES))
    planned = sources_module.plan(sources, home)
    for source, item in planned.items:
        if max_bytes and found and isinstance(item, sources_module.Planned) and item.format == "text":
            if total + item.size > max_bytes:
                break  # a text file holds as many bytes of text as its size: it would not fit
        for document in _read(item, home, budget, field):
            if not document.size:
                continue
            size = document.size if max_bytes else 0
            if found and total + size > max_bytes > 0:
                return found, planned.skipped
            total += size
            document.source = source
            found.append(document)
    if not found:
        raise BadInput(f"data.sources {list(sources)}: the corpus is empty (no document has any text)")
    return found, planned.skipped


def _score(name: str) -> float:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2**64


def split(found: list[Document], validation_fraction: float) -> Corpus:
    """Deterministic split by name hash; never leaves either side empty when it can be helped."""
    train = [d for d in found if _score(d.name) >= validation_fraction]
    validation = [d for d in found if _score(d.name) < validation_fraction]
    if validation_fraction > 0 and not validation and len(train) > 1:
        moved = min(train, key=lambda d: _score(d.name))
        train.remove(moved)
        validation = [moved]
    if not train and len(validation) > 1:
        moved = max(validation, key=lambda d: _score(d.name))
        validation.remove(moved)
        train = [moved]
    if not train:
        train, validation = validation, []
    return Corpus(tuple(train), tuple(validation))


def load(
    sources: tuple[str, ...], home: Path, validation_fraction: float, max_bytes: int = 0, field: str = DEFAULT_FIELD
) -> Corpus:
    """The corpus of ``sources``, split (``documents``, ``split``), with its field and the binary files skipped."""
    found, skipped = _documents(sources, home, max_bytes, field)
    return dataclasses.replace(split(found, validation_fraction), field=field, skipped=skipped)
