"""The one keeper of an experiment's files: checkpoint folders and their tracks, the tokenizer, the run files,
the lock, discarding (``train --restart``) and the overfit folder.

Layout in a home: ``checkpoints/<ID>/`` holds the main track's checkpoints (``core.layout`` names them) and the
``tokenizer.json``; ``checkpoints/<ID>/overfit/`` the overfit track's; the run files are ``runs/<ID>.jsonl`` and
``runs/<ID>-overfit.jsonl``, the main track's evaluations block by block ``runs/<ID>-blocks.jsonl``, its live
TensorBoard events (``training.tensorboard``) ``runs/tensorboard/<ID>/``; the lock is
``locks/<ID>.lock``, outside the folders users delete.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from octlm.core import layout
from octlm.core.home import Home
from octlm.store.locking import ExperimentLock
from octlm.store.registry import Registry
from octlm.store.runs import evalblocks
from octlm.train import checkpoint
from octlm.train.checkpoint import Loaded

TOKENIZER = "tokenizer.json"
OVERFIT = "overfit"


@dataclass(frozen=True)
class Track:
    """Where one kind of training keeps its checkpoints and its run file."""

    kind: str  # "train" (train and resume share it) or "overfit"
    folder: Path
    run_file: Path


class ExperimentFiles:
    def __init__(self, home: Home, experiment_id: str):
        self.home, self.experiment_id = home, experiment_id
        self.folder = home.checkpoint_dir(experiment_id)
        self.tokenizer = self.folder / TOKENIZER
        self.main = Track("train", self.folder, home.run_file(experiment_id))
        self.overfit = Track(OVERFIT, self.folder / OVERFIT, home.run_file(experiment_id, f"-{OVERFIT}"))
        self.held: ExperimentLock | None = None  # the lock ``lock`` built, re-checked by ``check_lock``
        self.blocks_file = evalblocks.path_for(self.main.run_file)  # the main track's evaluations block by block
        self.events = home.live_events(experiment_id)  # what training.tensorboard writes (``run.live``)

    def lock(self) -> ExperimentLock:
        """One writer per experiment, for every track; the one place that builds the lock. Every writer comes
        here first, so a folder of the experiment's that is a link (or resolves outside the home) is refused here,
        before anything is written or deleted (``Home.refuse_links``)."""
        self.home.refuse_links(self.overfit.folder, *self.home.own_folders())
        self.held = ExperimentLock(self.home.lock_path(self.experiment_id), self.experiment_id)
        return self.held

    def check_lock(self) -> None:
        """Refused when the lock this process holds was removed or replaced (``ExperimentLock.check``)."""
        if self.held is not None:
            self.held.check()

    def relative(self, path: Path) -> str:
        """A path as the registry records it: relative to the home."""
        return str(path.relative_to(self.home.root))

    def newest_valid(self, registry: Registry, step: int | None = None) -> Loaded | None:
        """The main track's newest checkpoint that verifies (or the one at ``step``), each checked
        against the registry's checksum and size where it has them."""
        rows = registry.checkpoints(self.experiment_id)
        sizes = {str(self.home.root / row["path"]): row["size"] for row in rows if isinstance(row["size"], int)}
        return checkpoint.newest_valid(self.folder, registry.digests(self.home.root, self.experiment_id), step, sizes)

    def discardable(self) -> list[str]:
        """What ``discard`` removes, relative to the home: checkpoints with their steps, the tokenizer,
        the run files and the overfit folder (only what exists)."""
        found = [f"{self.relative(path)} (step {step})" for step, path in layout.checkpoints(self.folder)]
        paths = (
            self.tokenizer,
            self.main.run_file,
            self.blocks_file,
            self.overfit.run_file,
            self.overfit.folder,
            self.events,
        )
        return found + [self.relative(path) + ("/" if path.is_dir() else "") for path in paths if path.exists()]

    def discard(self, registry: Registry) -> None:
        """``--restart``: checkpoints, tokenizer and run file go; registry rows of old runs stay as history."""
        for _, path in layout.checkpoints(self.folder):
            registry.remove_checkpoint(self.relative(path))
            layout.remove(path)
        self.clear_overfit(registry)
        layout.clean_leftovers(self.folder)
        self.tokenizer.unlink(missing_ok=True)
        self.main.run_file.unlink(missing_ok=True)
        self.blocks_file.unlink(missing_ok=True)
        shutil.rmtree(self.events, ignore_errors=True)
        registry.cut_metrics(self.experiment_id, self.main.kind, 0)

    def clear_overfit(self, registry: Registry) -> None:
        """The overfit track always starts from step 0: its checkpoints, rows and run file go."""
        prefix = self.relative(self.overfit.folder) + "/"
        for row in registry.checkpoints(self.experiment_id):
            if row["path"].startswith(prefix):
                registry.remove_checkpoint(row["path"])
        shutil.rmtree(self.overfit.folder, ignore_errors=True)
        self.overfit.run_file.unlink(missing_ok=True)
        registry.cut_metrics(self.experiment_id, OVERFIT, 0)
