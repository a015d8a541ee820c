"""Text files and JSON Lines, plain or compressed: a text file is one document, read whole at each use (as before);
a JSON Lines file is read line by line as it decompresses, each record read again by its byte range (in a compressed
file, by its offset in the decompressed stream, read forward from where the last read ended)."""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from octlm.core.errors import BadInput
from octlm.data.formats.files import At, Budget, DataFile, Held, Scan, decoded, pack, unpacked


class _Whole:
    """A compressed text file, one document: decompressed whole at each read (as a text file is read whole)."""

    def __init__(self, file: DataFile, codec: str):
        self.file, self.codec = file, codec

    def text(self, offset: int = 0, length: int = -1) -> str:  # the whole file, as its one document
        with self.file.open() as handle:
            return decoded(b"".join(unpacked(handle, self.file.path, self.codec)), self.file.path)


def whole(codec: str) -> Scan:
    def scan(file: DataFile, field: str, budget: Budget) -> Iterator[tuple[str, At, int]]:
        if codec:
            reader: Any = _Whole(file, codec)
            with file.open() as handle:
                payload = b"".join(unpacked(handle, file.path, codec, budget))
        else:
            reader, payload = file, budget.whole(file.path)
        yield "", (reader, 0, -1), len(decoded(payload, file.path).encode("utf-8", "surrogatepass"))

    return scan


class _Lines:
    """A JSON Lines file's records, each read again by its byte range (in a compressed file: read forward through
    the decompressed stream, started again for a record behind the last one read)."""

    def __init__(self, file: DataFile, codec: str, field: str):
        self.file, self.codec, self.field = file, codec, field
        self.handle: BinaryIO | None = None
        self.stream: Iterator[bytes] = iter(())
        self.start, self.held = 0, b""  # where ``held`` (bytes of the stream) starts in it

    def drop(self) -> None:
        if self.handle is not None:
            self.handle.close()
        self.handle, self.stream, self.start, self.held = None, iter(()), 0, b""

    def text(self, offset: int, length: int) -> str:
        return json.loads(self.read(offset, length).decode("utf-8"))[self.field]

    def read(self, offset: int, length: int) -> bytes:
        if not self.codec:
            return self.file.read(offset, length)
        Held.take(self)
        if self.handle is None or offset < self.start:
            self.drop()
            self.handle = self.file.open()
            self.stream = unpacked(self.handle, self.file.path, self.codec)
        self.file.check(self.handle)
        while self.start + len(self.held) < offset + length:
            chunk, cut = next(self.stream, None), min(len(self.held), max(0, offset - self.start))
            if chunk is None:
                raise BadInput(
                    f"data.sources: {self.file.path} changed while octlm was using it; run the command again"
                )
            self.held, self.start = self.held[cut:] + chunk, self.start + cut
        return self.held[offset - self.start : offset - self.start + length]


def _lines(chunks: Iterable[bytes], path: Path) -> Iterator[tuple[int, str]]:
    """Each line of a stream of UTF-8 with its ending and the byte offset it starts at, split as ``str.splitlines``
    splits the whole text (a ``\\r\\n`` across two chunks is one ending)."""
    decoder, held, offset, seen = codecs.getincrementaldecoder("utf-8")(), "", 0, 0
    for chunk in itertools.chain(chunks, [b""]):
        try:
            lines = (held + decoder.decode(chunk, final=not chunk)).splitlines(keepends=True)
        except UnicodeDecodeError as error:
            where = seen - len(decoder.getstate()[0]) + error.start
            raise BadInput(
                f"{path}: not UTF-8 text (undecodable byte at offset {where}); convert it or drop it"
            ) from None
        seen += len(chunk)
        held = lines.pop() if lines and chunk else ""
        for line in lines:
            yield offset, line
            offset += len(line.encode("utf-8", "surrogatepass"))


def _parsed(line: str, where: str) -> object:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, RecursionError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
        raise BadInput(f"{where}: not valid JSON ({reason}); fix the line or drop the file from data.sources") from None


def _size(record: object, field: str, where: str) -> int:
    """The bytes of UTF-8 in a record's text."""
    value = record.get(field) if isinstance(record, dict) else None
    if not isinstance(value, str):
        raise BadInput(
            f'{where}: no "{field}" field with a string value; set data.text_field to the field with the text'
        )
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise BadInput(
            f"{where}: the text is not valid Unicode (a lone surrogate {value[error.start]!a} at "
            f"character {error.start}); fix or drop the line"
        ) from None


def json_lines(codec: str) -> Scan:
    def scan(file: DataFile, field: str, budget: Budget) -> Iterator[tuple[str, At, int]]:
        reader, path = _Lines(file, codec, field), file.path
        with file.open() as handle:
            for number, (offset, ended) in enumerate(_lines(unpacked(handle, path, codec, budget), path), start=1):
                if ended.strip():
                    line = ended.splitlines()[0]  # without its line ending
                    size = _size(_parsed(line, f"{path}:{number}"), field, f"{path}:{number}")
                    yield f":{number}", (reader, offset, len(line.encode("utf-8", "surrogatepass"))), size

    return scan


def write_texts(codec: str, suffix: str) -> Callable[[Path, Sequence[str], str], Path]:
    """A folder of one file per text, named ``doc0{suffix}``, ...."""

    def write(folder: Path, texts: Sequence[str], field: str) -> Path:
        (folder / "texts").mkdir()
        for number, text in enumerate(texts):
            path = folder / "texts" / f"doc{number}{suffix}"
            path.write_bytes(pack(text.encode("utf-8"), codec, path))
        return folder / "texts"

    return write


def write_lines(codec: str, suffix: str) -> Callable[[Path, Sequence[str], str], Path]:
    """One file of one record a line, each its number (``id``) and its text under ``field``."""

    def write(folder: Path, texts: Sequence[str], field: str) -> Path:
        path = folder / f"corpus{suffix}"
        lines = (json.dumps({"id": number, field: text}) + "\n" for number, text in enumerate(texts))
        path.write_bytes(pack("".join(lines).encode(), codec, path))
        return path

    return write
