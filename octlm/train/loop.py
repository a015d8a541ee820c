"""One training step and the loop around it.

The loop never prints, never opens the registry and never touches rich: it reports through hooks, and the session
decides what to do with each event (including when a checkpoint is due: the keeper's cadence). Nothing here calls
``.item()`` except at logging points, so the host never waits on every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from octlm.config.schedules import rate_of
from octlm.core.records import RunRecord
from octlm.data.blocks import TokenBlocks
from octlm.data.sampler import epochs_of
from octlm.runtime import lean, rng
from octlm.train.evaluation import PerBlock, evaluate_blocks
from octlm.train.model.piecewise import PiecePlan, pass_size, piece_losses
from octlm.train.state import TrainState


def train_step(state: TrainState, blocks: TokenBlocks, learning_rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One step in the seed's order; returns (loss of the global batch, gradient norm before clipping) as tensors.
    The step guard sees both before the update is applied (``guard``: it may stop the run, or skip the update).

    One process without accumulation takes the seed's path: the mean loss of the batch, backward. Otherwise
    each micro-batch of this rank's slice contributes its mean loss weighted by its share of the global
    batch's target tokens, and the ranks' gradients are summed (``Ranks.reduce_gradients``); with canonical
    pieces (``training.micro_batches``), each piece is computed alone and the pieces are summed in one fixed tree
    (``_pieces``)."""
    training = state.config.training
    index = state.sampler.next()  # the global batch; byte lengths are for evaluation only
    parts = [] if training.micro_batches else state.ranks.slices(index, training.grad_accum_steps)
    if training.micro_batches:
        loss = _pieces(state, blocks, index)
    elif len(parts) == 1 and not state.ranks.parallel:
        loss = _backward(state, blocks, index, None)
    else:
        counted = int((blocks.batch(index)[1] != blocks.pad_id).sum())
        losses = [_backward(state, blocks, part, counted) for part in parts]
        state.ranks.reduce_gradients(list(state.model.parameters()))
        loss = state.ranks.total(torch.stack(losses).sum())
    if state.scaler is not None:
        state.scaler.unscale_(state.optimizer)
    limit = training.grad_clip if training.grad_clip > 0 else math.inf
    norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(), limit, foreach=True)
    if state.guard.check(state.step + 1, loss, norm):  # Diverged, or False: a spike whose update is skipped
        for group in state.optimizer.param_groups:
            group["lr"] = learning_rate
        if state.scaler is not None:
            state.scaler.step(state.optimizer)
            state.scaler.update()
        else:
            lean.step(state.optimizer)
    state.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    return loss.detach(), norm.detach()


def _pieces(state: TrainState, blocks: TokenBlocks, index: torch.Tensor) -> torch.Tensor:
    """Canonical pieces: each of this rank's pieces of the global batch with the bits it gets alone (in one pass
    where ``one_pass`` says, else a pass each, its dropout seeded by (seed, step, piece) and never by rank), then
    every rank's pieces summed in the fixed tree (``runtime.pieces``); returns the step's loss. The same bits on
    any world size that divides the pieces, one process included."""
    training = state.config.training
    counted = int((blocks.batch(index)[1] != blocks.pad_id).sum())
    parameters = list(state.model.parameters())
    summed = state.ranks.piece_sum(training.micro_batches)
    mine = state.ranks.pieces(index, training.micro_batches)
    if one_pass(state):
        leaf_bytes = parameters[0].element_size() * (1 + sum(p.numel() for p in parameters))
        size = pass_size(len(mine), len(mine[0][1]) * (blocks.width - 1), leaf_bytes)
        for start in range(0, len(mine), size):  # one pass, unless the pieces exceed what a pass takes
            group = mine[start : start + size]
            leaves = _one_pass(state, blocks, group, counted, keep=size == len(mine))
            for (piece, _), leaf in zip(group, leaves, strict=True):
                summed.add_leaf(piece, leaf)
    else:
        for piece, part in mine:
            with rng.piece_stream(training.seed, state.step + 1, piece, state.device):
                loss = _backward(state, blocks, part, counted)
            summed.add(piece, parameters, loss)
    return summed.finish(parameters)


def one_pass(state: TrainState) -> bool:
    """Whether this rank runs its pieces in one forward and backward (``train.model.piecewise``): eager fp32 on the
    CPU without dropout, whose kernels are row-invariant. Dropout draws per piece from the piece's own generator,
    and compiled graphs, autocast and GPU kernels are not shown row-invariant: those keep a pass per piece."""
    config = state.config
    eager = not config.training.compile and config.training.precision == "fp32"
    return eager and config.model.dropout == 0 and state.device.type == "cpu" and state.ranks.fault != "plain-ddp"


def _one_pass(
    state: TrainState, blocks: TokenBlocks, mine: list[tuple[int, torch.Tensor]], counted: int, keep: bool
) -> list[torch.Tensor]:
    """Pieces ``mine`` in one pass; returns each piece's leaf (its gradients, then its loss), with the bits of
    ``_backward`` over the piece alone: the same loss per piece, weighted by its share of ``counted``. ``keep``:
    the step's only pass, into the leaves of the last step (``PiecePlan.begin``)."""
    plan = _plan(state, len(mine), keep)
    inputs, targets = blocks.batch(torch.cat([part for _, part in mine]))
    logits = state.model(inputs.to(state.device), plan=plan)
    losses = piece_losses(logits, targets.to(state.device), blocks.pad_id, counted, plan.pieces)
    scale = state.ranks.gradient_scale
    (losses * scale if scale != 1.0 else losses).backward(torch.ones_like(losses))
    return plan.finish(losses)


