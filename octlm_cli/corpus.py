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

import glob
import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput, Refused

SUFFIXES = (".txt", ".md", ".jsonl")
PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Document:
    name: str  # stable across machines for builtins ("builtin:docs/plan.md"), the path otherwise
    text: str


@dataclass(frozen=True)
class Corpus:
    train: tuple[Document, ...]
    validation: tuple[Document, ...]

    @property
    def content_hash(self) -> str:
        """SHA-256 over every document's split, name and text."""
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
    root = Path(sysconfig.get_paths()["stdlib"])
    documents = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in ("site-packages", "dist-packages") or "__pycache__" in relative.parts:
            continue
        try:
            text = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a handful of stdlib test files are deliberately not UTF-8
        documents.append(Document(f"builtin:stdlib/{relative.as_posix()}", text))
    return documents


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(
            f"{path}: not UTF-8 text (undecodable byte at offset {error.start}); "
            "convert it or drop it from data.sources"
        ) from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror}") from None


def _jsonl(path: Path, name: str) -> list[Document]:
    documents = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise BadInput(f"{path}:{number}: not valid JSON ({error.msg})") from None
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise BadInput(f'{path}:{number}: no "text" field with a string value')
        documents.append(Document(f"{name}:{number}", text))
    return documents


def _name(path: Path, root: Path) -> str:
    """Documents are named relative to the data root, so a copied home splits the same way."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _files(source: str, home: Path) -> list[Path]:
    try:
        pattern = Path(source).expanduser()
    except RuntimeError as error:  # "~nosuchuser/x"
        raise BadInput(f"data.sources: {source!r}: {error}") from None
    if not pattern.is_absolute():
        pattern = home / pattern
    if glob.has_magic(str(pattern)):
        matches = [Path(p) for p in sorted(glob.glob(str(pattern), recursive=True))]
        matches = [p for p in matches if p.is_file() and p.suffix in SUFFIXES]
        if not matches:
            raise BadInput(f"data.sources: {source!r} matches no .txt, .md or .jsonl file")
        return matches
    if pattern.is_dir():
        matches = sorted(p for p in pattern.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        if not matches:
            raise BadInput(f"data.sources: folder {pattern} holds no .txt, .md or .jsonl file")
        return matches
    if not pattern.exists():
        raise BadInput(f"data.sources: {pattern} does not exist")
    if pattern.suffix not in SUFFIXES:
        raise BadInput(f"data.sources: {pattern}: unsupported file type {pattern.suffix!r}; use .txt, .md or .jsonl")
    return [pattern]


def documents(sources: tuple[str, ...], home: Path, max_bytes: int = 0) -> list[Document]:
    found: list[Document] = []
    for source in sources:
        if source == "builtin:docs":
            found += builtin_docs()
        elif source == "builtin:stdlib":
            found += builtin_stdlib()
        elif source.startswith("builtin:"):
            raise BadInput(f"data.sources: unknown builtin {source!r}; use builtin:docs or builtin:stdlib")
        else:
            for path in _files(source, home):
                name = _name(path, home)
                found += _jsonl(path, name) if path.suffix == ".jsonl" else [Document(name, _read_text(path))]
    found = [d for d in found if d.text]
    if max_bytes:
        kept: list[Document] = []
        total = 0
        for document in found:
            size = len(document.text.encode("utf-8"))
            if kept and total + size > max_bytes:
                break
            kept.append(document)
            total += size
        found = kept
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
