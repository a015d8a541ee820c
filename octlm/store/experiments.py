"""Experiments as files and rows: load a config by ID, create one, keep the registry in step.

Torch-free: ``octlm new`` and ``octlm show`` run through here and must start fast.

An experiment's identity (its UUID) is kept outside the registry too, in ``.octlm/identities/<ID>`` (``kept``), at
registration, so a registry rebuilt by ``doctor --repair`` gives the experiment its UUID back; it is kept by ID (a
YAML copied under another ID gets a new UUID), and never in the YAML itself: a clone's tracked files stay untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from octlm import config as cfg
from octlm.config.presets import preset as preset_raw
from octlm.core import layout
from octlm.core.errors import BadInput, OctlmError
from octlm.core.fsutil import (
    check_regular,
    create_temporary,
)
from octlm.core.home import (
    DEFAULT_PREFIX,
    Home,
    id_sort_key,
    split_id,
    validate_id,
    validate_prefix,
)
from octlm.core.liveness import start_time
from octlm.core.records.freeform import ConfigTree
from octlm.store import kept
from octlm.store.registry import Registry

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes of YAML


def load(home: Home, experiment_id: str) -> cfg.Config:
    """The validated config of an experiment; the file's ``id`` must match its name.

    The file must be a regular file within ``MAX_CONFIG_BYTES`` (checked before it is opened, so
    a FIFO or a device named like a config never hangs or floods a command)."""
    path = home.config_path(experiment_id)
    try:
        check_regular(path, max_bytes=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise BadInput(
            f"unknown experiment {experiment_id}: {path} does not exist (create it with `octlm new {experiment_id}`)"
        ) from None
    except OSError as error:
        raise BadInput(f"{path}: cannot be read: {error.strerror}") from None
    config = cfg.load(path)
    if config.id and config.id != experiment_id:
        raise BadInput(f"{path.name}: id: says {config.id!r} but the file is named for {experiment_id}")
    return config.replace(id=experiment_id)


def register(home: Home, registry: Registry, config: cfg.Config) -> None:
    """Insert or update the experiment's row from its config; a new row takes the UUID kept for its ID (when one is
    kept), and the row's UUID is kept (see the module)."""
    found = kept.identity(home, config.id)
    try:
        registry.sync_experiment(config.id, **row_fields(home, config), **({"uuid": found} if found else {}))
    except sqlite3.IntegrityError:  # the UUID kept for it is another experiment's (copied by hand): its own, new
        if not found:
            raise
        registry.sync_experiment(config.id, **row_fields(home, config))
    row = registry.experiment(config.id)
    if row and isinstance(row["uuid"], str) and (row["uuid"] != found or not kept.kept_identity(home, config.id)):
        kept.keep_identity(home, config.id, row["uuid"])


def row_fields(home: Home, config: cfg.Config) -> dict[str, str]:
    """The registry's fields of an experiment, from its config (``register``; a sweep's trials in one go)."""
    return {
        "description": config.description,
        "preset": config.preset,
        "yaml_path": str(home.config_path(config.id).relative_to(home.root)),
        "config_json": config.canonical_json(),
        "config_hash": config.fingerprint,
    }


def build(
    *,
    preset: str | None,
    from_config: cfg.Config | None,
    overrides: list[str],
    description: str | None,
    init: ConfigTree | None = None,
) -> cfg.Config:
    """Resolve a new experiment's config (without its ID) from a preset or another experiment, and with
    ``init`` (``fork_init``) the checkpoint its step 0 starts from. Copied from another experiment, the
    description defaults to where it came from and what changed: "from EXP-008: training.learning_rate=1e-3". From a
    preset, the
    keys of ``NEW_DEFAULTS`` the preset leaves out take the defaults of experiments made now (epochs, the
    evaluation's budget); copied from another, everything is the other's. Canonical pieces
    (``training.micro_batches``), unless ``--set`` names them, are the preset's or the other's while they still cut
    the batch (so a copy of EXP-008, which has none, has none), else ``cfg.new_pieces`` of the batch: a new
    experiment from a preset continues exactly on 1, 2 or 4 ranks, and a copy whose ``--set`` (or a sweep's grid)
    changes the batch keeps pieces that fit it."""
    if preset and from_config is not None:
        raise BadInput("--preset and --from cannot be used together: choose one")
    if from_config is not None:
        raw = from_config.to_dict()
    else:
        raw = cfg.merge(_new_defaults(), preset_raw(preset or "day1"))
    raw = cfg.apply_overrides(raw, overrides)
    if "training.micro_batches" not in {item.partition("=")[0].strip() for item in overrides}:
        _with_pieces(raw)
    if init is not None:
        raw["init"] = init
    parent = init["parent"] if init is not None else from_config.id if from_config is not None else None
    if description is None and parent:
        description = (
            f"from {parent}: {', '.join(item.strip() for item in overrides)}" if overrides else f"from {parent}"
        )
    if description is not None:
        raw["description"] = description
    raw.pop("id", None)
    return cfg.from_dict(raw, "--set" if overrides else "new")


