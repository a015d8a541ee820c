"""One training step, the loop around it, and evaluation.

The loop never prints, never opens the registry and never touches rich: it reports
through callbacks, and the runner decides what to do with each event. Nothing here
calls ``.item()`` except at logging points, so the host never waits on every step.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from octlm.config import Config
from octlm.data.blocks import Sampler, TokenBlocks, bits_per_byte
from octlm.runtime import compile_cache, rng
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.train.decoder import Decoder, loss_sums
from octlm.train.decoder import loss as model_loss
from octlm.train.optim import build_optimizer, optimizer_impl
from octlm.train.schedule import for_config

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST[precision])


def make_objective(
    model: Decoder, device: torch.device, precision: str, compile: bool, ranks: Ranks | None = None
) -> Callable[..., torch.Tensor]:
    """The training loss as a function of (inputs, targets, pad_id), compiled when asked.

    Compiled, the same graph is generated in every process, so a compiled run resumes exactly
    (``verify-resume`` checks it); its numbers differ from an eager run's, which is why
    ``training.compile`` is part of the fingerprint. Evaluation and generation stay eager.
    """

    forward: list[nn.Module] = []  # ``ranks.wrap`` at the first step, when every rank is there

    def objective(inputs: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
        if not forward:
            forward.append(ranks.wrap(model) if ranks is not None else model)
        with autocast(device, precision):
            logits = forward[0](inputs)  # (B, T, V)
        return model_loss(logits, targets, pad_id)

    if not compile:
        return objective
    runtime.require_compile(device)
    compile_cache.use()  # graphs kept per user between processes, never in a home (see compile_cache)
    # The rotary complex multiply runs as the eager kernel inside the compiled graph; measured on
    # day2, a real-valued rotary that Inductor can fuse was no faster, so the warning is noise.
    warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex operators")
    return torch.compile(objective, dynamic=False)


class LogAccumulator:
    """The training loss summed on the device since the last logged record, and how many steps that is.

    ``add`` never syncs with the host; ``take`` (at a logged step) does, once. The mean is defined as
    ``float(sum of float64(loss)) / count``, summed in step order, so it is the same split or not:
    the running sum and count travel in the checkpoint (``state_dict`` / ``load_state_dict``).
    """

    def __init__(self, device: torch.device):
        self.dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        self.total = torch.zeros((), dtype=self.dtype, device=device)
        self.count = 0

    def add(self, loss: torch.Tensor) -> None:
        self.total += loss.to(self.dtype)
        self.count += 1

    def take(self) -> float:
        """The mean since the last ``take`` (the one host sync), and a fresh start."""
        mean = self.total.item() / max(1, self.count)
        self.total.zero_()
        self.count = 0
        return mean

    def state_dict(self) -> dict[str, Any]:
        return {"loss_sum": self.total.item(), "count": self.count} if self.count else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total.fill_(float(state.get("loss_sum", 0.0)))
        self.count = int(state.get("count", 0))


@dataclass
class TrainState:
    """Everything that carries training progress; a checkpoint record is built from it (``artifacts.record_of``) and
    restored into it (``load``)."""

    config: Config
    device: torch.device
    model: Decoder
    optimizer: torch.optim.AdamW
    sampler: Sampler
    scaler: torch.amp.GradScaler | None
    optimizer_impl: str  # "fused" or "foreach": part of the environment a checkpoint records
    objective: Callable[..., torch.Tensor]
    step: int = 0
    elapsed: float = 0.0  # seconds of training so far, all processes together (set at each checkpoint)
    log: LogAccumulator | None = None  # the loss since the last logged record (built with the state)
    ranks: Ranks = field(default_factory=Ranks)  # this process's place in a data-parallel run

    def __post_init__(self) -> None:
        if self.log is None:
            self.log = LogAccumulator(self.device)

    @property
    def accumulator(self) -> LogAccumulator:
        assert self.log is not None
        return self.log

    @classmethod
    def fresh(
        cls,
        config: Config,
        device: torch.device,
        num_blocks: int,
        batch_size: int | None = None,
        ranks: Ranks | None = None,
    ) -> TrainState:
        """Step 0. Every rank initialises the same model from ``training.seed``; then, on several ranks, each
        rank's own streams (dropout) are reseeded with seed + rank. One sampler stream draws the global batch."""
        ranks = ranks or Ranks()
        training = config.training
        rng.seed_all(training.seed)
        model = Decoder(config).to(device)  # initialisation draws from the global generator
        if ranks.parallel:
            rng.seed_all(training.seed + ranks.rank)
        impl = optimizer_impl(device)
        optimizer = build_optimizer(model, config, impl)
        sampler = Sampler(num_blocks, batch_size or training.batch_size, training.seed)
        scaler = torch.amp.GradScaler(device.type) if training.precision == "fp16" else None
        objective = make_objective(model, device, training.precision, training.compile, ranks)
        return cls(config, device, model, optimizer, sampler, scaler, impl, objective, ranks=ranks)

    @property
    def tokens_per_step(self) -> int:
        return self.sampler.batch_size * self.config.model.context_length

    @property
    def tokens(self) -> int:
        return self.step * self.tokens_per_step

    def load(
        self,
        *,
        model: dict[str, Any],
        optimizer: dict[str, Any],
        sampler: torch.Tensor,
        scaler: dict[str, Any],
        step: int,
        elapsed_seconds: float,
        rng_state: dict[str, Any] | None,
        log_accumulator: dict[str, Any] | None = None,
    ) -> None:
        """Continue from saved progress (a checkpoint's parts); ``rng_state`` None: this process's streams stay."""
        self.model.load_state_dict(model)
        self.optimizer.load_state_dict(optimizer)
        self.sampler.load_state_dict(sampler)
        if self.scaler is not None and scaler:
            self.scaler.load_state_dict(scaler)
        self.step = int(step)
        self.elapsed = float(elapsed_seconds)
        self.accumulator.load_state_dict(log_accumulator or {})
        if rng_state is not None:
            rng.restore(rng_state)  # last: after the model and optimizer are built, right before the first batch


