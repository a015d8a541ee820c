"""Where a run starts from: a verified checkpoint restored into a training state (refusing one of another setup,
experiment, track or world size), or a fork's step 0 from its parent's checkpoint (``init_from``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from octlm.config import Config
from octlm.core.errors import Refused
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.core.reporting import Reporter, counted
from octlm.data import sampler
from octlm.data.fingerprints import Fingerprints
from octlm.data.pipeline import PreparedData
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.store.runs import runfile
from octlm.train import canary, checkpoint
from octlm.train.checkpoint import Loaded, Record
from octlm.train.state import TrainState, load_record


def restore(
    prepared: PreparedData,
    loaded: Loaded,
    reporter: Reporter,
    ranks: Ranks | None = None,
    reshard: bool = False,
    home: Home | None = None,
) -> TrainState:
    """Rebuild the training state from a verified checkpoint, refusing one from another setup. With
    ``reshard``, a checkpoint of another world size is continued: checked against the fingerprint of its own
    world size, every rank's random streams reseeded (``load_record``). With ``home`` (the experiment's), the
    data order is checked too: the sampler replayed from the run's start must reach the checkpoint's state and
    receipt (``check_data_order``)."""
    record, ranks = loaded.record, ranks or Ranks()
    current = prepared.fingerprints
    if reshard:
        current = dataclasses.replace(current, config=prepared.config.fingerprint_at(record.world_size))
    checkpoint.check_fingerprints(record, config=prepared.config, current=current, path=loaded.path)
    runtime.set_threads(prepared.config, record.environment.get("threads"))  # a pinned tier: the first start's count
    state = TrainState.fresh(prepared.config, prepared.device, len(prepared.train_blocks), ranks=ranks)
    pieces = prepared.config.training.micro_batches > 0  # their bits do not depend on the thread count
    runtime.check_environment(record.environment, canary.environment(state), loaded.path.name, reporter, pieces)
    load_record(state, record, reseed=reshard)
    if home is not None:
        check_data_order(state, record, home, loaded.path.name, reporter)
    return state


def check_data_order(state: TrainState, record: Record, home: Home, name: str, reporter: Reporter) -> None:
    """Replay the sampler from the run's start (step 0, or a fork's parent checkpoint whose sampler it took) to the
    checkpoint's step, drawing indices only; refuse the checkpoint when the replayed state or receipt differs from
    its own. A checkpoint written before receipts takes the replayed receipt."""
    start, first = _start_sampler(state, home)
    replayed, receipt = sampler.replay(start, record.step - first)
    if not torch.equal(replayed, state.sampler.state_dict()) or (
        record.receipt and receipt.state_dict() != record.receipt
    ):
        saved = record.receipt or {"blocks": "?", "digest": "none recorded"}
        raise Refused(
            f"{name}: its data order does not replay under this config: receipt {saved['digest']} after "
            f"{saved['blocks']} blocks in the checkpoint, {receipt.digest} after {receipt.blocks} replayed from the "
            "run's start; it will not be continued (the checkpoint was altered, or written by another sampler)"
        )
    if not record.receipt:
        state.sampler.receipt.load_state_dict(receipt.state_dict())
        reporter.note(f"{name} predates data-order receipts: its order was replayed and checked ({receipt.digest})")


def _start_sampler(state: TrainState, home: Home) -> tuple[sampler.Sampler, int]:
    """The sampler a run started from, and its step: fresh at 0, or a fork's parent's (``init.optimizer``)."""
    config, blocks = state.config, state.sampler.num_blocks
    fresh = sampler.sampler_for(config.data.sampling, blocks, config.training.batch_size, config.training.seed)
    init = config.init
    if not init.optimizer:
        return fresh, 0
    try:
        parent = checkpoint.read(home.root / init.checkpoint, init.sha256, exact=True)
    except (checkpoint.InvalidCheckpoint, OSError) as error:
        raise Refused(f"{config.id}: its parent checkpoint {init.checkpoint} cannot be read: {error}") from None
    fresh.load_state_dict(parent.sampler)
    if parent.receipt:
        fresh.receipt.load_state_dict(parent.receipt)
    return fresh, init.step


def init_from(state: TrainState, home: Home, fingerprints: Fingerprints, reporter: Reporter) -> Path:
    """The start of a fork (``init``): the parent checkpoint's weights; with ``init.optimizer`` its optimizer and
    sampler state too; with ``init.step`` everything of the parent's run at that step (its step, optimizer,
    sampler, receipt, random states, loss since the last log, guard), so the fork continues the parent's run
    exactly under its own config (a longer ``wsd`` schedule, say). The optimizer keeps this config's settings
    (rate, betas, decay). Refuses a file that is missing or not byte for byte ``init.sha256``, a parent whose model
    does not fit this config, and a parent step other than ``init.step``. Returns its path."""
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
    own = [{k: v for k, v in group.items() if k != "params"} for group in state.optimizer.param_groups]
    if init.step:
        _check_continuation(state, record, init.parent or init.checkpoint)
        load_record(state, record)
    elif init.optimizer:
        state.optimizer.load_state_dict(record.optimizer)
        state.sampler.load_state_dict(record.sampler)
        if record.receipt:
            state.sampler.receipt.load_state_dict(record.receipt)
    state.model.load_state_dict(record.model)
    for group, settings in zip(state.optimizer.param_groups, own, strict=True):
        group.update(settings)  # this config's betas, decay and rate; the parent's moments
    return path


def _check_continuation(state: TrainState, record: Record, parent: str) -> None:
    init = state.config.init
    if record.step != init.step:
        raise Refused(f"{state.config.id}: init.step is {init.step} but {parent}'s checkpoint is at step {record.step}")
    if record.world_size != state.ranks.world_size and not state.config.training.micro_batches:  # pieces: any size
        raise Refused(
            f"{state.config.id} continues {parent}'s run, trained on {counted(record.world_size, 'rank')}: "
            f"train it on {record.world_size} (--nproc x --nnodes), not {state.ranks.world_size}"
        )


def parent_records(home: Home, config: Config) -> list[RunRecord]:
    """A fork that continues its parent's run (``init.step``) inherits the parent's run-file records up to that
    step, so its run file is the one an uninterrupted run would have written; none for any other experiment."""
    parent = config.init.parent.partition("@")[0]
    if not config.init.step or not parent:
        return []
    kept = runfile.read(home.run_file(parent))
    return [r for r in kept if isinstance(r.get("step"), int) and r["step"] <= config.init.step]


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
