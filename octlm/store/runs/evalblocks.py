"""``runs/<ID>-blocks.jsonl``: every evaluation of the main track, block by block, so that two evaluations of the
same blocks can be paired after the fact (``show A B``). One JSON object per evaluation: its ``step``, the number of
``blocks``, the ``digest`` of the blocks' tokens in the order read (two evaluations with the same digest read the
same blocks), and three little-endian arrays in base64: each block's summed nats (``nats``, float64), its target
tokens (``targets``, int32) and their bytes (``bytes``, int32), and its cluster (below): at most 20 bytes a block
before base64. Cut back on resume with the run file (``cut``); ``rm`` removes it with the run files (its name is a
track's, ``-blocks``). Torch-free and numpy-free.

**Formats.** ``octlm-eval-blocks-v2`` (written since issue 46) adds the clusters the evaluation's errors are over:
``cluster_unit`` (``documents``, ``chunks`` or ``blocks``, as ``data.blocks.TokenBlocks.cluster_ids`` decides) and,
unless the blocks are their own units, each block's cluster (``clusters``, int32 in base64, numbered from 0); and a
``checksum``: the sha256 of the format, step, digest, count, unit and the arrays as written (``_checksum``), so that
an array edited or damaged after the run is told from the one the run wrote (``BlockEvaluation.checked``). A file of
``octlm-eval-blocks-v1`` (no clusters, no checksum) is still read: its blocks are its units (``cluster_unit``
``blocks``), and ``checked`` None. ``disagreement`` says why an evaluation read here must not carry a verdict: its
checksum does not match, or its sums are not the evaluation the run file recorded at its step (the views then fall
back to the unpaired error, saying so).

``at_step`` (what ``show A B`` needs: one evaluation, usually the newest) reads the file backward from its end, a
megabyte at a time, and parses only the lines it passes: the bytes from the end back to the evaluation wanted, never
the whole file (a file near a gigabyte was read whole, 2.4 GB of memory and 20 s, for its last line). Its steps
increase along the file (``cut`` keeps it so), so the walk stops at the first evaluation before the step wanted."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.core.errors import Refused
from octlm.core.fsutil import open_regular
from octlm.core.records import RunRecord
from octlm.store.runs import runfile

SUFFIX = "-blocks"
FORMAT = "octlm-eval-blocks-v2"  # written: with each block's cluster and a checksum
FORMAT_V1 = "octlm-eval-blocks-v1"  # still read: no clusters (its blocks are its units), no checksum
UNITS = ("documents", "chunks", "blocks")
TOLERANCE = 1e-5  # relative: how far the file's loss and bits per byte may be from the run's (float32 sums)
MAX_BLOCKS = 10_000_000
MAX_LINE = 1 << 28  # one evaluation's line: MAX_BLOCKS blocks are 200 MB, 267 MB in base64
CHUNK = 1 << 20  # read backward this many bytes at a time


@dataclass(frozen=True)
class BlockEvaluation:
    """One evaluation as the file keeps it: with each block's cluster (``clusters``, None where the blocks are their
    own units: ``cluster_unit`` ``blocks``, as every evaluation of the first format) and, as read, whether its
    checksum matched its arrays (``checked``: None where there was none to check, a file of the first format or an
    evaluation made here)."""

    step: int
    digest: str
    nats: list[float]
    targets: list[int]
    target_bytes: list[int]
    clusters: list[int] | None = None
    cluster_unit: str = "blocks"
    checked: bool | None = field(default=None, compare=False)

    @property
    def blocks(self) -> int:
        return len(self.nats)

    @property
    def units(self) -> list[int]:
        """Each block's cluster: ``clusters``, or each block its own."""
        return self.clusters if self.clusters is not None else list(range(self.blocks))


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
    """Add one evaluation durably (never through a link, only to a regular file), in the current format."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "step": evaluation.step,
        "blocks": evaluation.blocks,
        "digest": evaluation.digest,
        "nats": _pack("d", evaluation.nats),
        "targets": _pack("i", evaluation.targets),
        "bytes": _pack("i", evaluation.target_bytes),
        "cluster_unit": evaluation.cluster_unit,
    }
    if evaluation.clusters is not None:
        record["clusters"] = _pack("i", evaluation.clusters)
    record["checksum"] = _checksum(record)
    runfile.append(path, record)  # type: ignore[arg-type]  # a record of its own kind, appended as a run file's


def _checksum(record: dict[str, Any]) -> str:
    """The sha256 of what a line of the current format says, its arrays as written (base64), one field a line."""
    keys = ("format", "step", "digest", "blocks", "cluster_unit", "nats", "targets", "bytes", "clusters")
    return hashlib.sha256("\n".join(str(record.get(key, "")) for key in keys).encode()).hexdigest()


def cut(path: Path, step: int) -> None:
    """Keep only the evaluations at or before ``step``; nothing to do where there is no file."""
    if path.exists():
        runfile.cut(path, step)


def read(path: Path) -> list[BlockEvaluation]:
    """Every well-formed evaluation of the file, in order ([] when there is none); a malformed line is skipped."""
    return [found for record in runfile.json_objects(path) if (found := _evaluation(record)) is not None]


def _evaluation(record: object) -> BlockEvaluation | None:
    """The evaluation a parsed line holds, or None where it is not a well-formed one (of either format); a line of
    the current format whose checksum does not match its arrays is read, ``checked`` False."""
    if not isinstance(record, dict) or record.get("format") not in (FORMAT, FORMAT_V1):
        return None
    count, step, digest = record.get("blocks"), record.get("step"), record.get("digest")
    if not isinstance(count, int) or not 0 < count <= MAX_BLOCKS:
        return None
    if not isinstance(step, int) or not isinstance(digest, str):
        return None
    unit, packed = (
        ("blocks", None) if record["format"] == FORMAT_V1 else (record.get("cluster_unit"), record.get("clusters"))
    )
    if unit not in UNITS or (packed is None) != (unit == "blocks"):
        return None
    try:
        nats = _unpack("d", record.get("nats"), count)
        targets, target_bytes = _unpack("i", record.get("targets"), count), _unpack("i", record.get("bytes"), count)
        clusters = None if packed is None else _unpack("i", packed, count)
    except (TypeError, ValueError, struct.error):
        return None
    if clusters is not None and not all(0 <= c < count for c in clusters):
        return None
    checked = record.get("checksum") == _checksum(record) if record["format"] == FORMAT else None
    return BlockEvaluation(step, digest, nats, targets, target_bytes, clusters, str(unit), checked)


def disagreement(evaluation: BlockEvaluation, record: RunRecord) -> str | None:
    """Why ``evaluation`` must not carry a verdict, or None: its checksum does not match its arrays, or its sums are
    not the evaluation ``record`` (the run file's record of its step) says the run made: another count of target
    tokens, a loss or bits per byte further than ``TOLERANCE`` (relative) from the run's, other clusters."""
    if evaluation.checked is False:
        return "its checksum does not match its arrays: edited or damaged since the run wrote it"
    tokens, recorded = sum(evaluation.targets), record.get("eval_tokens")
    if recorded is not None and tokens != recorded:
        return f"its {tokens:,} target tokens are not the {recorded:,} the run recorded at step {evaluation.step}"
    nats = math.fsum(evaluation.nats)
    loss, run_loss = (nats / tokens if tokens else math.nan), record.get("eval_loss")
    if run_loss is None or not math.isclose(loss, run_loss, rel_tol=TOLERANCE):
        return f"its loss, {loss:.6f}, is not the {run_loss} the run recorded at step {evaluation.step}"
    bits, run_bits = nats / (math.log(2) * sum(evaluation.target_bytes) or math.nan), record.get("bits_per_byte")
    if run_bits is not None and math.isfinite(run_bits) and not math.isclose(bits, run_bits, rel_tol=TOLERANCE):
        return f"its bits per byte, {bits:.6f}, are not the {run_bits:.6f} the run recorded at step {evaluation.step}"
    clusters, unit = record.get("eval_clusters"), record.get("eval_cluster_unit")
    if clusters is not None and (len(set(evaluation.units)), evaluation.cluster_unit) != (clusters, unit):
        return f"its clusters are not the {clusters} {unit} the run recorded at step {evaluation.step}"
    return None


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
