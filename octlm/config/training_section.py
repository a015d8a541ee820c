"""The ``training`` section: how a run trains (steps, batch, schedule, precision, device, determinism tier, threads,
evaluation and guards), and the rules that tie its keys together."""

from __future__ import annotations

from dataclasses import dataclass

from octlm.config import schedules, tiers
from octlm.config.section_classes import (
    DETERMINISMS,
    DEVICES,
    EVAL_SELECTIONS,
    PRECISIONS,
    SPIKE_GUARDS,
    _doc,
    _Section,
)
from octlm.core.errors import ConfigError
from octlm.core.reporting import counted


@dataclass(frozen=True)
class TrainingConfig(_Section):
    KEY = "training"
    steps: int = _doc("optimizer steps in the run", 200, bound="positive", maximum=10**9)
    warmup_steps: int = _doc("linear warmup steps", 20, bound="non-negative")
    learning_rate: float = _doc("peak learning rate", 3e-4, bound="positive")
    min_learning_rate: float = _doc("floor of the decay", 3e-5, bound="non-negative")
    schedule: str = _doc(schedules.documentation(), "cosine", choices=tuple(schedules.SCHEDULES))
    decay_fraction: float = _doc("wsd: the share of training.steps at the end that decays", 0.2, bound="fraction")
    batch_size: int = _doc("blocks per step: the global batch of all ranks", 8, bound="positive", maximum=2**16)
    grad_accum_steps: int = _doc("micro-batches per step (slices of the batch)", 1, bound="positive", maximum=2**16)
    micro_batches: int = _doc(
        "canonical pieces (0 = off: each rank sums its own slice, as training.grad_accum_steps cuts it): K cuts every "
        "global batch into K fixed pieces of training.batch_size / K blocks, each with the bits it gets alone (its "
        "dropout seeded by seed, step and piece; without dropout, eager fp32 on the CPU, a rank runs its pieces in one "
        "pass) and summed in one fixed tree, so every --nproc x --nnodes that divides K, 1 "
        "included, trains the same bits and a checkpoint continues exactly at any of them (training.grad_accum_steps "
        "stays 1); the CPU matmuls run in MKL's strict reproducible mode (MKL_CBWR=AUTO,STRICT; vendor's AVX2,STRICT "
        "is strict already; portable's COMPATIBLE has none, so its thread count stays pinned; docs/performance.md); "
        "`octlm new` writes the largest power of two that divides the batch, up to 4",
        0,
        bound="non-negative",
        maximum=2**16,
    )
    weight_decay: float = _doc("AdamW decay on matrices only", 0.1, bound="non-negative")
    grad_clip: float = _doc("global gradient-norm limit (0 = no clipping)", 1.0, bound="non-negative")
    beta1: float = _doc("AdamW beta1", 0.9, bound="fraction")
    beta2: float = _doc("AdamW beta2", 0.95, bound="fraction")
    seed: int = _doc(
        "seed of model initialisation and of the batch sampler", 1337, bound="non-negative", maximum=2**63 - 1
    )
    precision: str = _doc("{choices} (autocast)", "fp32", choices=PRECISIONS)
    device: str = _doc("{choices}", "auto", choices=DEVICES)
    compile: bool = _doc("train through torch.compile (needs a C++ compiler on CPU, Triton on GPU)", False)
    determinism: str = _doc(tiers.documentation(), "local", choices=DETERMINISMS)
    threads: int = _doc(
        "CPU threads of a training process (0 = torch's default; under a tier other than local, the first start's)",
        0,
        bound="non-negative",
        maximum=4096,
    )
    eval_interval: int = _doc("evaluate and log every N steps (and at the end)", 20, bound="positive", maximum=10**9)
    log_interval: int = _doc(
        "log the training loss (averaged since the last log), learning rate and gradient norm every N steps",
        5,
        bound="positive",
        maximum=10**9,
    )
    eval_blocks: int = _doc(
        "validation blocks per evaluation, chosen by training.eval_selection (0 = the whole validation split); "
        "training.eval_tokens, when set, decides instead",
        16,
        bound="non-negative",
        maximum=2**20,
    )
    eval_tokens: int = _doc(
        "the evaluation's budget in target tokens: as many validation blocks as it takes, chosen by "
        "training.eval_selection (0 = training.eval_blocks decides; `octlm new` writes 8192)",
        0,
        bound="non-negative",
        maximum=2**34,
    )
    eval_selection: str = _doc(
        "{choices}: which validation blocks an evaluation reads when it reads fewer than all: first takes them in "
        "order from the start (a few documents); spread draws one at random in each of as many equal stretches of "
        "the split, seeded by the split's tokens (not training.seed), so experiments on the same data evaluate the "
        "same blocks and can be paired, and the errors' clusters (documents, else chunks of 8 blocks) are many "
        "(`octlm new` writes spread)",
        "first",
        choices=EVAL_SELECTIONS,
    )
    spike_guard: str = _doc(
        "{choices}: a training loss or gradient norm above training.spike_sigma standard deviations of the last "
        "training.spike_window steps stops the run (stop) or skips that step's update (skip); a non-finite loss "
        "or gradient norm always stops it",
        "off",
        choices=SPIKE_GUARDS,
    )
    spike_sigma: float = _doc("the spike guard's threshold, in standard deviations", 6.0, bound="positive")
    spike_window: int = _doc(
        "the steps the spike guard's mean and deviation are taken over (it acts once the window is full)",
        100,
        bound="positive",
        maximum=100_000,
    )
    tensorboard: bool = _doc(
        "write TensorBoard event files while training, to runs/tensorboard/<ID>/ in the home (`tensorboard --logdir "
        "runs/tensorboard`; `octlm export tensorboard` writes the same from the run file afterwards; needs the "
        "trackers extra): on a thread of its own, never part of the run: a failure of the writer warns once and "
        "the run goes on, its bits the same",
        False,
    )

    def check(self) -> None:
        if self.warmup_steps >= self.steps:
            self.fail("warmup_steps", f"must be below training.steps ({self.steps}), got {self.warmup_steps}")
        if self.batch_size % self.grad_accum_steps:
            self.fail(
                "grad_accum_steps",
                f"must divide training.batch_size ({self.batch_size}), got {self.grad_accum_steps}",
            )
        self._check_pieces()
        if self.min_learning_rate > self.learning_rate:
            self.fail(
                "min_learning_rate",
                f"must not exceed training.learning_rate ({self.learning_rate}), got {self.min_learning_rate}",
            )
        problem = schedules.SCHEDULES[self.schedule].problem(self)  # the rule the schedule's own keys keep together
        if problem:
            self.fail(*problem)
        if tiers.TIERS[self.determinism].pins_kernels and self.compile:
            message = (
                f"torch.compile generates code for this machine's instruction set, which {self.determinism} cannot pin"
            )
            self.fail("compile", f"{message}; set training.compile: false or training.determinism: local")

    def _check_pieces(self) -> None:
        """``micro_batches``: K pieces of equal size, which replace ``grad_accum_steps``."""
        pieces = self.micro_batches
        if pieces and self.batch_size % pieces:
            self.fail("micro_batches", f"must divide training.batch_size ({self.batch_size}), got {pieces}")
        if pieces and self.grad_accum_steps != 1:
            self.fail(
                "grad_accum_steps",
                f"must be 1 with training.micro_batches ({pieces}), whose pieces are the micro-batches of every "
                f"world size, got {self.grad_accum_steps}: set one of the two",
            )

    def world_sizes(self) -> list[int]:
        """The world sizes (ranks: --nproc x --nnodes) that train this config's canonical pieces: K's divisors."""
        return exact_world_sizes(self.micro_batches)

    def check_split(self, world_size: int, batch_size: int | None = None) -> None:
        """The global batch must cut into equal parts, one per rank and micro-batch; with canonical pieces, the
        world size must divide their number."""
        if self.micro_batches:
            self._check_world_size(world_size, batch_size or self.batch_size)
            return
        batch, parts, micro = batch_size or self.batch_size, world_size * self.grad_accum_steps, self.grad_accum_steps
        if batch % parts:
            ranks, micro_batches = counted(world_size, "rank"), counted(micro, "micro-batch", "micro-batches")
            message = f"{ranks} x {micro_batches} ({counted(parts, 'equal part')}): use a multiple of {parts}"
            raise ConfigError(f"training.batch_size {batch} does not divide into {message}, or another --nproc")

    def _check_world_size(self, world_size: int, batch: int) -> None:
        pieces = self.micro_batches
        if batch % pieces:
            raise ConfigError(f"training.micro_batches {pieces}: must divide the batch of {counted(batch, 'block')}")
        if pieces % world_size:
            raise ConfigError(
                f"training.micro_batches {pieces}: --nproc x --nnodes must divide it: {either(pieces)} "
                f"(not {world_size})"
            )


