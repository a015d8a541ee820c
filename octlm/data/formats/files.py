"""Data files as ``data.sources``' readers open them: a file as it was when the corpus was read (``DataFile``: a
later read of a changed file is refused), the one cap on the bytes of text read in all (``Budget``), decompression
(gzip from the standard library, zstandard from the data extra) read a chunk at a time, the packages of the data extra
imported only when a source needs them, damage as one line naming the file, and what was opened last to read a
document again (``Held``), kept for the next document, which is usually the next one."""

from __future__ import annotations

import gzip
import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from octlm.core.errors import BadInput
from octlm.core.fsutil import UnsafeFile, open_regular, read_regular

CHUNK = 1 << 20  # bytes read (or decompressed) at a time
EXTRA = "install the data extra: pip install 'octlm[data]'"


@dataclass(frozen=True)
class DataFile:
    """A data file as it was when the corpus was read: a later read of a different file is refused."""

    path: Path
    size: int
    mtime_ns: int
    newlines: bool = False  # read as ``Path.read_text`` reads (\r\n and \r become \n): builtin:stdlib's modules

    @classmethod
    def seen(cls, path: Path, newlines: bool = False) -> DataFile:
        info = os.stat(path)
        return cls(path, info.st_size, info.st_mtime_ns, newlines)

    def text(self, offset: int = 0, length: int = -1) -> str:  # the whole file, as its one document
        text = self.read().decode("utf-8")
        return text.replace("\r\n", "\n").replace("\r", "\n") if self.newlines else text

    def read(self, offset: int = 0, length: int = -1) -> bytes:
        with self.open() as handle:
            return os.pread(handle.fileno(), self.size if length < 0 else length, offset)

    def open(self) -> BinaryIO:
        """The file, opened only if it is still the regular file it was (checked again by ``check``)."""
        try:
            handle = os.fdopen(open_regular(self.path, max_bytes=self.size), "rb")
        except OSError as error:
            why = f"cannot be read again ({error.strerror})"
            raise BadInput(f"data.sources: {self.path} {why}; run the command again") from None
        self.check(handle)
        return handle

    def check(self, handle: BinaryIO) -> None:
        info = os.fstat(handle.fileno())
        if (info.st_size, info.st_mtime_ns) != (self.size, self.mtime_ns):
            handle.close()
            raise BadInput(f"data.sources: {self.path} changed while octlm was using it; run the command again")


class Budget:
    """The bytes of text read in all, within one cap."""

    def __init__(self, cap: int):
        self.cap, self.left = cap, cap

    def take(self, count: int, path: Path) -> None:
        self.left -= count
        if self.left < 0:
            raise BadInput(
                f"data.sources: {path}: the corpus is larger than the cap of {self.cap} bytes; set data.max_bytes"
            )

    def whole(self, path: Path) -> bytes:
        """A plain file's bytes, never more than what is left of the cap."""
        try:
            payload = read_regular(path, max_bytes=max(self.left, 0))
        except UnsafeFile as error:
            if error.too_large:
                self.take(self.left + 1, path)
            raise BadInput(f"data.sources: {path}: {error.strerror}; data sources must be regular files") from None
        except OSError as error:
            raise BadInput(f"{path}: cannot be read: {error.strerror}") from None
        self.take(len(payload), path)
        return payload


At = tuple[Any, int, int]  # where a document's text is read again: a reader with ``text(a, b)``, and a and b
Scan = Callable[[DataFile, str, Budget], Iterator[tuple[str, At, int]]]  # (suffix of its name, where, bytes of text)


@contextmanager
def damage(path: Path, kind: str) -> Iterator[None]:
    """A file that is not what its name says, or cut short, as one line naming it."""
    try:
        yield
    except (BadInput, MemoryError):
        raise
    except Exception as error:  # gzip, zlib, zstandard and pyarrow each raise their own
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        raise BadInput(
            f"data.sources: {path}: not a readable {kind} file, damaged or cut short ({reason}); "
            "fetch or write it again, or drop it from data.sources"
        ) from None


def module(name: str, path: Path) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise BadInput(f"data.sources: {path} needs {name.split('.')[0]} to be read; {EXTRA}") from None


def chunks(handle: BinaryIO, codec: str, path: Path) -> Iterator[bytes]:
    """The file's bytes, decompressed by ``codec`` ("", "gzip" or "zstd"), ``CHUNK`` at a time."""
    if codec == "gzip":
        with gzip.GzipFile(fileobj=handle) as stream:
            while chunk := stream.read(CHUNK):
                yield chunk
    elif codec == "zstd":
        decompressor, frame = module("zstandard", path).ZstdDecompressor(), None
        while data := handle.read(CHUNK):
            while data:
                frame = frame or decompressor.decompressobj()
                yield frame.decompress(data)
                data, frame = (frame.unused_data, None) if frame.eof else (b"", frame)
        if frame is not None:
            raise EOFError("the last frame ends before its end")
    else:
        while chunk := handle.read(CHUNK):
            yield chunk


def unpacked(handle: BinaryIO, path: Path, codec: str, budget: Budget | None = None) -> Iterator[bytes]:
    """An open file's decompressed bytes, counted against ``budget``; damage is one line."""
    with damage(path, {"gzip": "gzip", "zstd": "zstandard"}.get(codec, "text")):
        for chunk in chunks(handle, codec, path):
            if budget is not None:
                budget.take(len(chunk), path)
            yield chunk


def decoded(payload: bytes, path: Path) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"undecodable byte at offset {error.start}"
        raise BadInput(f"{path}: not UTF-8 text ({where}); convert it or drop it from data.sources") from None


class Held:
    """What was opened last to read a document again (a decompressed stream, a row group), kept for the next one."""

    owner: Any = None

    @classmethod
    def take(cls, owner: Any) -> None:
        if cls.owner is not owner and cls.owner is not None:
            cls.owner.drop()
        cls.owner = owner

    @classmethod
    def forget(cls) -> None:  # in a forked child (``apart``): never read on through the parent's open files
        if cls.owner is not None:
            cls.owner.drop()
        cls.owner = None


os.register_at_fork(after_in_child=Held.forget)


def pack(payload: bytes, codec: str, path: Path) -> bytes:
    if codec == "gzip":
        return gzip.compress(payload, mtime=0)
    return module("zstandard", path).ZstdCompressor().compress(payload) if codec == "zstd" else payload