def _with_pieces(raw: ConfigTree) -> None:
    """The canonical pieces of a new experiment where ``--set`` does not name them (see ``build``): its preset's or
    parent's while they still cut its batch (an experiment of none keeps none), else ``cfg.new_pieces`` of its batch.
    A batch that is not a number is left to ``from_dict`` to name."""
    training = raw.setdefault("training", {})
    if not isinstance(training, dict):
        return  # from_dict names what is wrong
    batch, accum = training.get("batch_size", cfg.TrainingConfig.batch_size), training.get("grad_accum_steps", 1)
    kept = training.get("micro_batches", 0)
    if not (_whole(batch) and _whole(accum) and _whole(kept)):
        return  # from_dict names what is wrong
    if "micro_batches" not in training or not cfg.pieces_fit(kept, batch, accum):
        training["micro_batches"] = cfg.new_pieces(batch, accum)


def refitted_pieces(config: cfg.Config, key: str, value: object) -> int | None:
    """``training.micro_batches`` as a copy of ``config`` with ``key`` set to ``value`` takes it (``build``'s rule),
    where that changes it (None where it does not): a sweep's grid checks each value of a key on its own."""
    training = {name: getattr(config.training, name) for name in ("batch_size", "grad_accum_steps", "micro_batches")}
    section, _, name = key.partition(".")
    if section != "training" or name not in ("batch_size", "grad_accum_steps"):
        return None
    _with_pieces(raw := {"training": {**training, name: value}})
    kept = raw["training"]["micro_batches"]
    return None if kept == config.training.micro_batches else kept


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _new_defaults() -> dict[str, Any]:
    """``NEW_DEFAULTS`` as a raw config mapping ({"data": {"sampling": "epochs"}, ...})."""
    raw: dict[str, Any] = {}
    for key, value in cfg.NEW_DEFAULTS.items():
        section, name = key.split(".")
        raw.setdefault(section, {})[name] = value
    return raw


def same_fingerprint(home: Home, config: cfg.Config) -> list[str]:
    """The other experiments (registered, or only a file) whose config fingerprint equals ``config``'s."""
    with Registry(home.registry, create=False) as registry:
        found, known = set(registry.same_config(config.fingerprint)), set(registry.experiment_ids())
    for other in unregistered_files(home, known | {config.id}):
        try:
            if load(home, other).fingerprint == config.fingerprint:
                found.add(other)
        except OctlmError:
            continue
    return sorted(found - {config.id})


def description(home: Home, experiment_id: str) -> str | None:
    """The description in ``experiments/<ID>.yaml`` as it reads now (None when the file is missing or
    invalid): the views show it rather than the registry's copy, which is synced only when written."""
    if not home.config_path(experiment_id).exists():
        return None
    try:
        return load(home, experiment_id).description
    except OctlmError:
        return None


def create(home: Home, experiment_id: str | None, config: cfg.Config, prefix: str = DEFAULT_PREFIX) -> cfg.Config:
    """Write ``experiments/<ID>.yaml`` and register it; with no ID, take the next ``<prefix>NNN`` never given in
    this home (``EXP-NNN`` by default), and keep it as given (``kept.keep_marks``: in the registry and ``.octlm/``).

    The file appears atomically (hard link of a finished temporary file), so parallel calls
    never share an ID and a failure leaves neither a partial file nor a row.
    """
    home.ensure_writable()
    home.experiments.mkdir(exist_ok=True)
    with Registry(home.registry) as registry:
        final = publish(home, registry, experiment_id, config, prefix)
        try:
            register(home, registry, final)
        except BaseException:
            home.config_path(final.id).unlink(missing_ok=True)
            raise
        kept.keep_marks(home, registry, [final.id])
        return final


def publish(home: Home, registry: Registry, experiment_id: str | None, config: cfg.Config, prefix: str) -> cfg.Config:
    """Write ``experiments/<ID>.yaml`` (atomically, never over another's) under ``experiment_id`` or the next free
    ``<prefix>NNN``, unregistered: ``create`` registers it, a sweep registers its trials in one transaction."""
    candidates = _candidates(home, registry, experiment_id, validate_prefix(prefix))
    return _publish_first(home, candidates, config, experiment_id, prefix)


