"""Rank 0's word to the other ranks of a data-parallel run, and what those ranks do with it.

Rank 0 alone validates, locks, reads the registry and checkpoints and prepares the data; then it hands
the other ranks one ``Handoff`` (the blocks, its state, every rank's random state of the checkpoint
resumed), or the exit code it stopped with before training. A rank on another box therefore needs no
copy of the home: everything arrives through the process group.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from typing import Any

import torch

from octlm.config import Config
from octlm.core.errors import OctlmError, Refused, Relayed
from octlm.core.reporting import counted
from octlm.core.signals import SIGNAL_EXIT
from octlm.data.blocks import TokenBlocks
from octlm.data.fingerprints import Fingerprints
from octlm.run.keeper import CheckpointCadence
from octlm.run.session import RankSession
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.train import canary, checkpoint
from octlm.train.state import TrainState, load_record, record_of


@dataclass(frozen=True)
class Handoff:
    """What to train, from which state. ``record.rng`` holds every rank's random state of the checkpoint
    resumed (empty: each rank keeps the streams ``TrainState.fresh`` seeded, or reseeds with ``reseed``)."""

    config: Config
    cadence: CheckpointCadence  # where it trains to, and when it checkpoints
    batch_size: int | None
    train_blocks: TokenBlocks
    record: checkpoint.Record
    resumed: bool
    reseed: bool

    @classmethod
    def of(
        cls,
        state: TrainState,
        train_blocks: TokenBlocks,
        *,
        cadence: CheckpointCadence,
        batch_size: int | None,
        loaded: checkpoint.Loaded | None,
        reshard: bool,
    ) -> Handoff:
        """Rank 0's ``state`` as it starts training (restored, forked or fresh), as a ``Record``: the one form
        ``load_record`` restores from, so a rank starts exactly as a resume would. It never reaches a file,
        so it carries no fingerprints or metrics; its random states are the checkpoint's, for every rank."""
        reseed = loaded is not None and reshard
        saved = loaded.record.rng if loaded is not None and not reseed else []
        unsaved = Fingerprints("", "", "")
        record = record_of(state, experiment=state.config.id, kind="handoff", fingerprints=unsaved, metrics={})
        record = dataclasses.replace(
            record,
            model=_on_cpu(record.model),
            optimizer=_on_cpu(record.optimizer),
            rng=saved,
            world_size=state.ranks.world_size,
        )
        return cls(state.config, cadence, batch_size, train_blocks, record, loaded is not None, reseed)


def _on_cpu(tree: Any) -> Any:
    """A state dict with its tensors on the CPU: each rank moves them to its own device when it loads them."""
    if isinstance(tree, torch.Tensor):
        return tree.cpu()
    if isinstance(tree, dict):
        return {key: _on_cpu(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_on_cpu(value) for value in tree]
    return tree


class Relay:
    """Sends rank 0's word once: a ``Handoff``, or the exit code it stopped with before training."""

    def __init__(self, ranks: Ranks):
        self.ranks, self.sent, self.handed_off = ranks, False, False

    def hand_off(self, handoff: Handoff) -> None:
        self.sent = self.handed_off = True
        self.ranks.share(handoff)

    def stop(self, exit_code: int) -> None:
        if not self.sent and self.ranks.parallel:
            self.sent = True
            self.ranks.share(exit_code)


def exit_code(error: BaseException) -> int:
    """The exit code rank 0 ends with for ``error``."""
    if isinstance(error, OctlmError):
        return error.exit_code
    return SIGNAL_EXIT[signal.SIGINT] if isinstance(error, KeyboardInterrupt) else 1


def check_world_size(loaded: checkpoint.Loaded, world_size: int, reshard: bool) -> bool:
    """Whether a resume reshards: refused (exit 3) when the checkpoint's world size is not this run's,
    unless ``reshard`` was given. A checkpoint of canonical pieces (its config's ``training.micro_batches``) never
    reshards: every world size that divides the pieces continues it exactly (one that does not is refused as bad
    input by ``check_split``, which follows), and ``reshard`` changes nothing."""
    saved = loaded.record.world_size
    training = loaded.record.config.get("training")
    if saved == world_size or (isinstance(training, dict) and training.get("micro_batches")):
        return False
    if not reshard:
        raise Refused(
            f"{loaded.path.name} was trained on {counted(saved, 'rank')}, this run has {world_size}: "
            f"resume with {counted(saved, 'rank')} (--nproc x --nnodes) to continue exactly, or add --reshard to "
            f"continue on {world_size} (not bit-exact from here on)"
        )
    return True


def follow(ranks: Ranks) -> None:
    """A rank other than 0: train what rank 0 hands over, or end as rank 0 ended before training."""
    handoff = ranks.share()
    if not isinstance(handoff, Handoff):
        if handoff:
            raise Relayed(int(handoff))
        return
    config = handoff.config
    device = runtime.prepare_process(config)
    canary.require_golden(config)
    state = TrainState.fresh(config, device, len(handoff.train_blocks), handoff.batch_size, ranks)
    load_record(state, handoff.record, reseed=handoff.reseed)
    session = RankSession(config, ranks, handoff.resumed, state.step)
    session.run(state, cadence=handoff.cadence, train_blocks=handoff.train_blocks)
