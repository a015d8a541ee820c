"""``runs/<ID>-blocks.jsonl``: every evaluation of the main track, block by block, so that two evaluations of the
same blocks can be paired after the fact (``show A B``). One JSON object per evaluation: its ``step``, the number of
``blocks``, the ``digest`` of the blocks' tokens in the order read (two evaluations with the same digest read the
same blocks), and three little-endian arrays in base64: each block's summed nats (``nats``, float64), its target
tokens (``targets``, int32) and their bytes (``bytes``, int32): 16 bytes a block before base64. Cut back on resume
with the run file (``cut``); ``rm`` removes it with the run files (its name is a track's, ``-blocks``). Torch-free
and numpy-free.

``at_step`` (what ``show A B`` needs: one evaluation, usually the newest) reads the file backward from its end, a
megabyte at a time, and parses only the lines it passes: the bytes from the end back to the evaluation wanted, never
the whole file (a file near a gigabyte was read whole, 2.4 GB of memory and 20 s, for its last line). Its steps
increase along the file (``cut`` keeps it so), so the walk stops at the first evaluation before the step wanted."""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.core.errors import Refused
from octlm.core.fsutil import open_regular
from octlm.store.runs import runfile

SUFFIX = "-blocks"
FORMAT = "octlm-eval-blocks-v1"
MAX_BLOCKS = 10_000_000
MAX_LINE = 1 << 28  # one evaluation's line: MAX_BLOCKS blocks are 160 MB, 214 MB in base64
CHUNK = 1 << 20  # read backward this many bytes at a time


@dataclass(frozen=True)
class BlockEvaluation:
    """One evaluation as the file keeps it."""

    step: int
    digest: str
    nats: list[float]
    targets: list[int]
    target_bytes: list[int]

    @property
    def blocks(self) -> int:
        return len(self.nats)


def path_for(run_file: Path) -> Path:
    """The blocks file beside a run file: ``runs/<ID>.jsonl`` -> ``runs/<ID>-blocks.jsonl``."""
    return run_file.with_name(run_file.stem + SUFFIX + run_file.suffix)


def _pack(kind: str, values: Sequence[float] | Sequence[int]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}{kind}", *values)).decode("ascii")


def _unpack(kind: str, text: object, count: int) -> list[Any]:
    if not isinstance(text, str):
        raise ValueError("not base64 text")
    raw = base64.b64decode(text, validate=True)
    if len(raw) != count * struct.calcsize(f"<{kind}"):
        raise ValueError("of another length than its blocks")
    return list(struct.unpack(f"<{count}{kind}", raw))


def append(path: Path, evaluation: BlockEvaluation) -> None:
    """Add one evaluation durably (never through a link, only to a regular file)."""
    record = {
        "format": FORMAT,
        "step": evaluation.step,
        "blocks": evaluation.blocks,
        "digest": evaluation.digest,
        "nats": _pack("d", evaluation.nats),
        "targets": _pack("i", evaluation.targets),
        "bytes": _pack("i", evaluation.target_bytes),
    }
    runfile.append(path, record)  # type: ignore[arg-type]  # a record of its own kind, appended as a run file's


def cut(path: Path, step: int) -> None:
    """Keep only the evaluations at or before ``step``; nothing to do where there is no file."""
    if path.exists():
        runfile.cut(path, step)


def read(path: Path) -> list[BlockEvaluation]:
    """Every well-formed evaluation of the file, in order ([] when there is none); a malformed line is skipped."""
    return [found for record in runfile.json_objects(path) if (found := _evaluation(record)) is not None]


def _evaluation(record: object) -> BlockEvaluation | None:
    """The evaluation a parsed line holds, or None where it is not a well-formed one."""
    if not isinstance(record, dict):
        return None
    count, step, digest = record.get("blocks"), record.get("step"), record.get("digest")
    if record.get("format") != FORMAT or not isinstance(count, int) or not 0 < count <= MAX_BLOCKS:
        return None
    if not isinstance(step, int) or not isinstance(digest, str):
        return None
    try:
        nats = _unpack("d", record.get("nats"), count)
        targets, target_bytes = _unpack("i", record.get("targets"), count), _unpack("i", record.get("bytes"), count)
    except (TypeError, ValueError, struct.error):
        return None
    return BlockEvaluation(step=step, digest=digest, nats=nats, targets=targets, target_bytes=target_bytes)


def at_step(path: Path, step: int | None) -> BlockEvaluation | None:
    """The newest evaluation at ``step`` (None: the newest of all), or None; read from the end (see the module)."""
    try:
        fd = open_regular(path, max_bytes=None, follow=False)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Refused(f"run file {path} cannot be read: {error.strerror}") from None
    try:
        for line in _lines_from_end(fd):
            try:
                found = _evaluation(json.loads(line)) if line.strip() else None
            except (ValueError, RecursionError):
                continue  # a line cut short by a crash, or not octlm's
            if found is not None and (step is None or found.step <= step):
                return found if step is None or found.step == step else None
        return None
    finally:
        os.close(fd)


def _lines_from_end(fd: int) -> Iterator[bytes]:
    """The file's lines, the last first, read backward ``CHUNK`` bytes at a time: a line is read once, and the walk
    ends at one longer than ``MAX_LINE`` (no evaluation is)."""
    pieces: list[bytes] = []  # the line being gathered, its last piece first
    position, gathered = os.fstat(fd).st_size, 0
    while position > 0:
        start = max(0, position - CHUNK)
        chunk, position = os.pread(fd, position - start, start), start
        end = len(chunk)
        while (cut := chunk.rfind(b"\n", 0, end)) >= 0:
            yield b"".join([chunk[cut + 1 : end], *reversed(pieces)])
            pieces, gathered, end = [], 0, cut
        pieces.append(chunk[:end])
        gathered += end
        if gathered > MAX_LINE:
            return
    yield b"".join(reversed(pieces))
