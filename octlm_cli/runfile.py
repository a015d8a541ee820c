"""``runs/<ID>.jsonl``: one JSON object per evaluation, cut back on resume so it never holds
duplicated or orphaned steps."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .fsutil import atomic_write

TIMING_FIELDS = ("elapsed_seconds", "tokens_per_second")


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a crash ends the file
    return records


def cut(path: Path, step: int) -> None:
    """Keep only the records at or before ``step`` (atomically)."""
    kept = [r for r in read(path) if isinstance(r, dict) and r.get("step", 0) <= step]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(record) + "\n" for record in kept).encode("utf-8"))


def append(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def without_timings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in record.items() if k not in TIMING_FIELDS} for record in records]
