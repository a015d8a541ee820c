"""Where a run starts from: a verified checkpoint restored into a training state (refusing one of another setup,
experiment, track or world size), or a fork's step 0 from its parent's checkpoint (``init_from``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from octlm.core.errors import Refused
from octlm.core.home import Home
from octlm.core.reporting import Reporter
from octlm.data.fingerprints import Fingerprints
from octlm.data.pipeline import PreparedData
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.train import canary, checkpoint
from octlm.train.checkpoint import Loaded, Record
from octlm.train.state import TrainState, load_record


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
    runtime.check_environment(record.environment, canary.environment(state), loaded.path.name, reporter)
    load_record(state, record, reseed=reshard)
    return state


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
