"""Experiments as files and rows: load a config by ID, create one, keep the registry in step.

Torch-free: ``octlm new`` and ``octlm show`` run through here and must start fast.

An experiment's identity (its UUID) is kept outside the registry too, in ``.octlm/identities/<ID>`` (``kept``), at
registration, so a registry rebuilt by ``doctor --repair`` gives the experiment its UUID back; it is kept by ID (a
YAML copied under another ID gets a new UUID), and never in the YAML itself: a clone's tracked files stay untouched.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from octlm import config as cfg
from octlm.config.presets import preset as preset_raw
from octlm.core import layout
from octlm.core.errors import BadInput, OctlmError, Refused
from octlm.core.fsutil import (
    atomic_writer,
    check_regular,
    create_temporary,
    file_sha256,
    open_regular,
)
from octlm.core.home import (
    DEFAULT_PREFIX,
    ID_PATTERN,
    Home,
    id_sort_key,
    split_id,
    validate_id,
    validate_prefix,
)
from octlm.core.records.freeform import ConfigTree
from octlm.store import kept
from octlm.store.registry import Registry

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes of YAML
FORK_POINT = re.compile(rf"(?P<parent>{ID_PATTERN.pattern})@(?P<step>[0-9]{{1,12}})")


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
    evaluation's budget); copied from another, everything is the other's."""
    if preset and from_config is not None:
        raise BadInput("--preset and --from cannot be used together: choose one")
    if from_config is not None:
        raw = from_config.to_dict()
    else:
        raw = cfg.merge(_new_defaults(), preset_raw(preset or "day1"))
    raw = cfg.apply_overrides(raw, overrides)
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


def _new_defaults() -> dict[str, Any]:
    """``NEW_DEFAULTS`` as a raw config mapping ({"data": {"sampling": "epochs"}, ...})."""
    raw: dict[str, Any] = {}
    for key, value in cfg.NEW_DEFAULTS.items():
        section, name = key.split(".")
        raw.setdefault(section, {})[name] = value
    return raw


def fork_init(home: Home, spec: str, *, optimizer: bool = False) -> ConfigTree:
    """The ``init`` section of a fork from ``ID@STEP`` (``new --init-from``): the path relative to the home of the
    fork's own reference to the checkpoint (``keep_fork_parent`` makes it, once every check passed) and its sha256,
    read from its ``.sha256`` file and checked against its bytes (torch-free). BadInput for a malformed spec, an
    unknown experiment or a step without a checkpoint; Refused for a checkpoint whose bytes do not match its
    checksum."""
    match = FORK_POINT.fullmatch(spec.strip())
    if match is None:
        raise BadInput(f"--init-from {spec!r}: expected ID@STEP, e.g. EXP-008@200")
    parent, step = validate_id(match["parent"]), int(match["step"])
    folder = home.checkpoint_dir(parent)
    if not home.config_path(parent).exists() and not folder.is_dir():
        raise BadInput(f"--init-from {spec}: unknown experiment {parent}")
    path = layout.checkpoint_path(folder, step)
    if not path.is_file():
        steps = [number for number, _ in layout.checkpoints(folder)]
        have = f"its checkpoints are at steps {', '.join(map(str, steps))}" if steps else "it has no checkpoints"
        raise BadInput(f"--init-from {spec}: {parent} has no checkpoint at step {step}; {have}")
    digest = _verified_digest(path)
    return {
        "parent": f"{parent}@{step}",
        "checkpoint": str(_kept_parent(home, digest).relative_to(home.root)),
        "sha256": digest,
        "optimizer": optimizer,
        "step": step if optimizer else 0,  # with the optimizer, the fork continues the parent's run at its step
    }


SHAPE_KEYS = ("model.d_model", "model.n_layers", "model.n_heads", "model.mlp_hidden", "tokenizer.vocab_size")
CONTINUED_KEYS = ("data.sampling", "training.batch_size", "training.micro_batches")  # what a continued run needs alike


