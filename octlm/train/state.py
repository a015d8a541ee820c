"""The training state: everything that carries progress (model, optimizer, sampler, scaler, the loss since the last
log, the step), how step 0 is built, and its translation to and from a checkpoint ``Record``.

``TrainState.fresh`` is step 0; ``record_of`` turns a state into the record a checkpoint holds, ``load_record``
continues a state from one (rank r restoring the record's random state r), so a resume and a rank that rank 0 hands
its state to both start exactly as the run that wrote the record would have gone on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from octlm.config import Config
from octlm.core.records import Environment, RunRecord
from octlm.core.records.freeform import StateDict
from octlm.data.fingerprints import Fingerprints
from octlm.data.sampler import Sampler, sampler_for
from octlm.runtime import machine as runtime
from octlm.runtime import rng
from octlm.runtime.distributed import Ranks
from octlm.runtime.native import compile_cache
from octlm.train.checkpoint import Record
from octlm.train.guard import StepGuard
from octlm.train.model.decoder import Decoder
from octlm.train.model.decoder import loss as model_loss
from octlm.train.model.piecewise import PiecePlan
from octlm.train.optim import build_optimizer, optimizer_impl


def make_objective(
    model: Decoder, device: torch.device, precision: str, compile: bool, ranks: Ranks | None = None
) -> Callable[..., torch.Tensor]:
    """The training loss as a function of (inputs, targets, pad_id), compiled when asked.

    Compiled, the same graph is generated in every process, so a compiled run resumes exactly
    (``verify-resume`` checks it); its numbers differ from an eager run's, which is why
    ``training.compile`` is part of the fingerprint. Evaluation and generation stay eager. On a CPU, the kernels
    Inductor generates run on one thread (``INDUCTOR_CPU``).
    """

    forward: list[nn.Module] = []  # ``ranks.wrap`` at the first step, when every rank is there

    def objective(inputs: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
        if not forward:
            forward.append(ranks.wrap(model) if ranks is not None else model)
        with runtime.autocast(device, precision):
            logits = forward[0](inputs)  # (B, T, V)
        return model_loss(logits, targets, pad_id)

    if not compile:
        return objective
    runtime.require_compile(device)
    compile_cache.use()  # graphs kept per user between processes, never in a home (see compile_cache)
    # The rotary complex multiply runs as the eager kernel inside the compiled graph; measured on
    # day2, a real-valued rotary that Inductor can fuse was no faster, so the warning is noise.
    warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex operators")
    return torch.compile(objective, dynamic=False, options=INDUCTOR_CPU if device.type == "cpu" else None)


# Inductor generates its CPU kernels for the thread count they run at: on more than one, the embedding's gradient
# is added up by the threads at once (``atomic_add``), in an order that changes from run to run, and reductions keep
# a partial sum per thread. Measured (2026-12-04): a compiled day2 step at 2 threads trained other weights in every
# run, and compiled pieces other weights at 1, 2 and 4 threads. Generated for one thread, the kernels give the same
# bits every time, at any count, and the bits they gave before at one; the matmuls and attention stay ATen's, on
# every thread (a day2 step at 2 threads: 1,106 against 1,118 ms). tests/train/test_thread_invariance.py.
INDUCTOR_CPU: dict[str, str | int | bool | Callable[..., Any]] = {"cpp.threads": 1}


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

    def state_dict(self) -> StateDict:
        return {"loss_sum": self.total.item(), "count": self.count} if self.count else {}

    def load_state_dict(self, state: StateDict) -> None:
        self.total.fill_(float(state.get("loss_sum", 0.0)))
        self.count = int(state.get("count", 0))


@dataclass
class TrainState:
    """Everything that carries training progress; a checkpoint record is built from it (``record_of``) and
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
    guard: StepGuard = field(default_factory=StepGuard)  # non-finite steps and (when asked) spikes
    plans: dict[int, PiecePlan] = field(default_factory=dict)  # pieces in one pass, by count: their leaves, kept

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
        rank's own streams (dropout) are reseeded with seed + rank; with canonical pieces they stay alike on every
        rank (each piece seeds its own dropout: ``rng.piece_stream``). One sampler stream draws the global batch."""
        ranks = ranks or Ranks()
        training = config.training
        rng.seed_all(training.seed)
        model = Decoder(config).to(device)  # initialisation draws from the global generator
        if ranks.parallel and not training.micro_batches:
            rng.seed_all(training.seed + ranks.rank)
        impl = optimizer_impl(device)
        optimizer = build_optimizer(model, config, impl)
        sampler = sampler_for(config.data.sampling, num_blocks, batch_size or training.batch_size, training.seed)
        scaler = torch.amp.GradScaler(device.type) if training.precision == "fp16" else None
        objective = make_objective(model, device, training.precision, training.compile, ranks)
        guard = StepGuard.of(training)
        return cls(config, device, model, optimizer, sampler, scaler, impl, objective, ranks=ranks, guard=guard)

    @property
    def tokens_per_step(self) -> int:
        return self.sampler.batch_size * self.config.model.context_length

    @property
    def tokens(self) -> int:
        return self.step * self.tokens_per_step

    def load(
        self,
        *,
        model: StateDict,
        optimizer: StateDict,
        sampler: torch.Tensor,
        scaler: StateDict,
        step: int,
        elapsed_seconds: float,
        rng_state: StateDict | None,
        log_accumulator: StateDict | None = None,
        receipt: StateDict | None = None,
        guard: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Continue from saved progress (a checkpoint's parts); ``rng_state`` None: this process's streams stay;
        ``receipt`` None (a checkpoint written before receipts): the sampler's stays as it is."""
        self.model.load_state_dict(model)
        self.optimizer.load_state_dict(optimizer)
        self.sampler.load_state_dict(sampler)
        if receipt:
            self.sampler.receipt.load_state_dict(receipt)
        self.guard.load_state_dict(guard or {})
        if self.scaler is not None and scaler:
            self.scaler.load_state_dict(scaler)
        self.step = int(step)
        self.elapsed = float(elapsed_seconds)
        self.accumulator.load_state_dict(log_accumulator or {})
        if rng_state is not None:
            rng.restore(rng_state)  # last: after the model and optimizer are built, right before the first batch


