"""Reading an export back (``registry import``, ``unpack``): every record checked (its type, UUIDs, IDs, the
fields its type has and their kinds, the shape of its JSON columns and of its run-file values, as octlm's own rows
have them: tags a list of text, metrics a mapping of numbers, a step a count, a figure a number below 1e300 in
size, or NaN / inf as a diverged run leaves) before anything is written; a schema version newer than this octlm's
is refused. Torch-free. The records themselves are ``records.py``'s.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from pathlib import Path
from typing import Any, cast

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import read_regular
from octlm.core.home import ID_PATTERN, validate_id
from octlm.core.records import NESTED_FIELDS, NUMBER_FIELDS, TEXT_FIELDS
from octlm.exchange.records import ENVELOPE, METRIC_ENTRY, OPTIONAL, REQUIRED, SCHEMA_VERSION, TRACKS, ExportRecord
from octlm.store.base import JSON_COLUMNS

MAX_BYTES = 4 << 30
SHA256 = re.compile(r"[0-9a-f]{64}")
SCALAR = (str, int, float, bool, type(None))
MAX_MAGNITUDE = 1e300  # a finite figure beyond it is no loss, rate or count: plots and sums would overflow
INTEGERS = ("pid", "pid_start", "start_step", "end_step", "target_step", "threads", "size", "tokens", "step")
METRIC_CELLS = ("latest_metrics", "final_metrics", "metrics")  # a mapping of a run record's fields


def read(path: Path) -> list[ExportRecord]:
    """The checked records of an export file; one line for a missing, unreadable or malformed one."""
    try:
        data = read_regular(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror or error}") from None
    return parse(data, str(path))


def parse(data: bytes, origin: str) -> list[ExportRecord]:
    """Every record of ``data`` checked (``check``); BadInput naming the line of the first bad one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{origin}: not an octlm export (not UTF-8 text)") from None
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise BadInput(f"{origin} line {number}: not an octlm export record (not JSON)") from None
        found.append(check(item, f"{origin} line {number}"))
    return found


def check(item: Any, where: str) -> ExportRecord:
    """``item`` if it is a well-formed record of this schema version; Refused for a newer version."""
    if not isinstance(item, dict) or not isinstance(item.get("schema_version"), int):
        raise BadInput(f"{where}: not an octlm export record (no schema_version)")
    if item["schema_version"] > SCHEMA_VERSION:
        raise Refused(
            f"{where}: schema_version {item['schema_version']} is newer than this octlm's ({SCHEMA_VERSION}): "
            "upgrade octlm to read it; nothing was imported"
        )
    kind = item.get("type")
    if not isinstance(kind, str) or kind not in REQUIRED:  # a list or a mapping cannot even be looked up
        raise BadInput(f"{where}: unknown record type {str(kind)[:40]!r}; one of {', '.join(REQUIRED)}")
    for key, wanted in REQUIRED[kind].items():
        if not isinstance(item.get(key), wanted) or isinstance(item.get(key), bool):
            raise BadInput(f"{where}: {kind} record: {key} must be {wanted.__name__}")
    unknown = set(item) - set(ENVELOPE) - set(REQUIRED[kind]) - set(OPTIONAL[kind])
    if unknown:
        raise BadInput(f"{where}: {kind} record: unknown field {sorted(unknown)[0][:40]!r}")
    for key, value in item.items():
        if key not in JSON_COLUMNS and key not in ("records", "metrics") and not isinstance(value, SCALAR):
            raise BadInput(f"{where}: {kind} record: {key} must be a single value")
    _check_values(item, kind, where)
    _check_shapes(item, kind, where)
    return cast(ExportRecord, item)


