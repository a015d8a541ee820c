"""``runs/<ID>.jsonl``: one JSON object per logged step (every ``training.log_interval`` steps, with the
evaluation's fields at evaluation steps), cut back on resume so it never holds duplicated or orphaned
steps. The registry's ``metrics`` table holds the same records and is cut back with it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import cast

from octlm.core.errors import Refused
from octlm.core.fsutil import atomic_write, open_append, read_regular
from octlm.core.records import TIMING_FIELDS, RunRecord

MAX_BYTES = 1 << 30  # about four million records


def read(path: Path) -> list[RunRecord]:
    """The records of a run file ([] when there is none); only a regular file, never a link, is read. A line cut
    short by a crash ends the file, one that is JSON but not an object is skipped (not octlm's); the values are as
    written (a reader checks the type of what it uses: the file may have been edited by hand)."""
    return [cast(RunRecord, record) for record in json_objects(path)]


def json_objects(path: Path) -> list[dict[str, object]]:
    """The JSON objects of a file of one per line ([] when there is none): up to the first line that is not JSON,
    skipping JSON that is not an object."""
    try:
        text = read_regular(path, max_bytes=MAX_BYTES, follow=False).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise Refused(f"run file {path} cannot be read: {error.strerror}") from None
    records: list[dict[str, object]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            break
        if isinstance(record, dict):
            records.append(record)
    return records


def cut(path: Path, step: int) -> None:
    """Keep only the records at or before ``step`` (atomically)."""
    kept = [r for r in read(path) if r.get("step", 0) <= step]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(record) + "\n" for record in kept).encode("utf-8"))


def append(path: Path, record: RunRecord) -> None:
    """Add one record durably; never through a link, only to a regular file."""
    with os.fdopen(open_append(path), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def without_timings(records: list[RunRecord]) -> list[RunRecord]:
    return [cast(RunRecord, {k: v for k, v in record.items() if k not in TIMING_FIELDS}) for record in records]
