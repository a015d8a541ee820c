"""Reading an export back (``registry import``, ``unpack``): every record checked (its type, UUIDs, IDs, the
fields its type has and their kinds) before anything is written; a schema version newer than this octlm's is
refused. Torch-free. The records themselves are ``records.py``'s.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, cast

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import read_regular
from octlm.core.home import validate_id
from octlm.exchange.records import ENVELOPE, METRIC_ENTRY, OPTIONAL, REQUIRED, SCHEMA_VERSION, TRACKS, Record
from octlm.store.base import JSON_COLUMNS

MAX_BYTES = 4 << 30
SHA256 = re.compile(r"[0-9a-f]{64}")
SCALAR = (str, int, float, bool, type(None))


def read(path: Path) -> list[Record]:
    """The checked records of an export file; one line for a missing, unreadable or malformed one."""
    try:
        data = read_regular(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror or error}") from None
    return parse(data, str(path))


def parse(data: bytes, origin: str) -> list[Record]:
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


def check(item: Any, where: str) -> Record:
    """``item`` if it is a well-formed record of this schema version; Refused for a newer version."""
    if not isinstance(item, dict) or not isinstance(item.get("schema_version"), int):
        raise BadInput(f"{where}: not an octlm export record (no schema_version)")
    if item["schema_version"] > SCHEMA_VERSION:
        raise Refused(
            f"{where}: schema_version {item['schema_version']} is newer than this octlm's ({SCHEMA_VERSION}): "
            "upgrade octlm to read it; nothing was imported"
        )
    kind = item.get("type")
    if kind not in REQUIRED:
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
    return cast(Record, item)


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


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False