def _check_values(item: dict[str, Any], kind: str, where: str) -> None:
    for key in ("uuid", "experiment_uuid", "run_uuid"):
        if item.get(key) is not None and not _is_uuid(item[key]):
            raise BadInput(f"{where}: {kind} record: {key} {str(item[key])[:40]!r} is not a UUID")
    if kind == "experiment":
        validate_id(item["id"])
    elif kind == "checkpoint" and (item["step"] < 0 or not SHA256.fullmatch(item["sha256"])):
        raise BadInput(f"{where}: checkpoint record: step must be >= 0 and sha256 64 hex digits")
    elif kind == "run_file":
        if item["track"] not in TRACKS:
            raise BadInput(f"{where}: run_file record: track must be one of {', '.join(TRACKS)}")
        if not all(isinstance(r, dict) for r in item["records"] + item["metrics"]):
            raise BadInput(f"{where}: run_file record: records and metrics must be objects")
        for row in item["metrics"]:
            if set(row) - set(METRIC_ENTRY) or not all(isinstance(v, SCALAR) for v in row.values()):
                raise BadInput(f"{where}: run_file record: a metrics row with unknown fields or nested values")
            if row.get("run_uuid") is not None and not _is_uuid(row["run_uuid"]):
                raise BadInput(f"{where}: run_file record: a metrics row's run_uuid is not a UUID")


def _check_shapes(item: dict[str, Any], kind: str, where: str) -> None:
    """The JSON columns and numbers of ``item`` shaped as octlm writes them; BadInput naming the field."""
    shapes: list[tuple[str, Any, str]] = [
        ("tags", lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of text"),
        ("argv", lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of text"),
        ("former_ids", lambda v: isinstance(v, list) and all(_is_id(t) for t in v), "a list of experiment IDs"),
        ("config_json", lambda v: isinstance(v, dict), "a mapping"),
        ("details", lambda v: isinstance(v, dict), "a mapping"),
    ]
    for key, good, wanted in shapes:
        if item.get(key) is not None and not good(item[key]):
            raise BadInput(f"{where}: {kind} record: {key} must be {wanted} (or null)")
    for key in INTEGERS:
        if kind != "run_file" and item.get(key) is not None and not _is_count(item[key]):
            raise BadInput(f"{where}: {kind} record: {key} must be a whole number >= 0 (or null)")
    for key in METRIC_CELLS:
        if kind != "run_file" and item.get(key) is not None:
            if not isinstance(item[key], dict):
                raise BadInput(f"{where}: {kind} record: {key} must be a mapping of a run record's fields")
            _check_record(item[key], f"{where}: {kind} record: {key}")
    if kind == "run_file":
        for index, record in enumerate(item["records"] + item["metrics"]):
            part = "records" if index < len(item["records"]) else "metrics"
            number = index if part == "records" else index - len(item["records"])
            _check_record(record, f"{where}: run_file record: {part}[{number}]")
            if part == "records" and not _is_count(record.get("step")):
                raise BadInput(f"{where}: run_file record: {part}[{number}]: step must be a whole number >= 0")
        _check_steps(item["records"], where)


def _check_steps(records: list[dict[str, Any]], where: str) -> None:
    """A run file's records at steps in increasing order, each once, as octlm writes them (a resume cuts the file
    back to its checkpoint first): one that repeats or goes back would be imported as an extension of the run here."""
    for number in range(1, len(records)):
        step, before = records[number]["step"], records[number - 1]["step"]
        if step <= before:
            raise BadInput(
                f"{where}: run_file record: records[{number}]: step {step} does not come after step {before}: a run "
                "file holds each step once, in order; nothing was written"
            )


def _check_record(record: dict[str, Any], where: str) -> None:
    """A run record's known fields (the rest are left as they are): numbers, text, mappings, as octlm writes them."""
    for key, value in record.items():
        if value is None:
            continue
        if key in INTEGERS and not _is_count(value):
            raise BadInput(f"{where}: {key} must be a whole number >= 0")
        if key in NUMBER_FIELDS and not _is_figure(value):
            raise BadInput(f"{where}: {key} must be a number (below {MAX_MAGNITUDE:g} in size, or NaN / inf)")
        if key in TEXT_FIELDS and not isinstance(value, str):
            raise BadInput(f"{where}: {key} must be text")
        if key in NESTED_FIELDS and not isinstance(value, dict):
            raise BadInput(f"{where}: {key} must be a mapping")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_figure(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not math.isfinite(value) or abs(value) < MAX_MAGNITUDE


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False
