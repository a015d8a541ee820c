"""Forks (``octlm new --init-from ID@STEP [--with-optimizer]``): the ``init`` section a fork's config gets from its
parent's checkpoint (checked against its checksum), the checks that refuse a fork that could not train, at ``new``
rather than at its first train, and the fork's own reference to its parent's checkpoint, made once every check
passed. Torch-free: the checkpoint is read as bytes, never loaded."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from octlm import config as cfg
from octlm.core import layout
from octlm.core.errors import BadInput, OctlmError, Refused
from octlm.core.fsutil import atomic_writer, file_sha256, open_regular
from octlm.core.home import ID_PATTERN, Home, validate_id
from octlm.core.records.freeform import ConfigTree
from octlm.store.experiments import load

FORK_POINT = re.compile(rf"(?P<parent>{ID_PATTERN.pattern})@(?P<step>[0-9]{{1,12}})")


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
