"""Writing one track's checkpoints: when one is due (``CheckpointCadence``), the file with its registry row, and
retention.

The cadence is the keeper's alone: the loop asks ``CheckpointCadence.due`` after each step (through its hooks), on
every rank, so the ranks of a run gather their random states at the same steps (the loop's own ``LogCadence`` says
when it logs and evaluates).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from octlm.config import Config
from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.records import RunRecord
from octlm.core.records.freeform import StateDict
from octlm.data.fingerprints import Fingerprints
from octlm.run.files import ExperimentFiles, Track
from octlm.store.registry import Registry
from octlm.train import canary, checkpoint
from octlm.train.state import TrainState, record_of


@dataclass(frozen=True)
class CheckpointCadence:
    """When a checkpoint is written: every ``interval`` steps, at each step of ``also`` (``train --checkpoint-at``:
    ``verify-run``'s replay writes the audited run's steps with it) and at ``until`` (and when a run stops early)."""

    interval: int
    until: int
    also: frozenset[int] = frozenset()

    def due(self, step: int) -> bool:
        return step % self.interval == 0 or step == self.until or step in self.also

    @staticmethod
    def steps(asked: Collection[int], until: int) -> frozenset[int]:
        """``--checkpoint-at``'s steps, each between 1 and the run's last (``until``), else one line."""
        for step in asked:
            if not 0 < step <= until:
                raise BadInput(f"--checkpoint-at {step}: must be above 0 and at most the run's last step {until}")
        return frozenset(asked)


class CheckpointKeeper:
    """Writes one track's checkpoints when its ``cadence`` says: the file, its registry row, and retention."""

    def __init__(
        self,
        files: ExperimentFiles,
        track: Track,
        registry: Registry,
        config: Config,
        fingerprints: Fingerprints,
        cadence: CheckpointCadence,
    ):
        self.files, self.track, self.registry = files, track, registry
        self.config, self.fingerprints, self.cadence = config, fingerprints, cadence

    def save(
        self,
        state: TrainState,
        metrics: RunRecord,
        run_id: int | None,
        rng_states: list[StateDict] | None = None,
    ) -> Path:
        self.files.check_lock()  # removed or replaced: another writer could be in; the last checkpoint stays
        path = layout.checkpoint_path(self.track.folder, state.step)
        record = record_of(
            state,
            environment=canary.environment(state),
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
        found = layout.checkpoints(self.track.folder)
        keep = retained([step for step, _ in found], self.config)
        for step, path in found:
            if step not in keep:
                self.registry.remove_checkpoint(self.files.relative(path))
                layout.remove(path)


def retained(steps: list[int], config: Config) -> set[int]:
    """Of a track's checkpoint ``steps`` (oldest first), those kept: the newest ``checkpoint.keep`` and the final one
    (the keeper's rule; a sweep's Ray driver keeps the checkpoints shipped back to it by the same one)."""
    return set(steps[-config.checkpoint.keep :]) | {config.training.steps}