def record_of(
    state: TrainState,
    *,
    experiment: str,
    kind: str,
    fingerprints: Fingerprints,
    metrics: RunRecord,
    rng_states: list[StateDict] | None = None,
    environment: Environment | None = None,
) -> Record:
    """The checkpoint record of a training state; ``rng_states``: every rank's random state, in rank order
    (default: this process's alone); ``environment``: what the process and machine that wrote it were
    (``canary.environment``; empty for a record that never reaches a file)."""
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
        environment=environment or Environment(),
        metrics=metrics,
        log_accumulator=state.accumulator.state_dict(),
        world_size=len(rng_states),
        receipt=state.sampler.receipt.state_dict(),
        guard=state.guard.state_dict(),
    )


def load_record(state: TrainState, record: Record, reseed: bool = False) -> None:
    """Continue ``state`` from a record's progress; rank r restores the record's random state r. With
    ``reseed`` (or a record without random states: rank 0's hand-over of a fresh start) the rank's own
    streams are not taken from the record: reseeded, or left as ``TrainState.fresh`` seeded them.

    With canonical pieces (``training.micro_batches``) the per-rank random states are irrelevant: nothing draws
    from them outside a piece, each piece seeds its own stream from (seed, step, piece), and every rank's entry is
    the same. Every rank restores entry 0, so a record of any world size continues at any other."""
    rank = 0 if state.ranks.fault == "rank0-rng" else state.ranks.rank  # the classic mistake, for tests only
    rank = 0 if state.config.training.micro_batches else rank
    state.load(
        model=record.model,
        optimizer=record.optimizer,
        sampler=record.sampler,
        scaler=record.scaler,
        step=record.step,
        elapsed_seconds=record.elapsed_seconds,
        rng_state=None if reseed or not record.rng else record.rng[rank],
        log_accumulator=record.log_accumulator,
        receipt=record.receipt,
        guard=record.guard,
    )
    if reseed:
        rng.seed_all(rng.stream_seed(state.config.training.seed, state.step, state.ranks.rank))
