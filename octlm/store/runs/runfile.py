"""``runs/<ID>.jsonl``: one JSON object per logged step (every ``training.log_interval`` steps, with the
evaluation's fields at evaluation steps), cut back on resume so it never holds duplicated or orphaned
steps. The registry's ``metrics`` table holds the same records and is cut back with it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from octlm.core.errors import Refused
from octlm.core.fsutil import atomic_write, open_append, read_regular
from octlm.core.records import TIMING_FIELDS, RunRecord

MAX_BYTES = 1 << 30  # about four million records


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a run file ([] when there is none); only a regular file, never a link, is read."""
    try:
        text = read_regular(path, max_bytes=MAX_BYTES, follow=False).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise Refused(f"run file {path} cannot be read: {error.strerror}") from None
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError):
            break  # a line cut short by a crash (or not octlm's) ends the file
    return records


def cut(path: Path, step: int) -> None:
    """Keep only the records at or before ``step`` (atomically)."""
    kept = [r for r in read(path) if isinstance(r, dict) and r.get("step", 0) <= step]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(record) + "\n" for record in kept).encode("utf-8"))


def append(path: Path, record: RunRecord) -> None:
    """Add one record durably; never through a link, only to a regular file."""
    with os.fdopen(open_append(path), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def without_timings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in record.items() if k not in TIMING_FIELDS} for record in records]