def free_ids(home: Home, registry: Registry, prefix: str) -> Iterator[str]:
    """The free ``<prefix>NNN`` IDs in order, the taken ones read once: for publishing many (a sweep's trials)
    with ``publish_next``, instead of reading the folder again for each."""
    return _candidates(home, registry, None, validate_prefix(prefix))


def publish_next(
    home: Home, candidates: Iterator[str], config: cfg.Config, prefix: str, staging: Path | None = None
) -> cfg.Config:
    """``publish`` under the next of ``candidates`` (``free_ids``) whose file does not exist yet; with ``staging``
    (``staged``), the file is written there and placed in ``experiments/`` as a hard link of it."""
    return _publish_first(home, candidates, config, None, prefix, staging)


@contextlib.contextmanager
def staged(home: Home) -> Iterator[Path]:
    """A staging folder for experiments made many at once (a sweep's trials), removed when the block ends: each file
    is written in it and placed in ``experiments/`` as a hard link of it (``publish_next``), before the rows go in
    in one transaction. Killed before that commit, the process leaves the folder, named for it
    (``layout.staging_prefix``), and ``doctor`` tells its files in ``experiments/`` by their inode
    (``placed_from``): never registered, they are removed rather than taken for experiments of their own."""
    prefix = layout.staging_prefix(os.getpid(), start_time(os.getpid()), layout.NEW)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=home.root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def placed_from(home: Home, folder: Path) -> list[str]:
    """The IDs whose ``experiments/<ID>.yaml`` is a hard link of a file in the staging folder ``folder``."""
    inodes = {(found.st_dev, found.st_ino) for found in map(os.lstat, folder.iterdir())}
    return [i for i in ids_on_disk(home) if _inode(home.config_path(i)) in inodes]


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _candidates(home: Home, registry: Registry, experiment_id: str | None, prefix: str) -> Iterator[str]:
    """The IDs to try: the one asked for (if free), else ``<prefix>NNN`` after the highest ever given with that
    prefix (``BOX-`` counts ``BOX-007``, not ``EXP-009`` nor ``B-BOX-010``): taken now, or given once and removed
    since (the marks the registry and ``.octlm/`` keep, ``kept.given_marks``), so a note or a script that named a
    removed experiment never names another."""
    if experiment_id is not None:
        validate_id(experiment_id)
        if registry.experiment(experiment_id) is not None or home.config_path(experiment_id).exists():
            raise BadInput(f"experiment {experiment_id} already exists: choose another ID or omit it")
        return iter([experiment_id])
    ids = ids_on_disk(home) + [i for i in registry.experiment_ids() if _is_id(i)]
    taken = [number for of, number in map(split_id, ids) if of == prefix]
    start = max([*taken, kept.given_marks(home, registry).get(prefix, 0)]) + 1  # also past those given and removed
    return (f"{prefix}{n:03d}" for n in range(start, start + 100_000) if _is_id(f"{prefix}{n:03d}"))


def _publish_first(
    home: Home,
    candidates: Iterator[str],
    config: cfg.Config,
    asked: str | None,
    prefix: str,
    staging: Path | None = None,
) -> cfg.Config:
    """Write the config under the first candidate ID whose file does not exist yet."""
    for candidate in candidates:
        final = config.replace(id=candidate)
        if _publish(home.config_path(candidate), cfg.to_yaml(final), staging):
            return final
        if asked is not None:
            break
    if asked is None:
        raise BadInput(f"no free experiment ID left after the highest {prefix}NNN: give one")
    raise BadInput(f"experiment {asked} already exists: choose another ID or omit it")


def _is_id(text: str) -> bool:
    try:
        validate_id(text)
    except BadInput:
        return False
    return True


def _publish(path: Path, text: str, staging: Path | None = None) -> bool:
    """Create ``path`` with ``text`` only if it does not exist; False when it already does.

    The temporary is created exclusively (never through a planted link) with the umask's mode, in ``staging`` when
    given (and kept there, a hard link of ``path``, until the staging folder goes), else beside ``path``."""
    fd, temporary = create_temporary(staging or path.parent, path.name)
    placed = False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        placed = True
        return True
    finally:
        if not (placed and staging is not None):
            os.unlink(temporary)


def ids_on_disk(home: Home) -> list[str]:
    """IDs of the well-formed ``experiments/<ID>.yaml`` files, in ID order."""
    if not home.experiments.is_dir():
        return []
    return sorted((p.stem for p in home.experiments.glob("*.yaml") if _is_id(p.stem)), key=id_sort_key)


def unregistered_files(home: Home, known: set[str]) -> list[str]:
    return [experiment_id for experiment_id in ids_on_disk(home) if experiment_id not in known]