def _plan(state: TrainState, pieces: int, keep: bool = True) -> PiecePlan:
    """The state's plan for ``pieces`` pieces in one pass, made at the first step and kept, ready for this one."""
    if pieces not in state.plans:
        state.plans[pieces] = PiecePlan(list(state.model.parameters()), pieces)
    return state.plans[pieces].begin(keep)


def _backward(state: TrainState, blocks: TokenBlocks, index: torch.Tensor, counted: int | None) -> torch.Tensor:
    """Forward and backward of the blocks at ``index``; returns the loss it adds to the step's (detached).
    ``counted``: the global batch's target tokens, which the mean loss of these blocks is weighted against."""
    inputs, targets = blocks.batch(index)  # (b, T) each, gathered from the token stream
    loss = state.objective(inputs.to(state.device), targets.to(state.device), blocks.pad_id)
    if counted is not None:
        share = int((targets != blocks.pad_id).sum()) / max(1, counted)
        loss = loss * share  # the mean of a micro-batch of padding only is 0
    scaled = loss * state.ranks.gradient_scale if state.ranks.gradient_scale != 1.0 else loss
    (state.scaler.scale(scaled) if state.scaler is not None else scaled).backward()
    return loss.detach()


@dataclass
class LoopHooks:
    """How the loop reports; every hook is optional. ``on_eval`` receives every logged record."""

    on_step: Callable[[int], None] = lambda step: None
    on_eval: Callable[[RunRecord], None] = lambda record: None
    on_blocks: Callable[[int, PerBlock], None] = lambda step, blocks: None  # an evaluation block by block
    on_checkpoint: Callable[[TrainState], None] = lambda state: None
    checkpoint_due: Callable[[int], bool] = lambda step: False  # the keeper's cadence
    should_stop: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class LogCadence:
    """When the loop logs and evaluates (``training.log_interval``, ``eval_interval``, and the config's last step);
    none of it touches a random stream."""

    eval_interval: int
    log_interval: int
    last: int

    def evaluates(self, step: int) -> bool:
        return step % self.eval_interval == 0 or step == self.last

    def logs(self, step: int) -> bool:
        return step % self.log_interval == 0 or self.evaluates(step)


def train_until(
    state: TrainState,
    *,
    until: int,
    train_blocks: TokenBlocks,
    eval_blocks: TokenBlocks,
    hooks: LoopHooks,
) -> bool:
    """Train from ``state.step`` to ``until``; True when ``should_stop`` ended the loop early.

    Logs a record at multiples of ``training.log_interval``, and evaluates (adding the evaluation to that
    step's record) at multiples of ``training.eval_interval`` and at the config's last step, never elsewhere,
    so where a run is split does not change its run file. Each record's ``train_loss`` is the mean
    since the previous record. Checkpoints where ``hooks.checkpoint_due`` says and when stopped.
    """
    training = state.config.training
    schedule = rate_of(training)
    cadence = LogCadence(training.eval_interval, training.log_interval, training.steps)
    state.model.train()
    while state.step < until:
        if hooks.should_stop():
            hooks.on_checkpoint(state)
            return True
        learning_rate = schedule(state.step)
        loss, norm = train_step(state, train_blocks, learning_rate)
        state.accumulator.add(loss)
        hooks.on_step(state.step)
        if cadence.logs(state.step) and state.ranks.leader:  # rank 0 alone evaluates and logs
            evaluation = _evaluation(state, eval_blocks, hooks) if cadence.evaluates(state.step) else {}
            hooks.on_eval(_record(state, learning_rate, norm, evaluation))
        elif cadence.logs(state.step):
            state.accumulator.take()
        if hooks.checkpoint_due(state.step):
            hooks.on_checkpoint(state)
    return False


def _evaluation(state: TrainState, eval_blocks: TokenBlocks, hooks: LoopHooks) -> RunRecord:
    """The evaluation's figures for the record; its blocks go to ``hooks.on_blocks`` first."""
    precision, batch_size = state.config.training.precision, state.sampler.batch_size
    figures, per_block = evaluate_blocks(state.model, eval_blocks, state.device, precision, batch_size)
    hooks.on_blocks(state.step, per_block)
    return figures


def _record(state: TrainState, learning_rate: float, norm: torch.Tensor, evaluation: RunRecord) -> RunRecord:
    """One run-file record: the mean loss since the last record and the logged step's gradient norm
    (the only host syncs), and the evaluation at an evaluation step."""
    record: RunRecord = {
        "step": state.step,
        "tokens": state.tokens,
        "lr": learning_rate,
        "train_loss": state.accumulator.take(),
        **evaluation,  # eval_loss, perplexity, bits_per_byte
        "gradient_norm": norm.item(),
        "epochs": epochs_of(state.sampler),
        "data_blocks": state.sampler.receipt.blocks,
        "data_receipt": state.sampler.receipt.digest,
    }
    if state.guard.mode == "skip":
        record["skipped_steps"] = len(state.guard.skipped)
    return record