NEW_PIECES = 4  # `octlm new`: at most this many canonical pieces, so that a new experiment continues on 1, 2 or 4 ranks


def new_pieces(batch_size: int, grad_accum_steps: int = 1) -> int:
    """The canonical pieces ``octlm new`` gives an experiment whose preset, parent or ``--set`` does not decide: the
    largest power of two that divides its batch and is at most ``NEW_PIECES`` (so it continues exactly on 1, 2 or 4
    ranks, as far as the batch allows); none where ``training.grad_accum_steps`` cuts the batch its own way."""
    if grad_accum_steps != 1 or batch_size < 1:
        return 0
    pieces = NEW_PIECES
    while batch_size % pieces:
        pieces //= 2
    return pieces


def pieces_fit(pieces: int, batch_size: int, grad_accum_steps: int = 1) -> bool:
    """Whether ``pieces`` canonical pieces (0: none) cut this batch (``TrainingConfig._check_pieces``'s rule)."""
    return pieces == 0 or (batch_size % pieces == 0 and grad_accum_steps == 1)


def exact_world_sizes(pieces: int) -> list[int]:
    """The world sizes a run of ``pieces`` canonical pieces continues on exactly: their divisors (none: [])."""
    return [size for size in range(1, pieces + 1) if pieces % size == 0]


def moves_between(pieces: int) -> str:
    """What ``show`` and ``verify-resume`` say of the world sizes a run moves between: ``continues exactly on 1, 2 or
    4 ranks (training.micro_batches 4)``; without pieces, only on the one it trained on."""
    if not pieces:
        return "continues exactly only on the world size it trained on (no canonical pieces: training.micro_batches 0)"
    ranks = "rank" if pieces == 1 else "ranks"
    return f"continues exactly on {either(pieces)} {ranks} (training.micro_batches {pieces})"


def either(pieces: int) -> str:
    """The world sizes of ``pieces`` in words: ``1, 2 or 4``."""
    sizes = [str(size) for size in exact_world_sizes(pieces)]
    return sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} or {sizes[-1]}"
