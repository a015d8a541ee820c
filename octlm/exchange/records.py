"""The records ``octlm registry export`` writes and ``registry import`` / ``unpack`` read: JSON Lines, one object
per experiment, run, checkpoint, verdict, note and run file, each with ``schema_version`` and ``type``. Torch-free.

An experiment's record carries its YAML text and a run file's record its records (with their ``metrics`` rows),
so an imported experiment works in ``show``, compare and plots. Children name their experiment and run by UUID.
A checkpoint record names the box and absolute path of its file (``remote_host``, ``remote_path``): an import
registers it there, as remote. Reading them back (every record checked before anything is written) is
``reading.py``'s.

Each record's fields: the ones it must have are spelled here (``REQUIRED``); the rest (``OPTIONAL``) are its
table's columns as the registry's migrations make them, less what an export leaves out or names otherwise
(``LEFT_OUT``, and a run's ``run_id`` becomes ``run_uuid``), in the order exports have always written them. The
TypedDicts ``ExportedExperiment`` ... ``ExportedRunFile`` type the records (a test holds them to those lists).
"""

# No ``from __future__ import annotations`` here: the TypedDicts' NotRequired must be seen at runtime too.
import json
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import read_regular, write_output
from octlm.core.home import Home, validate_id
from octlm.core.records import RunRecord
from octlm.exchange.results import RegistryExported
from octlm.store.base import METRIC_TABLE_FIELDS
from octlm.store.merge import ExchangeRegistry
from octlm.store.migrations import ADDED, TABLE_COLUMNS, CheckpointRow, Json
from octlm.store.runs import runfile

SCHEMA_VERSION = 1
TRACKS = {"train": "", "overfit": "-overfit"}  # a track's run file: runs/<ID><suffix>.jsonl
ENVELOPE = ("schema_version", "type")
Scalar = str | int | float | bool | None  # an optional field's value (any JSON in a JSON column's)

# {type: {field: required type}}; uuid fields are UUIDs.
REQUIRED: dict[str, dict[str, type]] = {
    "experiment": {"uuid": str, "id": str, "yaml": str},
    "run": {"uuid": str, "experiment_uuid": str},
    "checkpoint": {"experiment_uuid": str, "step": int, "sha256": str},
    "verification": {"uuid": str, "experiment_uuid": str, "kind": str, "verdict": str},
    "note": {"uuid": str, "experiment_uuid": str, "text": str},
    "run_file": {"experiment_uuid": str, "track": str, "records": list, "metrics": list},
}
# A row's local ``id``, its experiment's and run's (a record names them by UUID) and where its YAML was.
LEFT_OUT = ("id", "experiment_id", "run_id", "yaml_path")
WHERE = ("path", "remote_host", "remote_path")  # a checkpoint record names its file last


