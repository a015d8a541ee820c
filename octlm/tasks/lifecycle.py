"""An experiment's lifecycle: make it (``new``: its config from a preset, another experiment's or a fork's
parent, checked, then written and registered, or as seed replicates), remove it (its rows and files, or only its
rows), archive it, tag it, note on it. Torch-free, like ``show``.

Removal holds the experiment's lock (a running ``train`` or ``resume`` makes it refuse, exit 3) and
touches only what is named for that one experiment: its rows in every table (a sweep's trial and claims among
them), ``experiments/<ID>.yaml``, ``checkpoints/<ID>/``, ``runs/<ID>.jsonl``, ``runs/<ID>-<track>.jsonl`` and a
sweep worker's log ``runs/<ID>.log`` (never ``runs/<ID>0.jsonl``, another experiment's) and ``locks/<ID>.lock``.
Files go first, then the rows in one transaction: a removal cut short leaves at worst rows without a config, which
``rm`` again or ``doctor --repair`` clears. (It lived in ``store`` until the sweeps' queue took its room there.)
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from octlm.config import Config
from octlm.core.errors import BadInput, Refused
from octlm.core.home import DEFAULT_PREFIX, Home, validate_id
from octlm.core.mounts import refuse_network_home
from octlm.data import sources
from octlm.store import experiments, kept
from octlm.store.locking import ExperimentLock
from octlm.store.registry import MAX_NOTE_CHARS, NoteRow, Registry
from octlm.tasks import forks

TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63}")
TAG_HELP = "a tag is 1 to 64 letters, digits and _ . : / = + - (starting with a letter or digit)"


class Removal(TypedDict):
    """What ``rm`` would remove (asked before it does), and what it removed (then with ``kept_files``)."""

    id: str
    rows: dict[str, int]  # {table: rows}
    files: list[str]  # relative to the home
    kept_files: NotRequired[bool]


class Archived(TypedDict):
    id: str
    archived: bool
    changed: bool


class Retagged(TypedDict):
    id: str
    tags: list[str]
    added: list[str]  # what actually changed
    removed: list[str]


@dataclass(frozen=True)
class NewExperiment:
    """What ``octlm new`` is asked for: the ID (None: the next ``prefix`` NNN), where the config comes from (a
    preset, another experiment's, a fork's parent checkpoint ``ID@STEP``), the keys set, and how many: ``seeds``
    replicates differing only in ``training.seed`` (1: the one experiment)."""

    experiment_id: str | None = None
    prefix: str = DEFAULT_PREFIX
    preset: str | None = None
    from_id: str | None = None
    overrides: Sequence[str] = ()
    description: str | None = None
    init_from: str | None = None
    with_optimizer: bool = False
    seeds: int = 1


@dataclass(frozen=True)
class Created:
    """What ``new`` made: the experiment, or the replicates in the order of their seeds, each config as written;
    and the experiments whose config has the one experiment's fingerprint (none for replicates)."""

    configs: list[Config]
    twins: list[str]


# ---------------------------------------------------------------- new


def new(home: Home, asked: NewExperiment) -> Created:
    """Write ``experiments/<ID>.yaml`` (or the replicates') and register it, once every check passed: the config
    built and valid, a fork's parent checkpoint checked and fitting, every data source readable."""
    refuse_network_home(home.root)  # before a fork keeps its parent's checkpoint
    if asked.with_optimizer and not asked.init_from:
        raise BadInput("--with-optimizer goes with --init-from ID@STEP")
    config = _config(home, asked)
    if asked.seeds != 1:
        from octlm.tasks.sweeps.planning import plan

        return Created(plan.replicates(home, config, asked.seeds, asked.prefix), [])
    twins = experiments.same_fingerprint(home, config)  # before the writer, which folds the WAL back in on closing
    return Created([experiments.create(home, asked.experiment_id, config, asked.prefix)], twins)