def check_fork(home: Home, config: cfg.Config) -> None:
    """A fork that could not train refused at ``new`` (BadInput naming the key): its parent's weights must fit its
    model (shape, vocabulary); one continuing the parent's run (``--with-optimizer``) must also sample as the parent
    did and have steps left to train after ``init.step``."""
    init = config.init
    if init.step and init.step >= config.training.steps:
        raise BadInput(
            f"--with-optimizer continues {init.parent} at step {init.step}: training.steps must be above it, "
            f"got {config.training.steps}"
        )
    parent_id = init.parent.partition("@")[0]
    try:
        parent = cfg.flatten(load(home, parent_id).to_dict())
    except OctlmError:
        return  # its YAML is gone: the checkpoint's own config is checked when the fork trains
    mine = cfg.flatten(config.to_dict())
    for key in (*SHAPE_KEYS, *(CONTINUED_KEYS if init.step else ())):
        if parent.get(key) != mine.get(key):
            what = "its weights have another shape" if key in SHAPE_KEYS else "a continued run keeps it"
            raise BadInput(
                f"--init-from {init.parent}: {key} is {parent.get(key)!r} there and {mine.get(key)!r} here, and "
                f"{what}; leave {key} as the parent has it"
            )


def _kept_parent(home: Home, digest: str) -> Path:
    return home.root / "checkpoints" / "forks" / f"{digest}.pt"


def keep_fork_parent(home: Home, config: cfg.Config) -> None:
    """A fork's own reference to its parent checkpoint, ``checkpoints/forks/<sha256>.pt`` (a hard link, else a
    copy), so the parent's retention, ``--restart`` or ``rm`` never takes a fork's step 0 away; made by ``new`` only
    once every check passed, so a refused fork leaves nothing behind."""
    kept = _kept_parent(home, config.init.sha256)
    if kept.is_file():
        return
    parent, _, step = config.init.parent.partition("@")
    path = layout.checkpoint_path(home.checkpoint_dir(parent), int(step))
    kept.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, kept)
    except FileNotFoundError:
        raise BadInput(
            f"--init-from {config.init.parent}: its checkpoint was removed meanwhile; nothing was written"
        ) from None
    except OSError:
        with open(open_regular(path, max_bytes=None, follow=False), "rb") as source, atomic_writer(kept) as target:
            shutil.copyfileobj(source, target)


def _verified_digest(path: Path) -> str:
    """The sha256 of ``path`` as its ``.sha256`` file gives it, once the file's bytes agree."""
    written = layout.read_sidecar(path)
    if written is None:
        raise Refused(f"{path.name}: no readable {layout.sidecar(path).name} to verify it against")
    try:
        actual = file_sha256(path)[0]
    except OSError as error:
        raise Refused(f"{path}: cannot be read: {error.strerror or error}") from None
    if actual != written:
        raise Refused(f"{path.name}: checksum mismatch (truncated or corrupted); it cannot be forked from")
    return actual


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


def publish_next(home: Home, candidates: Iterator[str], config: cfg.Config, prefix: str) -> cfg.Config:
    """``publish`` under the next of ``candidates`` (``free_ids``) whose file does not exist yet."""
    return _publish_first(home, candidates, config, None, prefix)


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
    home: Home, candidates: Iterator[str], config: cfg.Config, asked: str | None, prefix: str
) -> cfg.Config:
    """Write the config under the first candidate ID whose file does not exist yet."""
    for candidate in candidates:
        final = config.replace(id=candidate)
        if _publish(home.config_path(candidate), cfg.to_yaml(final)):
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


def _publish(path: Path, text: str) -> bool:
    """Create ``path`` with ``text`` only if it does not exist; False when it already does.

    The temporary is created exclusively (never through a planted link) with the umask's mode."""
    fd, temporary = create_temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(temporary)


def ids_on_disk(home: Home) -> list[str]:
    """IDs of the well-formed ``experiments/<ID>.yaml`` files, in ID order."""
    if not home.experiments.is_dir():
        return []
    return sorted((p.stem for p in home.experiments.glob("*.yaml") if _is_id(p.stem)), key=id_sort_key)


def unregistered_files(home: Home, known: set[str]) -> list[str]:
    return [experiment_id for experiment_id in ids_on_disk(home) if experiment_id not in known]