def _optional(kind: str, table: str, last: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The optional fields of a ``kind`` record: ``run_uuid`` when ``table`` names a run, then the table's
    columns but those left out, required or ``last``, then ``last``."""
    columns = TABLE_COLUMNS[table]
    rest = tuple(column for column in columns if column not in (*LEFT_OUT, *REQUIRED[kind], *last))
    return ("run_uuid",) * ("run_id" in columns) + rest + last


OPTIONAL: dict[str, tuple[str, ...]] = {
    "experiment": _optional("experiment", "experiments"),
    "run": _optional("run", "runs"),
    "checkpoint": _optional("checkpoint", "checkpoints", last=WHERE),
    "verification": _optional("verification", "verifications"),
    "note": _optional("note", "notes"),
    "run_file": (),
}
METRIC_ENTRY = (*METRIC_TABLE_FIELDS, "run_uuid")  # a run file record's ``metrics`` row


class _Envelope(TypedDict):
    schema_version: int


class ExportedExperiment(_Envelope):
    type: Literal["experiment"]
    uuid: str
    id: str
    yaml: str
    description: NotRequired[Scalar]
    preset: NotRequired[Scalar]
    created: NotRequired[Scalar]
    updated: NotRequired[Scalar]
    config_json: NotRequired[Json]
    config_hash: NotRequired[Scalar]
    archived: NotRequired[Scalar]
    tags: NotRequired[Json]
    former_ids: NotRequired[Json]


class ExportedRun(_Envelope):
    type: Literal["run"]
    uuid: str
    experiment_uuid: str
    kind: NotRequired[Scalar]
    status: NotRequired[Scalar]
    start_step: NotRequired[Scalar]
    end_step: NotRequired[Scalar]
    target_step: NotRequired[Scalar]
    started: NotRequired[Scalar]
    ended: NotRequired[Scalar]
    updated: NotRequired[Scalar]
    host: NotRequired[Scalar]
    pid: NotRequired[Scalar]
    argv: NotRequired[Json]
    octlm_version: NotRequired[Scalar]
    python_version: NotRequired[Scalar]
    torch_version: NotRequired[Scalar]
    device: NotRequired[Scalar]
    dtype: NotRequired[Scalar]
    threads: NotRequired[Scalar]
    git_commit: NotRequired[Scalar]
    git_dirty: NotRequired[Scalar]
    config_hash: NotRequired[Scalar]
    data_hash: NotRequired[Scalar]
    tokenizer_hash: NotRequired[Scalar]
    resumed_from: NotRequired[Scalar]
    latest_metrics: NotRequired[Json]
    final_metrics: NotRequired[Json]
    error: NotRequired[Scalar]
    pid_start: NotRequired[Scalar]
    world_size: NotRequired[Scalar]
    nnodes: NotRequired[Scalar]
    backend: NotRequired[Scalar]
    resharded_from: NotRequired[Scalar]
    load_average: NotRequired[Scalar]
    peak_rss: NotRequired[Scalar]


class ExportedCheckpoint(_Envelope):
    type: Literal["checkpoint"]
    experiment_uuid: str
    step: int
    sha256: str
    run_uuid: NotRequired[Scalar]
    size: NotRequired[Scalar]
    tokens: NotRequired[Scalar]
    created: NotRequired[Scalar]
    config_hash: NotRequired[Scalar]
    data_hash: NotRequired[Scalar]
    tokenizer_hash: NotRequired[Scalar]
    metrics: NotRequired[Json]
    path: NotRequired[Scalar]
    remote_host: NotRequired[Scalar]
    remote_path: NotRequired[Scalar]


class ExportedVerification(_Envelope):
    type: Literal["verification"]
    uuid: str
    experiment_uuid: str
    kind: str
    verdict: str
    run_uuid: NotRequired[Scalar]
    created: NotRequired[Scalar]
    details: NotRequired[Json]


class ExportedNote(_Envelope):
    type: Literal["note"]
    uuid: str
    experiment_uuid: str
    text: str
    created: NotRequired[Scalar]


class ExportedRunFile(_Envelope):
    type: Literal["run_file"]
    experiment_uuid: str
    track: str
    records: list[RunRecord]  # the run file's records, as it holds them (a reader checks what it uses)
    metrics: list[dict[str, Scalar]]  # its rows of the metrics table (METRIC_ENTRY)


ExportRecord = (
    ExportedExperiment | ExportedRun | ExportedCheckpoint | ExportedVerification | ExportedNote | ExportedRunFile
)
Keep = Callable[[CheckpointRow], bool]


def record(kind: str, fields: Mapping[str, object]) -> ExportRecord:
    """A record of type ``kind``: the envelope, then ``fields`` in their order (``check`` is what vouches for
    the type of a record read back)."""
    return cast(ExportRecord, {"schema_version": SCHEMA_VERSION, "type": kind, **fields})


# ---------------------------------------------------------------- export


def export(home: Home, ids: list[str], output: Path | None) -> tuple[RegistryExported, str]:
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
    text = json_lines(found, home)  # run-file records keep their key order
    if output is not None:
        write_output(output, text.encode("utf-8"), "the records")
    counts: dict[str, int] = {}
    for item in found:
        counts[item["type"]] = counts.get(item["type"], 0) + 1
    summary: RegistryExported = {
        "schema_version": SCHEMA_VERSION,
        "file": str(output) if output else None,
        "experiments": chosen,
        "records": counts,
    }
    return summary, text


def json_lines(found: Iterable[ExportRecord], home: Home) -> str:
    """The records as JSON Lines; Refused (nothing written) where a registry cell holds what JSON cannot say: bytes
    (a BLOB) where text or a number belongs, in a registry edited by hand or damaged."""
    try:
        return "".join(json.dumps(item) + "\n" for item in found)
    except (TypeError, ValueError) as error:
        raise Refused(
            f"{home.registry}: a row holds what a record cannot carry ({error}): a registry edited by hand or damaged; "
            "`octlm doctor` checks it; nothing was written"
        ) from None


def records(home: Home, registry: ExchangeRegistry, ids: Iterable[str], keep: Keep | None = None) -> list[ExportRecord]:
    """The records of experiments ``ids``; ``keep`` chooses their checkpoint rows (default: all, as remote)."""
    out: list[ExportRecord] = []
    for experiment_id in ids:
        out += _experiment_records(home, registry, experiment_id, keep or (lambda row: True))
    return out


def _experiment_records(home: Home, registry: ExchangeRegistry, experiment_id: str, keep: Keep) -> list[ExportRecord]:
    row = registry.experiment_row(experiment_id)
    if row is None:
        raise Refused(f"{experiment_id} left the registry while it was exported; nothing exported")
    key = row["uuid"]
    try:
        text = read_regular(home.config_path(experiment_id), max_bytes=1 << 20, follow=False).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise Refused(f"{experiment_id}: its YAML cannot be read ({error}); nothing exported") from None
    out = [record("experiment", {"uuid": key, "id": experiment_id, "yaml": text, **_pick(row, OPTIONAL["experiment"])})]
    runs = registry.raw_rows("runs", experiment_id)
    run_uuid: dict[int | None, str] = {run["id"]: run["uuid"] for run in runs}
    out += [record("run", {"uuid": run["uuid"], "experiment_uuid": key, **_pick(run, OPTIONAL["run"])}) for run in runs]
    out += _checkpoint_records(home, registry, experiment_id, key, run_uuid, keep)
    for verdict in registry.raw_rows("verifications", experiment_id):
        head = {"uuid": verdict["uuid"], "experiment_uuid": key, "kind": verdict["kind"], "verdict": verdict["verdict"]}
        fields = {**_pick(verdict, OPTIONAL["verification"]), "run_uuid": run_uuid.get(verdict["run_id"])}
        out.append(record("verification", {**head, **fields}))
    for note in registry.raw_rows("notes", experiment_id):
        fields = _pick(note, OPTIONAL["note"])
        out.append(record("note", {"uuid": note["uuid"], "experiment_uuid": key, "text": note["text"], **fields}))
    return out + _run_files(home, registry, experiment_id, key, run_uuid)


def _checkpoint_records(
    home: Home, registry: ExchangeRegistry, experiment_id: str, key: str, run_uuid: dict[int | None, str], keep: Keep
) -> list[ExportRecord]:
    """The checkpoint rows ``keep`` chooses, each naming the box and absolute path of its file."""
    out, host = [], socket.gethostname()
    for row in filter(keep, registry.raw_rows("checkpoints", experiment_id)):
        where = {
            "remote_host": row["remote_host"] or host,
            "remote_path": row["remote_path"] or str(home.root / row["path"]),
        }
        fields = {**_pick(row, OPTIONAL["checkpoint"]), **where, "run_uuid": run_uuid.get(row["run_id"])}
        out.append(
            record("checkpoint", {"experiment_uuid": key, "step": row["step"], "sha256": row["sha256"], **fields})
        )
    return out


def _run_files(
    home: Home, registry: ExchangeRegistry, experiment_id: str, key: str, run_uuid: dict[int | None, str]
) -> list[ExportRecord]:
    out = []
    rows = registry.raw_rows("metrics", experiment_id)
    for track, suffix in TRACKS.items():
        found = runfile.read(home.run_file(experiment_id, suffix))
        metrics = [
            {**_metric_fields(row), "run_uuid": run_uuid.get(row["run_id"])} for row in rows if row["track"] == track
        ]
        if found or metrics:
            out.append(
                record("run_file", {"experiment_uuid": key, "track": track, "records": found, "metrics": metrics})
            )
    return out


def _metric_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics row's fields (``_pick``'s rule: the newer ones only where they hold a value)."""
    return _pick(row, METRIC_TABLE_FIELDS)


# Columns added by migrations after m006, when this export's schema (version 1) was frozen: an export writes them
# only where they hold a value, so an older home's export stays what it was, byte for byte.
NEWER = frozenset(entry[1] for name, entries in ADDED.items() if int(name[1:4]) > 6 for entry in entries)


def _pick(row: Mapping[str, object], keys: Iterable[str]) -> dict[str, object]:
    """``row``'s values of ``keys``, in their order (None for one it lacks: its place is kept for a later value),
    but a column newer than the export's schema only where it holds a value."""
    return {key: row.get(key) for key in keys if key not in NEWER or row.get(key) is not None}
