"""Find the documents of a corpus and split them into training and validation.

Sources (``data.sources``):
  builtin:docs    a frozen snapshot of octlm's own Markdown docs and Python sources (corpus
                  version docs-v1, package data checked against ``BUILTIN_DOCS_SHA256``), so no
                  later change to octlm's code moves an experiment's dataset hash
  builtin:stdlib  the running Python's standard-library ``.py`` files
  PATH or GLOB    ``.txt`` / ``.md`` files (whole file = one document), ``.jsonl`` files with a
                  ``"text"`` field per line, or folders of them; relative to the data root
                  (the home, or ``OCTLM_DATA_ROOT`` when set)
The split is by a hash of each document's name, so it never depends on file order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import UnsafeFile, open_regular, read_regular
from octlm.data import sources as sources_module

DEFAULT_MAX_BYTES = 4 << 30  # the most bytes of data files read in all when data.max_bytes is 0 (4 GiB)
PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class _File:
    """A data file as it was when the corpus was read: a later read of a different file is refused."""

    path: Path
    size: int
    mtime_ns: int
    newlines: bool = False  # read as ``Path.read_text`` reads (\r\n and \r become \n): builtin:stdlib's modules

    @classmethod
    def seen(cls, path: Path, newlines: bool = False) -> _File:
        info = os.stat(path)
        return cls(path, info.st_size, info.st_mtime_ns, newlines)

    def text(self) -> str:
        text = self.read().decode("utf-8")
        return text.replace("\r\n", "\n").replace("\r", "\n") if self.newlines else text

    def read(self, offset: int = 0, length: int = -1) -> bytes:
        fd = open_regular(self.path, max_bytes=self.size)
        try:
            info = os.fstat(fd)
            if (info.st_size, info.st_mtime_ns) != (self.size, self.mtime_ns):
                raise BadInput(f"data.sources: {self.path} changed while octlm was using it; run the command again")
            return os.pread(fd, self.size if length < 0 else length, offset)
        finally:
            os.close(fd)


class Document:
    """A document: its name and its text. The text is held (builtin:docs, texts made in code) or read again
    from its file at each use (``.txt``/``.md`` files, builtin:stdlib modules, ``.jsonl`` lines, by their
    byte range), so a corpus costs memory for its names only, whatever its size."""

    __slots__ = ("_held", "_line", "name", "size", "source")

    def __init__(
        self,
        name: str,
        text: str | None = None,
        *,
        file: _File | None = None,
        line: tuple[int, int] = (0, -1),
        size: int = -1,
    ):
        self.name = name  # stable across machines for builtins ("builtin:docs/plan.md"), the path otherwise
        self.source = 0  # which of ``data.sources`` it came from (its index), for evaluations per source
        self._held = text
        self._line = (file, *line)
        self.size = size if size >= 0 else len((text or "").encode("utf-8", "surrogatepass"))  # bytes of UTF-8

    @property
    def text(self) -> str:
        if self._held is not None:
            return self._held
        file, offset, length = self._line
        assert file is not None, "a document holds its text or knows its file"
        return file.text() if length < 0 else json.loads(file.read(offset, length).decode("utf-8"))["text"]

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

    @functools.cached_property
    def content_hash(self) -> str:
        """SHA-256 over every document's split, name and text (one pass over the files, once)."""
        digest = hashlib.sha256()
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
            file = _File.seen(path, newlines=True)
            size = len(file.text().encode("utf-8", "surrogatepass"))
        except (UnicodeDecodeError, OSError):
            continue  # a handful of stdlib test files are deliberately not UTF-8
        yield Document(f"builtin:stdlib/{relative.as_posix()}", file=file, size=size)


class _Reader:
    """Reads data files, only regular ones, within one cap on the bytes read in all."""

    def __init__(self, cap: int):
        self.cap, self.left = cap, cap

    def text(self, path: Path) -> tuple[str, _File]:
        """The file's text, and the file as it was read."""
        try:
            file = _File.seen(path)
            payload = read_regular(path, max_bytes=self.left)
            self.left -= len(payload)
            return payload.decode("utf-8"), file
        except UnicodeDecodeError as error:
            raise BadInput(
                f"{path}: not UTF-8 text (undecodable byte at offset {error.start}); "
                "convert it or drop it from data.sources"
            ) from None
        except UnsafeFile as error:
            if error.too_large:
                raise BadInput(
                    f"data.sources: {path}: the corpus is larger than the cap of {self.cap} bytes; set data.max_bytes"
                ) from None
            raise BadInput(f"data.sources: {path}: {error.strerror}; data sources must be regular files") from None
        except OSError as error:
            raise BadInput(f"{path}: cannot be read: {error.strerror}") from None


def _jsonl(text: str, file: _File, name: str) -> Iterator[Document]:
    """One document per line with a ``"text"`` field, each read again later by its byte range."""
    path, offset = file.path, 0
    for number, ended in enumerate(text.splitlines(keepends=True), start=1):
        line = ended.splitlines()[0] if ended.strip() else ""  # without its line ending
        start, length = offset, len(line.encode("utf-8", "surrogatepass"))
        offset += len(ended.encode("utf-8", "surrogatepass"))
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
            raise BadInput(f"{path}:{number}: not valid JSON ({reason})") from None
        value = record.get("text") if isinstance(record, dict) else None
        if not isinstance(value, str):
            raise BadInput(f'{path}:{number}: no "text" field with a string value')
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise BadInput(
                f"{path}:{number}: the text is not valid Unicode (a lone surrogate {value[error.start]!a} at "
                f"character {error.start}); fix or drop the line"
            ) from None
        yield Document(f"{name}:{number}", file=file, line=(start, length), size=size)


def _name(path: Path, root: Path) -> str:
    """Documents are named relative to the data root, so a copied home splits the same way."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _read(item: str | tuple[Path, int], home: Path, reader: _Reader) -> Iterator[Document]:
    if item == "builtin:docs":
        yield from builtin_docs()
    elif item == "builtin:stdlib":
        yield from _stdlib()
    elif isinstance(item, tuple):
        path, name = item[0], _name(item[0], home)
        text, file = reader.text(path)
        if path.suffix == ".jsonl":
            yield from _jsonl(text, file, name)
        else:
            yield Document(name, file=file, size=len(text.encode("utf-8", "surrogatepass")))


def documents(sources: tuple[str, ...], home: Path, max_bytes: int = 0) -> list[Document]:
    """The documents of ``sources`` in order; with ``max_bytes``, those up to that many bytes of text
    (at least one). Files are read lazily, so nothing past the cap is read, and never more than
    ``max(max_bytes, DEFAULT_MAX_BYTES)`` bytes in all."""
    found: list[Document] = []
    total, reader = 0, _Reader(max(max_bytes, DEFAULT_MAX_BYTES))
    for source, item in sources_module.plan(sources, home):
        if max_bytes and found and isinstance(item, tuple) and item[0].suffix != ".jsonl":
            if total + item[1] > max_bytes:
                break  # a .txt or .md file holds as many bytes of text as its size: it would not fit
        for document in _read(item, home, reader):
            if not document.size:
                continue
            size = document.size if max_bytes else 0
            if found and total + size > max_bytes > 0:
                return found
            total += size
            document.source = source
            found.append(document)
    if not found:
        raise BadInput(f"data.sources {list(sources)}: the corpus is empty (no document has any text)")
    return found


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


def load(sources: tuple[str, ...], home: Path, validation_fraction: float, max_bytes: int = 0) -> Corpus:
    return split(documents(sources, home, max_bytes), validation_fraction)
