"""What the exchange commands write with ``--json``, typed once: ``registry export`` (``RegistryExported``), ``registry
import`` (``Imported``, an ``Arrival`` per experiment), ``pack`` (``Packed``) and ``unpack`` (``Unpacked``, or
``Checked`` with ``--check``), ``export tensorboard|csv`` (``TrackerExported``, a ``TrackerRun`` per run); and a
pack's manifest as ``tarcheck.manifest`` has checked it (``Manifest``).
"""

from __future__ import annotations

from typing import TypedDict

Arrival = TypedDict("Arrival", {"id": str, "from": str, "uuid": str, "status": str})
Arrival.__doc__ = "One experiment of an import: its ID here, its ID there, its UUID, and ``new`` or already ``here``."


class RegistryExported(TypedDict):
    """What ``octlm registry export --json`` writes (the records themselves go to the file, or to stdout)."""

    schema_version: int
    file: str | None  # none: the records went to stdout
    experiments: list[str]
    records: dict[str, int]  # record type -> how many


class Imported(TypedDict):
    """What ``octlm registry import --json`` writes: what was merged, table by table."""

    schema_version: int
    file: str
    changed: bool
    experiments: list[Arrival]
    rows: dict[str, int]  # table -> rows written
    files: list[str]  # written under the home


class Packed(TypedDict):
    """What ``octlm pack --json`` writes."""

    schema_version: int
    file: str
    experiment: str
    steps: list[int]  # the checkpoints packed
    bytes: int


Checked = TypedDict("Checked", {"experiment": str, "from": str, "uuid": str, "checked": bool})
Checked.__doc__ = (
    "What a pack would become here, checked whole (``sweep unpack`` checks every pack first); nothing written."
)

Unpacked = TypedDict(
    "Unpacked",
    {
        "schema_version": int,
        "file": str,
        "experiment": str,
        "from": str,
        "uuid": str,
        "changed": bool,
        "checkpoints": list[int],
        "rows": dict[str, int],
    },
)
Unpacked.__doc__ = "What ``octlm unpack --json`` writes: the experiment here and there, and what changed."


class ManifestFile(TypedDict):
    sha256: str
    size: int


class Manifest(TypedDict):
    """A pack's ``manifest.json``: checked for these keys and types before anything else is read."""

    format: str
    version: int
    octlm: str
    experiment: str
    files: dict[str, ManifestFile]


class TrackerRun(TypedDict):
    """One run of ``octlm export tensorboard|csv``: its group (the folder its seed replicates share) and files."""

    id: str
    group: str
    records: int  # the run file's records written
    files: list[str]  # relative to the folder


class TrackerExported(TypedDict):
    """What ``octlm export tensorboard|csv --json`` writes: the tracker, the folder, each run written, and a sweep's
    trials left out because they have no records yet."""

    tracker: str  # a name of exchange.trackers.TRACKERS
    dir: str
    runs: list[TrackerRun]
    skipped: list[str]
