"""The one keeper of an experiment's files: checkpoint folders, tokenizer, run files, lock,
retention, discarding and leftovers; the translation of training state to and from a checkpoint
record; a fork's step 0 from its parent checkpoint (``init_from``); and what a run would train under now.

Layout in a home: ``checkpoints/<ID>/`` holds the main track's ``step-NNNNNN.pt`` files and the
``tokenizer.json``; ``checkpoints/<ID>/overfit/`` the overfit track's; the run files are
``runs/<ID>.jsonl`` and ``runs/<ID>-overfit.jsonl``; the lock is ``locks/<ID>.lock``, outside the
folders users delete.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.config import Config
from octlm.core.errors import Refused
from octlm.core.home import Home
from octlm.core.reporting import Reporter
from octlm.data import blocks as data
from octlm.data import corpus
from octlm.data.fingerprints import Fingerprints
from octlm.data.pipeline import PreparedData, data_root
from octlm.data.tokenizer import Tokenizer
from octlm.runtime import machine as runtime
from octlm.runtime import rng
from octlm.runtime.distributed import Ranks
from octlm.store.locking import ExperimentLock
from octlm.store.registry import Registry
from octlm.train import canary, checkpoint
from octlm.train.checkpoint import Loaded, Record
from octlm.train.loop import TrainState

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

    def lock(self) -> ExperimentLock:
        """One writer per experiment, for every track; the one place that builds the lock."""
        return ExperimentLock(self.home.lock_path(self.experiment_id), self.experiment_id)

    def relative(self, path: Path) -> str:
        """A path as the registry records it: relative to the home."""
        return str(path.relative_to(self.home.root))

    def newest_valid(self, registry: Registry, step: int | None = None) -> Loaded | None:
        """The main track's newest checkpoint that verifies (or the one at ``step``), each checked
        against the registry's checksum and size where it has them."""
        rows = registry.checkpoints(self.experiment_id)
        sizes = {str(self.home.root / row["path"]): row["size"] for row in rows if isinstance(row.get("size"), int)}
        return checkpoint.newest_valid(self.folder, registry.digests(self.home.root, self.experiment_id), step, sizes)

    def discardable(self) -> list[str]:
        """What ``discard`` removes, relative to the home: checkpoints with their steps, the tokenizer,
        the run files and the overfit folder (only what exists)."""
        found = [f"{self.relative(path)} (step {step})" for step, path in checkpoint.listing(self.folder)]
        paths = (self.tokenizer, self.main.run_file, self.overfit.run_file, self.overfit.folder)
        return found + [self.relative(path) + ("/" if path.is_dir() else "") for path in paths if path.exists()]

    def discard(self, registry: Registry) -> None:
        """``--restart``: checkpoints, tokenizer and run file go; registry rows of old runs stay as history."""
        for _, path in checkpoint.listing(self.folder):
            registry.remove_checkpoint(self.relative(path))
            checkpoint.remove(path)
        self.clear_overfit(registry)
        checkpoint.clean_leftovers(self.folder)
        self.tokenizer.unlink(missing_ok=True)
        self.main.run_file.unlink(missing_ok=True)
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


def record_of(
    state: TrainState,
    *,
    experiment: str,
    kind: str,
    fingerprints: Fingerprints,
    metrics: dict[str, Any],
    rng_states: list[dict[str, Any]] | None = None,
) -> Record:
    """The checkpoint record of a training state; ``rng_states``: every rank's random state, in rank order
    (default: this process's alone)."""
    rng_states = rng_states if rng_states is not None else [rng.capture()]
    return Record(
        experiment=experiment,
        kind=kind,
        step=state.step,
        tokens=state.tokens,
        elapsed_seconds=state.elapsed,
        model=state.model.state_dict(),
        optimizer=state.optimizer.state_dict(),
        sampler=state.sampler.state_dict(),
        scaler=state.scaler.state_dict() if state.scaler else {},
        rng=rng_states,
        fingerprints=fingerprints,
        config=state.config.to_dict(),
        environment=environment_of(state),
        metrics=metrics,
        log_accumulator=state.accumulator.state_dict(),
        world_size=len(rng_states),
    )


