"""Parquet and Arrow (the files a ``datasets`` object's ``save_to_disk`` writes), read with pyarrow from the data
extra: one row group (or record batch) at a time, a document a row, its text in the column ``data.text_field``
names, each read again by its row group and index (the group last read held as text)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from octlm.core.errors import BadInput
from octlm.data.formats.files import At, Budget, DataFile, Held, Scan, damage, module

END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the end-of-stream marker every Arrow stream writer closes with


def _parquet(handle: BinaryIO, field: str, path: Path) -> tuple[Any, Callable[[int], Iterator[Any]]]:
    """The file's schema, and its row groups' text columns from a given one on."""
    source = module("pyarrow.parquet", path).ParquetFile(handle)
    groups = range(source.num_row_groups)
    return source.schema_arrow, lambda start: (
        source.read_row_group(g, columns=[field]).column(0) for g in groups[start:]
    )


def _arrow(handle: BinaryIO, field: str, path: Path) -> tuple[Any, Callable[[int], Iterator[Any]]]:
    """The file's schema, and its record batches' text columns from a given one on (IPC stream or file format)."""
    ipc, head = module("pyarrow.ipc", path), handle.read(6)
    handle.seek(0)
    if head == b"ARROW1":
        source = ipc.open_file(handle)
        return source.schema, lambda start: (
            source.get_batch(i).column(field) for i in range(start, source.num_record_batches)
        )
    handle.seek(-len(END), os.SEEK_END)
    if handle.read(len(END)) != END:  # a stream cut between two batches would read as a shorter one
        raise ValueError("no end-of-stream marker: the stream is cut short")
    handle.seek(0)
    stream = ipc.open_stream(handle)
    return stream.schema, lambda start: (batch.column(field) for batch in itertools.islice(stream, start, None))


class _Columns:
    """A Parquet or Arrow file's rows, each read again by its row group (or batch) and index; the group last read is
    held as text."""

    def __init__(self, file: DataFile, field: str, kind: str):
        self.file, self.field, self.kind = file, field, kind
        self.groups: Iterator[Any] | None = None
        self.handle: BinaryIO | None = None
        self.at, self.rows = -1, [""]

    def drop(self) -> None:
        if self.handle is not None:
            self.handle.close()
        self.handle, self.groups, self.at, self.rows = None, None, -1, [""]

    def open(self, start: int = 0) -> Iterator[Any]:
        self.drop()
        self.handle = self.file.open()
        with damage(self.file.path, self.kind):
            schema, groups = (_parquet if self.kind == "Parquet" else _arrow)(self.handle, self.field, self.file.path)
        _check_column(schema, self.field, self.file.path)
        self.groups, self.at = groups(start), start - 1
        return self.groups

    def text(self, group: int, index: int) -> str:
        Held.take(self)
        if self.groups is None or group < self.at or self.kind == "Parquet" and group > self.at + 1:
            self.open(group)  # a Parquet file's row groups are read where they lie; an Arrow stream's in turn
        assert self.handle is not None and self.groups is not None
        self.file.check(self.handle)
        with damage(self.file.path, self.kind):
            while self.at < group:
                self.rows, self.at = next(self.groups).to_pylist(), self.at + 1
        return self.rows[index]


def _check_column(schema: Any, field: str, path: Path) -> None:
    types = {name: str(schema.field(name).type) for name in schema.names}
    strings = [name for name, kind in types.items() if kind in ("string", "large_string", "string_view")]
    named = ", ".join(strings) or "none"
    if field not in types:
        raise BadInput(f"{path}: no column {field!r} (its text columns: {named}); set data.text_field to one of them")
    if field not in strings:
        raise BadInput(
            f"{path}: column {field!r} holds {types[field]}, not text (its text columns: {named}); set data.text_field"
        )


def columns(kind: str) -> Scan:
    def scan(file: DataFile, field: str, budget: Budget) -> Iterator[tuple[str, At, int]]:
        reader, rows, compute = _Columns(file, field, kind), 0, module("pyarrow.compute", file.path)
        try:
            groups = reader.open()
            for group in itertools.count():
                with damage(file.path, kind):
                    column = next(groups, None)
                    if column is None:
                        break
                    column.validate(full=True)  # valid UTF-8, offsets in range
                    sizes = compute.binary_length(column).to_pylist()
                budget.take(sum(size or 0 for size in sizes), file.path)
                yield from ((f":{rows + i + 1}", (reader, group, i), size) for i, size in enumerate(sizes) if size)
                rows += len(sizes)
        finally:
            reader.drop()
        if not rows:
            raise BadInput(f"{file.path}: an empty {kind} file (no rows); drop it from data.sources")

    return scan


def _table(folder: Path, texts: Sequence[str], field: str) -> Any:
    """The texts as a table (beside an ``id`` column), in three row groups or batches."""
    pyarrow = module("pyarrow", folder)
    table = pyarrow.table(
        {"id": pyarrow.array(range(len(texts)), pyarrow.int64()), field: pyarrow.array(texts, pyarrow.string())}
    )
    return table, max(1, -(-len(texts) // 3))


def write_parquet(folder: Path, texts: Sequence[str], field: str) -> Path:
    (table, rows), path = _table(folder, texts, field), folder / "corpus.parquet"
    module("pyarrow.parquet", path).write_table(table, path, row_group_size=rows)
    return path


def write_saved(folder: Path, texts: Sequence[str], field: str) -> Path:
    """The layout ``datasets``' ``save_to_disk`` writes: ``state.json`` naming the Arrow stream files."""
    (table, rows), saved = _table(folder, texts, field), folder / "saved"
    saved.mkdir()
    with module("pyarrow.ipc", saved).new_stream(str(saved / "data-00000-of-00001.arrow"), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (saved / "dataset_info.json").write_text(json.dumps({"features": {field: {"dtype": "string", "_type": "Value"}}}))
    return saved