def _config(home: Home, asked: NewExperiment) -> Config:
    """The new experiment's config, checked; a fork's own reference to its parent's checkpoint made last."""
    init = forks.fork_init(home, asked.init_from, optimizer=asked.with_optimizer) if asked.init_from else None
    base_id = asked.from_id or (init["parent"].split("@")[0] if init is not None and not asked.preset else None)
    base = experiments.load(home, base_id) if base_id else None
    config = experiments.build(
        preset=asked.preset,
        from_config=base,
        overrides=list(asked.overrides),
        description=asked.description,
        init=init,
    )
    if init is not None:
        forks.check_fork(home, config)  # here, not at the fork's first train
    sources.check_readable(config.data.sources, sources.data_root(home))  # so too a source that holds nothing
    if init is not None:
        forks.keep_fork_parent(home, config)  # the first write, once every check passed
    return config


# ---------------------------------------------------------------- rm


def removal(home: Home, experiment_id: str) -> Removal:
    """What ``rm`` would remove: {"id", "rows": {table: count}, "files": [paths relative to the home]};
    BadInput when the experiment has neither rows nor files."""
    validate_id(experiment_id)
    with Registry(home.registry, create=False) as registry:
        rows = registry.row_counts(experiment_id)
    files = [_relative(home, path) for path in _files(home, experiment_id)]
    if not rows and not any(name != _relative(home, home.lock_path(experiment_id)) for name in files):
        raise BadInput(f"unknown experiment {experiment_id}: no rows in {home.registry.name} and no files")
    return {"id": experiment_id, "rows": rows, "files": files}


def remove(home: Home, experiment_id: str, *, keep_files: bool = False) -> Removal:
    """Remove an experiment's rows and (unless ``keep_files``) its files, holding its lock; Refused while
    it is being trained. Returns {"id", "rows": {table: rows deleted}, "files": [removed], "kept_files"}."""
    removal(home, experiment_id)  # unknown: BadInput before anything is created or taken
    lock_path = home.lock_path(experiment_id)
    had_lock = lock_path.exists()
    try:
        with ExperimentLock(lock_path, experiment_id):
            with Registry(home.registry, create=home.registry.exists()) as registry:
                _refuse_running(registry, experiment_id)
                kept.keep_marks(
                    home, registry, [experiment_id]
                )  # its number is never given again, even after a rebuild
                files = [] if keep_files else _delete_files(home, experiment_id)
                rows = registry.remove_experiment(experiment_id) if registry.row_counts(experiment_id) else {}
            if not keep_files or not had_lock:
                lock_path.unlink(missing_ok=True)  # held: a writer that opened it first re-checks the inode
    except Refused as error:
        raise Refused(f"cannot remove {experiment_id}: {error}") from None
    if not keep_files and had_lock:
        files.append(_relative(home, lock_path))
    return {"id": experiment_id, "rows": rows, "files": files, "kept_files": keep_files}


def _refuse_running(registry: Registry, experiment_id: str) -> None:
    for run in registry.runs(experiment_id):
        if run["status"] == "running" or str(run["status"]).startswith("unknown (host "):
            raise Refused(
                f"run {run['id']} ({run['kind']}) is {run['status']} (pid {run['pid']} on {run['host']}); "
                "wait for it to finish or stop it"
            )


def _files(home: Home, experiment_id: str) -> list[Path]:
    """The experiment's own files and folders that exist (a link counts as the link itself)."""
    pattern = re.compile(rf"{re.escape(experiment_id)}((-[A-Za-z0-9_]+)?\.jsonl|\.log)")
    candidates = [home.config_path(experiment_id), home.checkpoint_dir(experiment_id)]
    if home.runs.is_dir():
        candidates += sorted(path for path in home.runs.iterdir() if pattern.fullmatch(path.name))
    candidates += [home.live_events(experiment_id)]  # training.tensorboard's events
    candidates += [kept.folder(home) / "identities" / experiment_id, home.lock_path(experiment_id)]
    return [path for path in candidates if path.exists() or path.is_symlink()]