def train_step(state: TrainState, blocks: TokenBlocks, learning_rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One step in the seed's order; returns (loss of the global batch, gradient norm before clipping) as tensors.

    One process without accumulation takes the seed's path: the mean loss of the batch, backward. Otherwise
    each micro-batch of this rank's slice contributes its mean loss weighted by its share of the global
    batch's target tokens, and the ranks' gradients are summed (``Ranks.reduce_gradients``)."""
    training = state.config.training
    index = state.sampler.next()  # the global batch; byte lengths are for evaluation only
    parts = state.ranks.slices(index, training.grad_accum_steps)
    if len(parts) == 1 and not state.ranks.parallel:
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
    for group in state.optimizer.param_groups:
        group["lr"] = learning_rate
    if state.scaler is not None:
        state.scaler.step(state.optimizer)
        state.scaler.update()
    else:
        state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    return loss.detach(), norm.detach()


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


@torch.no_grad()
def evaluate(
    model: nn.Module, blocks: TokenBlocks, device: torch.device, precision: str, batch_size: int
) -> dict[str, float]:
    """Loss, perplexity and bits per byte over fixed blocks; draws from no random stream."""
    was_training = model.training
    model.eval()
    nats = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    total_bytes = 0
    for start in range(0, len(blocks), batch_size):
        inputs, targets = blocks.batch(slice(start, start + batch_size))
        with autocast(device, precision):
            logits = model(inputs.to(device))
        batch_nats, batch_count = loss_sums(logits, targets.to(device), blocks.pad_id)
        nats += batch_nats.double()
        count += batch_count
        total_bytes += int(blocks.target_bytes(targets).sum())
    model.train(was_training)
    total_nats, total_count = nats.item(), count.item()
    mean = total_nats / max(1, total_count)
    return {
        "eval_loss": mean,
        "perplexity": math.exp(min(mean, 700.0)),
        "bits_per_byte": bits_per_byte(total_nats, total_bytes),
    }


@dataclass
class LoopHooks:
    """How the loop reports; every hook is optional. ``on_eval`` receives every logged record."""

    on_step: Callable[[int], None] = lambda step: None
    on_eval: Callable[[dict[str, Any]], None] = lambda record: None
    on_checkpoint: Callable[[TrainState], None] = lambda state: None
    should_stop: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class Cadence:
    """When the loop logs, evaluates and checkpoints; none of it touches a random stream."""

    eval_interval: int
    checkpoint_interval: int
    log_interval: int = 0  # 0: log only where it evaluates

    def evaluates(self, step: int, last: int) -> bool:
        return step % self.eval_interval == 0 or step == last

    def logs(self, step: int, last: int) -> bool:
        return bool(self.log_interval and step % self.log_interval == 0) or self.evaluates(step, last)

    def checkpoints(self, step: int, until: int) -> bool:
        return step % self.checkpoint_interval == 0 or step == until


def train_until(
    state: TrainState,
    *,
    until: int,
    train_blocks: TokenBlocks,
    eval_blocks: TokenBlocks,
    eval_interval: int,
    checkpoint_interval: int,
    hooks: LoopHooks,
    log_interval: int = 0,
) -> bool:
    """Train from ``state.step`` to ``until``; True when ``should_stop`` ended the loop early.

    Logs a record at multiples of ``log_interval``, and evaluates (adding the evaluation to that
    step's record) at multiples of ``eval_interval`` and at the config's last step, never elsewhere,
    so where a run is split does not change its run file. Each record's ``train_loss`` is the mean
    since the previous record. Checkpoints at multiples of ``checkpoint_interval``, at ``until`` and
    when stopped.
    """
    schedule = for_config(state.config.training)
    cadence, last = Cadence(eval_interval, checkpoint_interval, log_interval), state.config.training.steps
    state.model.train()
    while state.step < until:
        if hooks.should_stop():
            hooks.on_checkpoint(state)
            return True
        learning_rate = schedule(state.step)
        loss, norm = train_step(state, train_blocks, learning_rate)
        state.accumulator.add(loss)
        hooks.on_step(state.step)
        if cadence.logs(state.step, last) and state.ranks.leader:  # rank 0 alone evaluates and logs
            evaluation = _evaluation(state, eval_blocks) if cadence.evaluates(state.step, last) else {}
            hooks.on_eval(_record(state, learning_rate, norm, evaluation))
        elif cadence.logs(state.step, last):
            state.accumulator.take()
        if cadence.checkpoints(state.step, until):
            hooks.on_checkpoint(state)
    return False


def _evaluation(state: TrainState, eval_blocks: TokenBlocks) -> dict[str, float]:
    precision, batch_size = state.config.training.precision, state.sampler.batch_size
    return evaluate(state.model, eval_blocks, state.device, precision, batch_size)


def _record(
    state: TrainState, learning_rate: float, norm: torch.Tensor, evaluation: dict[str, float]
) -> dict[str, Any]:
    """One run-file record: the mean loss since the last record and the logged step's gradient norm
    (the only host syncs), and the evaluation at an evaluation step."""
    return {
        "step": state.step,
        "tokens": state.tokens,
        "lr": learning_rate,
        "train_loss": state.accumulator.take(),
        **evaluation,
        "gradient_norm": norm.item(),
    }
