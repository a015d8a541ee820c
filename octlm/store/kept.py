"""What the registry holds that must survive its loss, kept in files of the home's own ``.octlm/`` folder (torch-free):
each experiment's identity (its UUID, ``identities/<ID>``), so that ``doctor --repair`` gives a rebuilt registry its
experiments' UUIDs back, each sweep's record (``sweeps/<name>.json``: its row, its trials, halving's decisions),
so that it rebuilds the sweeps too, and the highest ID number ever given with each prefix (``ids.json``, beside the
registry's ``id_marks``), so that an ID freed by ``rm`` is never given again, even by a rebuilt registry.

``.octlm/`` holds a ``.gitignore`` of ``*``: a home that is a git clone (this repository, a research repository with
its experiments) stays clean, and no tracked file (an experiment's YAML) is ever written to keep an identity. An
older octlm kept the identity as a last comment of the YAML, ``# octlm identity: ID UUID``: still read, never
written. Every write is atomic and never through a link (``Home.refuse_links`` on the folders, ``fsutil``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast
from uuid import uuid4 as new_uuid

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import atomic_write, read_regular
from octlm.core.home import Home, split_id, validate_id, validate_prefix
from octlm.store.registry import Registry
from octlm.store.sweeps import specs
from octlm.store.sweeps.records import SweepFields, TrialFields
from octlm.store.sweeps.rows import DECISION_FIELDS, SWEEP_FIELDS, TRIAL_FIELDS, picked

FOLDER = ".octlm"
IGNORE = "# octlm's own records (see octlm/store/kept.py): never to be committed\n*\n"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
IDENTITY_LINE = re.compile(rf"(\S+) ({UUID})\s*")
LEGACY = re.compile(rf"^# octlm identity: (\S+) ({UUID})\s*$", re.M)  # an older octlm's last line of the YAML
MAX_RECORD_BYTES = 64 << 20


def folder(home: Home) -> Path:
    return home.root / FOLDER


def _ready(home: Home, *parts: str) -> Path:
    """``.octlm/<parts>``, made (with its ``.gitignore``) and checked to be no link and inside the home."""
    base = folder(home)
    home.refuse_links(base / Path(*parts))
    (base / Path(*parts)).mkdir(parents=True, exist_ok=True)
    ignore = base / ".gitignore"
    if not ignore.exists():
        atomic_write(ignore, IGNORE.encode())
    return base / Path(*parts)


def identity(home: Home, experiment_id: str) -> str | None:
    """The UUID kept for this ID (None: none kept), from ``.octlm/identities/<ID>``, else an older octlm's YAML
    comment naming this ID (a YAML copied under another ID keeps the other's, which does not count)."""
    path = folder(home) / "identities" / validate_id(experiment_id)
    try:
        found = IDENTITY_LINE.fullmatch(read_regular(path, max_bytes=4096, follow=False).decode("ascii"))
        if found and found.group(1) == experiment_id:
            return found.group(2)
    except (OSError, UnicodeDecodeError):
        pass
    return _legacy(home, experiment_id)


def _legacy(home: Home, experiment_id: str) -> str | None:
    try:
        text = read_regular(home.config_path(experiment_id), max_bytes=1 << 20, follow=False)
    except OSError:
        return None
    found = [m.group(2) for m in LEGACY.finditer(text.decode("utf-8", "replace")) if m.group(1) == experiment_id]
    return found[-1] if found else None


def keep_identity(home: Home, experiment_id: str, uuid: str) -> bool:
    """Keep ``uuid`` as the identity of ``experiment_id``; False where it cannot be kept (a read-only home, a linked
    ``.octlm/``): the registry still holds it, only a rebuild would give another."""
    try:
        place = _ready(home, "identities") / validate_id(experiment_id)
        atomic_write(place, f"{experiment_id} {uuid}\n".encode("ascii"))
    except (OSError, Refused):
        return False
    return True


def kept_identity(home: Home, experiment_id: str) -> bool:
    """Whether ``.octlm/identities/<ID>`` is there (not only an older octlm's YAML comment)."""
    return (folder(home) / "identities" / validate_id(experiment_id)).is_file()


def shared_identities(home: Home, registry: Registry, repair: bool) -> list[tuple[str, str]]:
    """IDs whose kept identity (``identities/<ID>``) is another's UUID too (a file copied by hand): the first keeps
    it (the ID whose registry row holds it, else the first ID in order), and with ``repair`` each other one gets its
    own (its row's UUID when it has one, else a new one). [(the other ID, the one keeping the UUID)]."""
    holders: dict[str, list[str]] = {}
    place = folder(home) / "identities"
    for path in sorted(place.iterdir()) if place.is_dir() else []:
        try:
            found = identity(home, path.name)
        except BadInput:  # not an ID: never read as one
            continue
        if found is not None:
            holders.setdefault(found, []).append(path.name)
    shared = []
    for uuid, ids in holders.items():
        rows = {i: row["uuid"] if (row := registry.experiment(i)) else None for i in ids}
        keeper = next((i for i in ids if rows[i] == uuid), ids[0])
        for other in (i for i in ids if i != keeper):
            own = rows[other]
            if repair:
                keep_identity(home, other, own if isinstance(own, str) and own != uuid else str(new_uuid()))
            shared.append((other, keeper))
    return shared


def forget(home: Home, experiment_id: str) -> None:
    """The identity of a removed experiment (``rm``, a repair that removes its rows) goes with it."""
    (folder(home) / "identities" / validate_id(experiment_id)).unlink(missing_ok=True)


def keep_record(home: Home, kind: str, name: str, record: Mapping[str, object]) -> bool:
    """``.octlm/<kind>/<name>.json``: a record the registry's loss must not take (a sweep's); False where it cannot
    be kept."""
    try:
        place = _ready(home, kind) / f"{name}.json"
        atomic_write(place, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    except (OSError, Refused):
        return False
    return True


def records(home: Home, kind: str) -> tuple[dict[str, object], dict[str, str]]:
    """Every record of ``kind`` kept, by name, as JSON reads it; and those that cannot be read, by their path in the
    home, with why."""
    found: dict[str, object] = {}
    unreadable: dict[str, str] = {}
    place = folder(home) / kind
    for path in sorted(place.glob("*.json")) if place.is_dir() else []:
        try:
            found[path.stem] = json.loads(read_regular(path, max_bytes=MAX_RECORD_BYTES, follow=False))
        except (OSError, ValueError, RecursionError) as error:
            unreadable[f"{FOLDER}/{kind}/{path.name}"] = f"cannot be read as JSON ({error})"
    return found, unreadable


SWEEPS = "sweeps"
SWEEP_RECORD = "octlm-sweep-record"


class KeptSweep(TypedDict):
    """A sweep's record beside the registry as ``kept_sweeps`` reads it back: checked field by field, as every
    reader checks a sweep (``store/sweeps/specs``: it was written by octlm, but may be damaged or made by hand)."""

    format: str
    version: int
    sweep: SweepFields
    trials: list[TrialFields]
    decisions: NotRequired[list[dict[str, object]]]  # DECISION_FIELDS each


def keep_sweep(home: Home, registry: Registry, name: str) -> bool:
    """The sweep's record beside the registry, as it now stands there: its row, its trials, halving's decisions
    (``doctor --repair`` rebuilds the sweep from it when the registry is lost); False where it cannot be kept."""
    try:
        sweep = registry.sweep(name)
    except BadInput:  # its row is damaged: the record kept before it stays
        return False
    if sweep is None:
        return False
    record = {
        "format": SWEEP_RECORD,
        "version": 1,
        "sweep": picked(sweep, SWEEP_FIELDS),
        "trials": [picked(trial, TRIAL_FIELDS) for trial in registry.trials(sweep["id"])],
        "decisions": [picked(row, DECISION_FIELDS) for row in registry.decisions(sweep["id"])],
    }
    return keep_record(home, SWEEPS, name, record)


def keep_sweep_by_id(home: Home, registry: Registry, sweep_id: int) -> bool:
    """``keep_sweep`` of the sweep whose row id is ``sweep_id``."""
    name = next((row["name"] for row in registry.sweeps() if row["id"] == sweep_id), None)
    return keep_sweep(home, registry, name) if name is not None else False


def kept_sweeps(home: Home) -> tuple[dict[str, KeptSweep], dict[str, str]]:
    """Every sweep record kept here that reads as one (``keep_sweep``), by name; and those that do not, by their
    path in the home, with why in one line naming the key (``specs``)."""
    found, damaged = records(home, SWEEPS)
    good: dict[str, KeptSweep] = {}
    for name, record in found.items():
        where = f"{FOLDER}/{SWEEPS}/{name}.json"
        try:
            good[name] = _checked(record, where)
        except BadInput as error:
            damaged[where] = str(error).removeprefix(f"{where}: ")
    return good, damaged


def _checked(record: object, where: str) -> KeptSweep:
    if not isinstance(record, dict) or record.get("format") != SWEEP_RECORD:
        raise BadInput(f"{where}: not a sweep record (format {SWEEP_RECORD!r} expected)")
    if not isinstance(record.get("version"), int) or record["version"] > 1:
        raise BadInput(f"{where}: version must be 1 (not {record.get('version')!r}: a newer octlm's?)")
    trials, decisions = record.get("trials"), record.get("decisions", [])
    if not isinstance(trials, list) or not isinstance(decisions, list):
        raise BadInput(f"{where}: trials and decisions must be lists")
    specs.check_sweep(record.get("sweep"), where)
    for index, trial in enumerate(trials):
        specs.check_trial(trial, where, index)
    for index, decision in enumerate(decisions):
        specs.check_decision(decision, where, index)
    return cast(KeptSweep, record)


def rebuild_sweep(registry: Registry, record: KeptSweep, trials: list[TrialFields]) -> None:
    """A sweep the registry lost, from its record (``doctor --repair``): its row, ``trials`` (those of its trials
    whose experiments are here), halving's decisions and the trials' ``sweep:`` tags (a trial running then is
    queued again)."""
    name = str(record["sweep"]["name"])
    registry.merge_sweep(record["sweep"], trials)
    sweep = registry.sweep(name)
    if sweep is not None:
        registry.restore_decisions(sweep["id"], record.get("decisions") or [])
    for trial in trials:
        registry.retag(str(trial["experiment_id"]), [f"sweep:{name}"], [])


MARKS = "ids.json"
MARKS_RECORD = "octlm-id-marks"
MAX_NUMBER = 999_999_999  # core.home.ID_PATTERN: 1 to 9 digits


def given_marks(home: Home, registry: Registry) -> dict[str, int]:
    """{prefix: the highest number given with it in this home}, read: the registry's, ``.octlm/ids.json``'s and the
    identities kept, the highest of each (the experiments present are the caller's to add)."""
    return _raised(_highest(registry.id_marks(), _file_marks(home)), _kept_ids(home))


def keep_marks(home: Home, registry: Registry, given: Iterable[str] = ()) -> dict[str, int]:
    """Raise the marks of the IDs given (``given``: just given, or leaving by ``rm``) in the registry and in
    ``.octlm/ids.json``, each to the highest of the two, the identities kept and ``given``; the marks after. The file
    is read and written with the registry's write lock held, so two processes never lower it; where it cannot be
    written (a read-only or linked ``.octlm/``) the registry still holds them. Without a registry (``rm`` of files
    only), the file alone."""

    def merge(registered: Mapping[str, int]) -> dict[str, int]:
        on_file = _file_marks(home)
        marks = _raised(_highest(registered, on_file), [*_kept_ids(home), *given])
        if marks != on_file:
            _write_marks(home, marks)
        return marks

    return merge({}) if registry.read_only else registry.raise_id_marks(merge)


def _file_marks(home: Home) -> dict[str, int]:
    """``.octlm/ids.json``'s marks; a missing or damaged file (or entry), or one reached through a linked ``.octlm/``
    (never this home's own), reads as none (the next write mends it)."""
    if folder(home).is_symlink():
        return {}
    try:
        record = json.loads(read_regular(folder(home) / MARKS, max_bytes=1 << 20, follow=False))
    except (OSError, ValueError):
        return {}
    highest = record.get("highest") if isinstance(record, dict) and record.get("format") == MARKS_RECORD else None
    return _highest(highest if isinstance(highest, dict) else {})


def _write_marks(home: Home, marks: Mapping[str, int]) -> bool:
    record = {"format": MARKS_RECORD, "version": 1, "highest": dict(sorted(marks.items()))}
    try:
        atomic_write(_ready(home) / MARKS, (json.dumps(record, indent=1) + "\n").encode())
    except (OSError, Refused):
        return False
    return True


def _kept_ids(home: Home) -> list[str]:
    place = folder(home) / "identities"
    linked = folder(home).is_symlink() or place.is_symlink()
    return [path.name for path in place.iterdir()] if place.is_dir() and not linked else []


def _highest(*marks: Mapping[Any, object]) -> dict[str, int]:
    """The highest number of each well-formed prefix over ``marks`` (anything else left out, a number no ID can
    hold among it: an ID's number has at most 9 digits)."""
    found: dict[str, int] = {}
    for prefix, number in (item for mapping in marks for item in mapping.items()):
        if isinstance(prefix, str) and type(number) is int and 0 <= number <= MAX_NUMBER and _is_prefix(prefix):
            found[prefix] = max(found.get(prefix, 0), number)
    return found


def _raised(marks: dict[str, int], ids: Iterable[str]) -> dict[str, int]:
    """``marks`` raised to the numbers of ``ids`` (a malformed one is left out)."""
    for experiment_id in ids:
        try:
            prefix, number = split_id(experiment_id)
        except BadInput:
            continue
        marks[prefix] = max(marks.get(prefix, 0), number)
    return marks


def _is_prefix(text: str) -> bool:
    try:
        validate_prefix(text)
    except BadInput:
        return False
    return True