def _delete_files(home: Home, experiment_id: str) -> list[str]:
    removed = []
    for path in _files(home, experiment_id):
        if path == home.lock_path(experiment_id):
            continue  # held now; unlinked last
        removed.append(_relative(home, path))
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)  # never follows a link inside it
        else:
            path.unlink()
    return removed


def _relative(home: Home, path: Path) -> str:
    suffix = "/" if path.is_dir() and not path.is_symlink() else ""
    return str(path.relative_to(home.root)) + suffix


# ---------------------------------------------------------------- archive, tag, note


@contextlib.contextmanager
def _registered(home: Home, experiment_id: str) -> Iterator[Registry]:
    """The writable registry, with the experiment's row (registered from its YAML file if it had none);
    BadInput for an unknown experiment, before a registry is created."""
    validate_id(experiment_id)
    path = home.config_path(experiment_id)
    with Registry(home.registry, create=False) as reader:
        known = reader.experiment(experiment_id) is not None
    if not known and not path.exists():
        raise BadInput(f"unknown experiment {experiment_id}: not in {home.registry.name} and no {path}")
    with Registry(home.registry) as registry:
        if registry.experiment(experiment_id) is None:
            experiments.register(home, registry, experiments.load(home, experiment_id))
        yield registry


def set_archived(home: Home, experiment_id: str, archived: bool) -> Archived:
    """Archive (hidden from ``show`` unless ``--all``) or unarchive; {"id", "archived", "changed"}."""
    with _registered(home, experiment_id) as registry:
        row = registry.experiment(experiment_id)
        registry.set_archived(experiment_id, archived)
    return {"id": experiment_id, "archived": archived, "changed": bool(row and row["archived"]) != archived}


def parse_tags(changes: list[str]) -> tuple[list[str], list[str]]:
    """``+name`` (or ``name``) adds, ``-name`` removes: (added, removed); BadInput for a malformed tag."""
    add: list[str] = []
    remove: list[str] = []
    for change in changes:
        sign, name = (change[0], change[1:]) if change[:1] in ("+", "-") else ("+", change)
        if TAG.fullmatch(name) is None:
            raise BadInput(f"tag {change!r}: {TAG_HELP}")
        (add if sign == "+" else remove).append(name)
    return add, remove


def retag(home: Home, experiment_id: str, changes: list[str]) -> Retagged:
    """Apply ``+name`` / ``-name`` changes; {"id", "tags", "added", "removed"} (what actually changed)."""
    add, remove = parse_tags(changes)
    with _registered(home, experiment_id) as registry:
        row = registry.experiment(experiment_id)
        before = (row["tags"] if row else None) or []
        tags = registry.retag(experiment_id, add, remove) if add or remove else sorted(before)
    added, removed = sorted(set(tags) - set(before)), sorted(set(before) - set(tags))
    return {"id": experiment_id, "tags": tags, "added": added, "removed": removed}


def add_note(home: Home, experiment_id: str, text: str) -> NoteRow:
    """Append a note; the note's row ({"id", "experiment_id", "created", "text"})."""
    text = text.strip()
    if not text:
        raise BadInput("a note needs some text: octlm note ID TEXT")
    if len(text) > MAX_NOTE_CHARS:
        raise BadInput(f"a note holds at most {MAX_NOTE_CHARS:,} characters; this one has {len(text):,}")
    with _registered(home, experiment_id) as registry:
        return registry.add_note(experiment_id, text)


def notes(home: Home, experiment_id: str) -> list[NoteRow]:
    """An experiment's notes, oldest first (read-only)."""
    validate_id(experiment_id)
    with Registry(home.registry, create=False) as registry:
        known = registry.experiment(experiment_id) is not None
        found = registry.notes(experiment_id)
    if not known and not home.config_path(experiment_id).exists():
        raise BadInput(f"unknown experiment {experiment_id}")
    return found
