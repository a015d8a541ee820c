"""The records ``octlm registry export`` writes and ``registry import`` / ``unpack`` read: JSON Lines, one object
per experiment, run, checkpoint, verdict, note and run file, each with ``schema_version`` and ``type``. Torch-free.

An experiment's record carries its YAML text and a run file's record its records (with their ``metrics`` rows),
so an imported experiment works in ``show``, compare and plots. Children name their experiment and run by UUID.
A checkpoint record names the box and absolute path of its file (``remote_host``, ``remote_path``): an import
registers it there, as remote. Reading checks every record (types, UUIDs, IDs, known fields) before anything is
written, and refuses a schema version newer than this octlm's.
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import atomic_write, read_regular
from octlm.core.home import Home, validate_id
from octlm.store import runfile
from octlm.store.base import JSON_COLUMNS, METRIC_FIELDS
from octlm.store.merge import ExchangeRegistry

SCHEMA_VERSION = 1
MAX_BYTES = 4 << 30
TRACKS = {"train": "", "overfit": "-overfit"}  # a track's run file: runs/<ID><suffix>.jsonl
SHA256 = re.compile(r"[0-9a-f]{64}")
SCALAR = (str, int, float, bool, type(None))

# {type: {field: required type, or None for any scalar (a JSON value in a JSON column)}}; uuid fields are UUIDs.
_EXPERIMENT = (
    "description",
    "preset",
    "created",
    "updated",
    "config_json",
    "config_hash",
    "archived",
    "tags",
    "former_ids",
)
_RUN = (
    "kind",
    "status",
    "start_step",
    "end_step",
    "target_step",
    "started",
    "ended",
    "updated",
    "host",
    "pid",
    "argv",
    "octlm_version",
    "python_version",
    "torch_version",
    "device",
    "dtype",
    "threads",
    "git_commit",
    "git_dirty",
    "config_hash",
    "data_hash",
    "tokenizer_hash",
    "resumed_from",
    "latest_metrics",
    "final_metrics",
    "error",
    "pid_start",
    "world_size",
    "nnodes",
    "backend",
    "resharded_from",
)
_CHECKPOINT = (
    "run_uuid",
    "size",
    "tokens",
    "created",
    "config_hash",
    "data_hash",
    "tokenizer_hash",
    "metrics",
    "path",
    "remote_host",
    "remote_path",
)
REQUIRED: dict[str, dict[str, type]] = {
    "experiment": {"uuid": str, "id": str, "yaml": str},
    "run": {"uuid": str, "experiment_uuid": str},
    "checkpoint": {"experiment_uuid": str, "step": int, "sha256": str},
    "verification": {"uuid": str, "experiment_uuid": str, "kind": str, "verdict": str},
    "note": {"uuid": str, "experiment_uuid": str, "text": str},
    "run_file": {"experiment_uuid": str, "track": str, "records": list, "metrics": list},
}
OPTIONAL: dict[str, tuple[str, ...]] = {
    "experiment": _EXPERIMENT,
    "run": _RUN,
    "checkpoint": _CHECKPOINT,
    "verification": ("run_uuid", "created", "details"),
    "note": ("created",),
    "run_file": (),
}
ENVELOPE = ("schema_version", "type")


def record(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "type": kind, **fields}


# ---------------------------------------------------------------- export


def export(home: Home, ids: list[str], output: Path | None) -> tuple[dict[str, Any], str]:
    """The records of ``ids`` (default: every experiment) as JSON Lines, written atomically to ``output`` when
    given; (a summary, the text)."""
    if output is not None and not output.parent.is_dir():
        raise BadInput(f"-o {output}: there is no folder {output.parent}")
    with ExchangeRegistry(home.registry, create=False) as registry:
        known = registry.experiment_ids()
        for experiment_id in ids:
            if experiment_id not in known:
                raise BadInput(f"unknown experiment {validate_id(experiment_id)}: not in {home.registry}")
        chosen = ids or known
        found = records(home, registry, chosen)
    text = "".join(json.dumps(item) + "\n" for item in found)  # run-file records keep their key order
    if output is not None:
        atomic_write(output, text.encode("utf-8"))
    counts: dict[str, int] = {}
    for item in found:
        counts[item["type"]] = counts.get(item["type"], 0) + 1
    summary = {
        "schema_version": SCHEMA_VERSION,
        "file": str(output) if output else None,
        "experiments": chosen,
        "records": counts,
    }
    return summary, text


def records(
    home: Home, registry: ExchangeRegistry, ids: Iterable[str], keep: Callable[[dict[str, Any]], bool] | None = None
) -> list[dict[str, Any]]:
    """The records of experiments ``ids``; ``keep`` chooses their checkpoint rows (default: all, as remote)."""
    out: list[dict[str, Any]] = []
    for experiment_id in ids:
        out += _experiment_records(home, registry, experiment_id, keep or (lambda row: True))
    return out


def _experiment_records(
    home: Home, registry: ExchangeRegistry, experiment_id: str, keep: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    row = registry.experiment(experiment_id) or {}
    key = row["uuid"]
    try:
        text = read_regular(home.config_path(experiment_id), max_bytes=1 << 20, follow=False).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise Refused(f"{experiment_id}: its YAML cannot be read ({error}); nothing exported") from None
    out = [record("experiment", {"uuid": key, "id": experiment_id, "yaml": text, **_pick(row, _EXPERIMENT)})]
    runs = registry.raw_rows("runs", experiment_id)
    run_uuid = {run["id"]: run["uuid"] for run in runs}
    out += [record("run", {"uuid": run["uuid"], "experiment_uuid": key, **_pick(run, _RUN)}) for run in runs]
    host = socket.gethostname()
    for row in filter(keep, registry.raw_rows("checkpoints", experiment_id)):
        where = {
            "remote_host": row["remote_host"] or host,
            "remote_path": row["remote_path"] or str(home.root / row["path"]),
        }
        fields = {**_pick(row, _CHECKPOINT), **where, "run_uuid": run_uuid.get(row["run_id"])}
        out.append(
            record("checkpoint", {"experiment_uuid": key, "step": row["step"], "sha256": row["sha256"], **fields})
        )
    for row in registry.raw_rows("verifications", experiment_id):
        fields = {"run_uuid": run_uuid.get(row["run_id"]), "created": row["created"], "details": row["details"]}
        out.append(
            record(
                "verification",
                {"uuid": row["uuid"], "experiment_uuid": key, "kind": row["kind"], "verdict": row["verdict"], **fields},
            )
        )
    for row in registry.raw_rows("notes", experiment_id):
        out.append(
            record(
                "note", {"uuid": row["uuid"], "experiment_uuid": key, "text": row["text"], "created": row["created"]}
            )
        )
    return out + _run_files(home, registry, experiment_id, key, run_uuid)


def _run_files(
    home: Home, registry: ExchangeRegistry, experiment_id: str, key: str, run_uuid: dict[int, str]
) -> list[dict[str, Any]]:
    out = []
    rows = registry.raw_rows("metrics", experiment_id)
    for track, suffix in TRACKS.items():
        found = runfile.read(home.run_file(experiment_id, suffix))
        metrics = [
            {**_pick(row, METRIC_FIELDS), "run_uuid": run_uuid.get(row["run_id"])}
            for row in rows
            if row["track"] == track
        ]
        if found or metrics:
            out.append(
                record("run_file", {"experiment_uuid": key, "track": track, "records": found, "metrics": metrics})
            )
    return out


def _pick(row: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {key: row.get(key) for key in keys}


# ---------------------------------------------------------------- reading


def read(path: Path) -> list[dict[str, Any]]:
    """The checked records of an export file; one line for a missing, unreadable or malformed one."""
    try:
        data = read_regular(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror or error}") from None
    return parse(data, str(path))


def parse(data: bytes, origin: str) -> list[dict[str, Any]]:
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


def check(item: Any, where: str) -> dict[str, Any]:
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
    return item


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
            if set(row) - {*METRIC_FIELDS, "run_uuid"} or not all(isinstance(v, SCALAR) for v in row.values()):
                raise BadInput(f"{where}: run_file record: a metrics row with unknown fields or nested values")
            if row.get("run_uuid") is not None and not _is_uuid(row["run_uuid"]):
                raise BadInput(f"{where}: run_file record: a metrics row's run_uuid is not a UUID")


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False
