"""``runs/<ID>-blocks.jsonl``: every evaluation of the main track, block by block, so that two evaluations of the
same blocks can be paired after the fact (``show A B``). One JSON object per evaluation: its ``step``, the number of
``blocks``, the ``digest`` of the blocks' tokens in the order read (two evaluations with the same digest read the
same blocks), and three little-endian arrays in base64: each block's summed nats (``nats``, float64), its target
tokens (``targets``, int32) and their bytes (``bytes``, int32): 16 bytes a block before base64. Cut back on resume
with the run file (``cut``); ``rm`` removes it with the run files (its name is a track's, ``-blocks``). Torch-free
and numpy-free."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.store.runs import runfile

SUFFIX = "-blocks"
FORMAT = "octlm-eval-blocks-v1"
MAX_BLOCKS = 10_000_000


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
    found = []
    for record in runfile.json_objects(path):
        count, step, digest = record.get("blocks"), record.get("step"), record.get("digest")
        if record.get("format") != FORMAT or not isinstance(count, int) or not 0 < count <= MAX_BLOCKS:
            continue
        if not isinstance(step, int) or not isinstance(digest, str):
            continue
        try:
            nats = _unpack("d", record.get("nats"), count)
            targets, target_bytes = _unpack("i", record.get("targets"), count), _unpack("i", record.get("bytes"), count)
        except (TypeError, ValueError, struct.error):
            continue
        found.append(BlockEvaluation(step=step, digest=digest, nats=nats, targets=targets, target_bytes=target_bytes))
    return found


def at_step(path: Path, step: int | None) -> BlockEvaluation | None:
    """The evaluation at ``step`` (None: the newest), or None."""
    found = read(path)
    if step is None:
        return found[-1] if found else None
    return next((item for item in reversed(found) if item.step == step), None)