def fingerprints_now(home: Home, config: Config, tokenizer_path: Path) -> Fingerprints:
    """What a run would train under now, computed without writing anything: the config's fingerprint,
    the tokenizer file's, and the dataset hash (the corpus is read and hashed, nothing is encoded)."""
    if not tokenizer_path.exists():
        raise Refused(
            f"{tokenizer_path} is missing, so {config.id}'s final checkpoint cannot be checked against it: "
            f"restore it, or start over with `octlm train {config.id} --restart`"
        )
    tokenizer = Tokenizer.load(tokenizer_path)
    sources, fraction = config.data.sources, config.data.validation_fraction
    found = corpus.load(sources, data_root(home), fraction, config.data.max_bytes)
    return Fingerprints(config.fingerprint, data.dataset_hash(found, tokenizer), tokenizer.fingerprint)


def restore(
    prepared: PreparedData, loaded: Loaded, reporter: Reporter, ranks: Ranks | None = None, reshard: bool = False
) -> TrainState:
    """Rebuild the training state from a verified checkpoint, refusing one from another setup. With
    ``reshard``, a checkpoint of another world size is continued: checked against the fingerprint of its own
    world size, every rank's random streams reseeded (``load_record``)."""
    record, ranks = loaded.record, ranks or Ranks()
    current = prepared.fingerprints
    if reshard:
        current = dataclasses.replace(current, config=prepared.config.fingerprint_at(record.world_size))
    checkpoint.check_fingerprints(record, config=prepared.config, current=current, path=loaded.path)
    runtime.set_threads(prepared.config, record.environment.get("threads"))  # portable: the first start's count
    state = TrainState.fresh(prepared.config, prepared.device, len(prepared.train_blocks), ranks=ranks)
    check_environment(record.environment, environment_of(state), loaded.path.name, reporter)
    load_record(state, record, reseed=reshard)
    return state


def environment_of(state: TrainState) -> dict[str, Any]:
    """What a checkpoint of ``state`` records of this process and machine (``runtime``, ``canary``)."""
    config = state.config
    found = runtime.environment(state.device, config.training.precision, state.optimizer_impl)
    return {**found, **canary.environment(config)}


def check_environment(saved: dict[str, Any], current: dict[str, Any], name: str, reporter: Reporter) -> None:
    """Before loading: under portable, whether this machine agrees with the one that wrote checkpoint ``name``
    (their canaries); then every difference that may make the resume inexact."""
    if "canary" in current:
        if saved.get("canary") == current["canary"]:
            reporter.note(f"this machine agrees with the one that wrote {name} (canary {current['canary']})")
        else:
            there = saved.get("canary") or "none recorded"
            reporter.warn(
                f"this machine does not agree with the one that wrote {name} (canary {current['canary']} here, "
                f"{there} there): the resume will not be bit-identical"
            )
    for message in environment_warnings(saved, current):
        reporter.warn(message)


PINNED = ("torch", "python", "platform", "device", "dtype", "threads", "optimizer", "determinism")
WHY = {
    "torch": "each torch release has kernels of its own",
    "device": "another device runs other kernels",
    "threads": "sums split across threads add up in another order",
    "determinism": "the profiles pin different kernels",
    "processor": "the local profile's kernels are chosen per processor; training.determinism: portable pins them",
}


def environment_warnings(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The differences between the environment a checkpoint recorded and this one that may change the bits. Under
    portable (both sides), the processor is not one of them (the canary speaks for it); a GPU always is."""
    portable = "canary" in current and "canary" in saved
    keys = PINNED if portable or "processor" not in saved else (*PINNED, "processor")
    changed = [key for key in keys if saved.get(key) != current.get(key)]
    lines = []
    if changed:
        shown = ", ".join(f"{key} {saved.get(key)} -> {current.get(key)}" for key in changed)
        reasons = "; ".join(WHY[key] for key in changed if key in WHY)
        lines.append(
            f"resuming in a different environment ({shown}): the run continues, but bit-exact resume is promised "
            "only on one torch release, platform, device and thread count" + (f" ({reasons})" if reasons else "")
        )
    if portable and current.get("device") != "cpu":
        lines.append(
            f"the portable profile pins CPU kernels only: on {current.get('device')} the resume may not be exact"
        )
    return lines


def load_record(state: TrainState, record: Record, reseed: bool = False) -> None:
    """Continue ``state`` from a record's progress; rank r restores the record's random state r. With
    ``reseed`` (or a record without random states: rank 0's hand-over of a fresh start) the rank's own
    streams are not taken from the record: reseeded, or left as ``TrainState.fresh`` seeded them."""
    rank = 0 if state.ranks.fault == "rank0-rng" else state.ranks.rank  # the classic mistake, for tests only
    state.load(
        model=record.model,
        optimizer=record.optimizer,
        sampler=record.sampler,
        scaler=record.scaler,
        step=record.step,
        elapsed_seconds=record.elapsed_seconds,
        rng_state=None if reseed or not record.rng else record.rng[rank],
        log_accumulator=record.log_accumulator,
    )
    if reseed:
        rng.seed_all(rng.stream_seed(state.config.training.seed, state.step, state.ranks.rank))


def init_from(state: TrainState, home: Home, fingerprints: Fingerprints, reporter: Reporter) -> Path:
    """Step 0 of a fork (``init``): the parent checkpoint's weights, and with ``init.optimizer`` its optimizer
    and sampler state; never its step, schedule or random states. Refuses a file that is missing or not
    byte for byte ``init.sha256``, and a parent whose model does not fit this config. Returns its path."""
    init, config = state.config.init, state.config
    path = home.root / init.checkpoint
    if not path.is_file():
        raise Refused(f"{config.id} forks from {init.parent or init.checkpoint}, but {path} is missing")
    try:
        record = checkpoint.read(path, init.sha256, exact=True)
    except checkpoint.InvalidCheckpoint as error:
        raise Refused(
            f"{config.id} cannot fork from {init.checkpoint} (init.sha256 {init.sha256[:12]}): {error}"
        ) from None
    _check_shapes(state, record, init.parent or init.checkpoint)
    if record.fingerprints.tokenizer != fingerprints.tokenizer:
        reporter.warn(f"{init.parent or init.checkpoint} was trained with another tokenizer than {config.id}'s")
    state.model.load_state_dict(record.model)
    if init.optimizer:
        own = [{k: v for k, v in group.items() if k != "params"} for group in state.optimizer.param_groups]
        state.optimizer.load_state_dict(record.optimizer)
        for group, settings in zip(state.optimizer.param_groups, own, strict=True):
            group.update(settings)  # this config's betas, decay and rate; the parent's moments
        state.sampler.load_state_dict(record.sampler)
    return path


def _check_shapes(state: TrainState, record: Record, parent: str) -> None:
    """One line when the parent's weights do not fit this model (the first tensor that differs)."""
    own = state.model.state_dict()
    for name in sorted(set(own) | set(record.model)):
        theirs, mine = record.model.get(name), own.get(name)
        if theirs is None or mine is None or tuple(theirs.shape) != tuple(mine.shape):
            there = tuple(theirs.shape) if theirs is not None else "absent"
            here = tuple(mine.shape) if mine is not None else "absent"
            raise Refused(
                f"{parent}'s model does not fit {state.config.id}'s config: {name} is {there} there, {here} here; "
                "forks keep the model's shape"
            )


class CheckpointKeeper:
    """Writes one track's checkpoints: the file, its registry row, and retention."""

    def __init__(
        self, files: ExperimentFiles, track: Track, registry: Registry, config: Config, fingerprints: Fingerprints
    ):
        self.files, self.track, self.registry = files, track, registry
        self.config, self.fingerprints = config, fingerprints

    def save(
        self,
        state: TrainState,
        metrics: dict[str, Any],
        run_id: int | None,
        rng_states: list[dict[str, Any]] | None = None,
    ) -> Path:
        path = checkpoint.path_for(self.track.folder, state.step)
        record = record_of(
            state,
            experiment=self.config.id,
            kind=self.track.kind,
            fingerprints=self.fingerprints,
            metrics=metrics,
            rng_states=rng_states,
        )
        try:
            digest, size = checkpoint.save(path, record)
        except OSError as error:
            raise Refused(
                f"cannot write checkpoint {path.name}: {error.strerror or error}; the previous checkpoint is intact"
            ) from None
        self.registry.add_checkpoint(
            experiment_id=self.config.id,
            run_id=run_id,
            step=state.step,
            path=self.files.relative(path),
            sha256=digest,
            size=size,
            tokens=state.tokens,
            config_hash=self.fingerprints.config,
            data_hash=self.fingerprints.data,
            tokenizer_hash=self.fingerprints.tokenizer,
            metrics=metrics,
        )
        self.prune()
        return path

    def prune(self) -> None:
        """Keep the newest ``checkpoint.keep`` and the final one; only ever after a newer one is durable."""
        found = checkpoint.listing(self.track.folder)
        keep = {step for step, _ in found[-self.config.checkpoint.keep :]} | {self.config.training.steps}
        for step, path in found:
            if step not in keep:
                self.registry.remove_checkpoint(self.files.relative(path))
                checkpoint.remove(path)
