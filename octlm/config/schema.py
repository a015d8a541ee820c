"""The config dataclasses, valid by construction, and the fingerprint.

Every section checks and normalises its fields in ``__post_init__``, so building one, or changing one
with ``dataclasses.replace``, ``Config.replace`` or ``Config.with_keys``, either gives a valid config or
raises a one-line ``ConfigError`` naming the dotted key. Import these names from ``octlm.config``,
which adds loading from YAML, overrides and key descriptions on top.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import typing
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NoReturn

from octlm.config.presets import PRESETS
from octlm.config.tiers import TIERS
from octlm.config.tree import canonical, flatten
from octlm.config.tree import diff as diff  # re-exported: config imports it from here
from octlm.config.validation import check_bound, check_choice, coerce, kind_of, shown
from octlm.core.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")
DETERMINISMS = tuple(TIERS)  # the determinism tiers, one record each in tiers.py
SAMPLINGS = ("replacement", "epochs")
SCHEDULES = ("cosine", "wsd", "constant", "linear")
SPIKE_GUARDS = ("off", "stop", "skip")


def _doc(text: str, default: Any, *, choices: tuple[str, ...] = (), bound: str = "", maximum: int | None = None) -> Any:
    """A dataclass field with its help text, allowed values, range rule (see ``validation.BOUNDS``) and
    upper limit in metadata; ``{choices}`` in the text stands for the allowed values (shown by ``describe_keys``,
    which also names the limit). Every size has a limit: generous, but below where torch, the tokenizer
    library or an allocation would fail with something other than one clear line."""
    return field(default=default, metadata={"doc": text, "choices": choices, "bound": bound, "maximum": maximum})


def field_kinds(cls: type) -> dict[str, Any]:
    """The resolved type of each field of a dataclass (annotations are text under ``__future__``), resolved once per
    class: every section built (a sweep builds thousands) reads them."""
    if cls not in _KINDS:
        _KINDS[cls] = typing.get_type_hints(cls)
    return _KINDS[cls]


_KINDS: dict[type, dict[str, Any]] = {}


@dataclass(frozen=True)
class _Section:
    """A config section: checks and normalises its fields whenever it is built or replaced."""

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        kinds = field_kinds(type(self))
        for spec in fields(self):
            where = f"{self.KEY}.{spec.name}"
            value = coerce(getattr(self, spec.name), kinds[spec.name], where)
            check_choice(value, spec.metadata["choices"], where)
            check_bound(value, spec.metadata["bound"], where, spec.metadata["maximum"])
            object.__setattr__(self, spec.name, value)  # the normalised value (a tuple, a float)
        self.check()

    def check(self) -> None:
        """Rules that tie fields of the section together; each section with such rules overrides it."""

    def fail(self, name: str, message: str) -> NoReturn:
        raise ConfigError(f"{self.KEY}.{name}: {message}")


@dataclass(frozen=True)
class DataConfig(_Section):
    KEY = "data"
    sources: tuple[str, ...] = _doc(
        "builtin:docs, builtin:stdlib, or paths/globs of .txt, .md and .jsonl files", ("builtin:docs",)
    )
    validation_fraction: float = _doc("share of documents held out for evaluation", 0.1, bound="fraction")
    max_bytes: int = _doc("cap on the corpus size in bytes (0 = no cap)", 0, bound="non-negative", maximum=2**40)
    sampling: str = _doc(
        "{choices}: replacement draws each batch's blocks at random with replacement (the seed notebook's draw); "
        "epochs takes every training block once per epoch, in a seeded order of its own per epoch, batches running "
        "on into the next epoch's order (`octlm new` writes epochs)",
        "replacement",
        choices=SAMPLINGS,
    )


@dataclass(frozen=True)
class TokenizerConfig(_Section):
    KEY = "tokenizer"
    vocab_size: int = _doc(
        "byte-level BPE vocabulary size, special tokens included", 1024, bound="positive", maximum=2**20
    )

    def check(self) -> None:
        if self.vocab_size < 260:
            self.fail("vocab_size", f"must be at least 260 (256 bytes + 3 special tokens + 1), got {self.vocab_size}")


@dataclass(frozen=True)
class ModelConfig(_Section):
    KEY = "model"
    context_length: int = _doc("tokens per block (T)", 128, bound="positive", maximum=2**16)
    d_model: int = _doc("width of the residual stream", 128, bound="positive", maximum=2**16)
    n_layers: int = _doc("number of transformer blocks", 4, bound="positive", maximum=1024)
    n_heads: int = _doc("attention heads; must divide d_model", 4, bound="positive", maximum=1024)
    mlp_hidden: int = _doc(
        "SwiGLU hidden width (0 = 8/3 * d_model rounded up to 32)", 0, bound="non-negative", maximum=2**18
    )
    dropout: float = _doc("dropout probability", 0.0, bound="fraction")
    rope_base: float = _doc("rotary embedding base", 10000.0, bound="positive")

    def check(self) -> None:
        if self.d_model % self.n_heads:
            self.fail("n_heads", f"must divide model.d_model ({self.d_model}), got {self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            head = self.d_model // self.n_heads
            self.fail("n_heads", f"head size d_model/n_heads must be even for rotary embeddings, got {head}")


@dataclass(frozen=True)
class TrainingConfig(_Section):
    KEY = "training"
    steps: int = _doc("optimizer steps in the run", 200, bound="positive", maximum=10**9)
    warmup_steps: int = _doc("linear warmup steps", 20, bound="non-negative")
    learning_rate: float = _doc("peak learning rate", 3e-4, bound="positive")
    min_learning_rate: float = _doc("floor of the decay", 3e-5, bound="non-negative")
    schedule: str = _doc(
        "{choices}: after the linear warmup, cosine decays to the floor over the rest of the run (the seed's); "
        "wsd stays at the peak, then decays linearly to the floor over the last training.decay_fraction of the "
        "steps, so a run given more steps in its stable phase continues exactly; constant stays at the peak; "
        "linear decays linearly to the floor",
        "cosine",
        choices=SCHEDULES,
    )
    decay_fraction: float = _doc("wsd: the share of training.steps at the end that decays", 0.2, bound="fraction")
    batch_size: int = _doc("blocks per step: the global batch of all ranks", 8, bound="positive", maximum=2**16)
    grad_accum_steps: int = _doc("micro-batches per step (slices of the batch)", 1, bound="positive", maximum=2**16)
    micro_batches: int = _doc(
        "canonical pieces (0 = off: each rank sums its own slice, as training.grad_accum_steps cuts it): K cuts every "
        "global batch into K fixed pieces of training.batch_size / K blocks, each computed alone (its dropout seeded "
        "by seed, step and piece) and summed in one fixed tree, so every --nproc x --nnodes that divides K, 1 "
        "included, trains the same bits and a checkpoint continues exactly at any of them (training.grad_accum_steps "
        "stays 1); the CPU matmuls run in MKL's strict reproducible mode (MKL_CBWR=AUTO,STRICT; vendor's AVX2,STRICT "
        "is strict already; portable's COMPATIBLE has none, so its thread count stays pinned; docs/performance.md)",
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
    determinism: str = _doc(
        "{choices}: local is exact on this machine; vendor and portable pin the CPU kernels (MKL, ATen, "
        "oneDNN) so that machines whose `octlm canary` digests agree continue each other's runs bit for bit: "
        "vendor across one vendor's x86-64 processors, portable across Intel and AMD (2-3x slower)",
        "local",
        choices=DETERMINISMS,
    )
    threads: int = _doc(
        "CPU threads of a training process (0 = torch's default; under vendor or portable, the first start's)",
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
        "validation blocks per evaluation, the first ones in order (0 = the whole validation split); "
        "training.eval_tokens, when set, decides instead",
        16,
        bound="non-negative",
        maximum=2**20,
    )
    eval_tokens: int = _doc(
        "the evaluation's budget in target tokens: as many validation blocks from the start as it takes "
        "(0 = training.eval_blocks decides; `octlm new` writes 8192)",
        0,
        bound="non-negative",
        maximum=2**34,
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
        decay_start = self.steps - round(self.decay_fraction * self.steps)
        if self.schedule == "wsd" and (self.decay_fraction == 0 or decay_start < self.warmup_steps):
            self.fail(
                "decay_fraction",
                f"wsd decays over the last {self.decay_fraction} of {self.steps} steps, which must be above 0 and "
                f"begin after the {self.warmup_steps} warmup steps",
            )
        if TIERS[self.determinism].pins_kernels and self.compile:
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
        return [size for size in range(1, self.micro_batches + 1) if self.micro_batches % size == 0]

    def check_split(self, world_size: int, batch_size: int | None = None) -> None:
        """The global batch must cut into equal parts, one per rank and micro-batch; with canonical pieces, the
        world size must divide their number."""
        if self.micro_batches:
            self._check_world_size(world_size, batch_size or self.batch_size)
            return
        batch, parts, micro = batch_size or self.batch_size, world_size * self.grad_accum_steps, self.grad_accum_steps
        if batch % parts:
            message = f"{world_size} ranks x {micro} micro-batches ({parts} equal parts): use a multiple of {parts}"
            raise ConfigError(f"training.batch_size {batch} does not divide into {message}, or another --nproc")

    def _check_world_size(self, world_size: int, batch: int) -> None:
        pieces = self.micro_batches
        if batch % pieces:
            raise ConfigError(f"training.micro_batches {pieces}: must divide the batch of {batch} blocks")
        if pieces % world_size:
            sizes = [str(size) for size in self.world_sizes()]
            named = sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} or {sizes[-1]}"
            raise ConfigError(
                f"training.micro_batches {pieces}: --nproc x --nnodes must divide it: {named} (not {world_size})"
            )


@dataclass(frozen=True)
class CheckpointConfig(_Section):
    KEY = "checkpoint"
    interval: int = _doc(
        "write a checkpoint every N steps (and always at the last)", 100, bound="positive", maximum=10**9
    )
    keep: int = _doc("newest checkpoints kept (the final one always is)", 3, bound="positive", maximum=10**6)


@dataclass(frozen=True)
class InitConfig(_Section):
    """Where step 0 comes from when an experiment is forked from another's checkpoint (``new --init-from``)."""

    KEY = "init"
    parent: str = _doc("the checkpoint forked from, as ID@STEP (empty: a fresh initialisation)", "")
    checkpoint: str = _doc("that checkpoint's path, relative to the home", "")
    sha256: str = _doc("that checkpoint's sha256: its weights are step 0's", "")
    optimizer: bool = _doc("also start from its optimizer and sampler state", False)
    step: int = _doc(
        "continue the parent's run at this step (its step, optimizer, sampler, random states and run file; "
        "written by `octlm new --init-from ID@STEP --with-optimizer`); 0: start at step 0 with its weights",
        0,
        bound="non-negative",
        maximum=10**9,
    )

    def check(self) -> None:
        if self.checkpoint.startswith("/") or ".." in self.checkpoint.split("/"):
            self.fail("checkpoint", "must be a path inside the home, relative to it")
        if self.parent and not self.checkpoint:
            self.fail("parent", "needs init.checkpoint and init.sha256 (write them with `octlm new --init-from`)")
        if bool(self.checkpoint) != bool(self.sha256):
            self.fail("sha256" if self.checkpoint else "checkpoint", "init.checkpoint and init.sha256 go together")
        if self.sha256 and (len(self.sha256) != 64 or set(self.sha256) - set("0123456789abcdef")):
            self.fail("sha256", "must be 64 lowercase hexadecimal digits")
        if self.optimizer and not self.sha256:
            self.fail("optimizer", "needs init.checkpoint and init.sha256")
        if self.step and not self.optimizer:
            self.fail("step", "continuing the parent's run needs init.optimizer: true (its optimizer and sampler)")


SECTIONS: dict[str, type[_Section]] = {
    "data": DataConfig,
    "tokenizer": TokenizerConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "checkpoint": CheckpointConfig,
    "init": InitConfig,
}
TOP_LEVEL = ("id", "description", "preset")

# Fields that do not change what the model learns: left out of the fingerprint.
BOOKKEEPING = frozenset(
    {
        "id",
        "description",
        "preset",
        "training.eval_interval",
        "training.eval_blocks",
        "training.device",
        "checkpoint.interval",
        "checkpoint.keep",
        "training.log_interval",
        "init.parent",
        "init.checkpoint",
        "training.threads",
        "training.eval_tokens",
    }
)

# Keys added after the first release, left out of the fingerprint while they hold these values,
# so that adding a key never changes the fingerprint of an existing experiment.
ADDED_LATER: dict[str, Any] = {
    "training.compile": False,
    "training.grad_accum_steps": 1,
    "init.sha256": "",
    "init.optimizer": False,
    "training.determinism": "local",
    "data.sampling": "replacement",
    "training.schedule": "cosine",
    "training.decay_fraction": 0.2,
    "training.spike_guard": "off",
    "training.spike_sigma": 6.0,
    "training.spike_window": 100,
    "init.step": 0,
    "training.micro_batches": 0,
}
# What ``octlm new`` writes into a new experiment's file where its preset (or parent) does not say: the defaults
# of experiments made now, where an absent key keeps what an experiment made before the key existed did.
NEW_DEFAULTS: dict[str, Any] = {"data.sampling": "epochs", "training.eval_tokens": 8192}


@dataclass(frozen=True)
class Config:
    id: str = _doc("experiment ID (EXP-008, BOX-001, ...), the same as the file's name", "")
    description: str = _doc("one line on what the experiment is for", "")
    preset: str = _doc("{choices}: the preset whose keys fill in what the file leaves out", "", choices=tuple(PRESETS))
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    init: InitConfig = field(default_factory=InitConfig)

    def __post_init__(self) -> None:
        for key in TOP_LEVEL:
            coerce(getattr(self, key), str, key)
        if self.preset and self.preset not in PRESETS:
            raise ConfigError(
                f"preset: unknown preset {shown(self.preset, quote=True)}; choose one of {', '.join(PRESETS)}"
            )
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name}: expected a {cls.__name__}, got {kind_of(getattr(self, name))}")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["data"]["sources"] = list(self.data.sources)
        return out

    def canonical_json(self) -> str:
        return self._canonical

    @functools.cached_property
    def _canonical(self) -> str:  # a config never changes once built (``replace`` builds another): computed once
        return canonical(self.to_dict())

    def trajectory_dict(self) -> dict[str, Any]:
        """The fingerprinted part: everything but ``BOOKKEEPING``."""
        return {
            k: v
            for k, v in flatten(self.to_dict()).items()
            if k not in BOOKKEEPING and not (k in ADDED_LATER and v == ADDED_LATER[k])
        }

    @functools.cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(canonical(self.trajectory_dict()).encode()).hexdigest()

    def fingerprint_at(self, world_size: int) -> str:
        """The fingerprint of a run on ``world_size`` ranks: ``fingerprint`` on one, else with the world size
        (data parallelism changes the order of floating-point sums, so it is part of the trajectory), except with
        canonical pieces (``training.micro_batches``), whose sums are the same at every world size."""
        if world_size == 1 or self.training.micro_batches:
            return self.fingerprint
        trajectory = {**self.trajectory_dict(), "distributed.world_size": world_size}
        return hashlib.sha256(canonical(trajectory).encode()).hexdigest()

    @property
    def mlp_hidden(self) -> int:
        if self.model.mlp_hidden:
            return self.model.mlp_hidden
        return 32 * math.ceil(8 * self.model.d_model / 3 / 32)

    def replace(self, **changes: Any) -> Config:
        """A validated copy with top-level fields or whole sections changed."""
        return dataclasses.replace(self, **changes)

    def with_keys(self, values: dict[str, Any], origin: str = "--set") -> Config:
        """A validated copy with dotted keys changed, as ``--set`` would change them (values already typed):
        ``config.with_keys({"training.steps": 300, "training.warmup_steps": 30})``."""
        top: dict[str, Any] = {}
        changes: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            section, name = split_key(key, origin)
            if section is None:
                top[name] = value
            else:
                changes.setdefault(section, {})[name] = value
        try:
            sections = {section: dataclasses.replace(getattr(self, section), **c) for section, c in changes.items()}
            return dataclasses.replace(self, **top, **sections)
        except ConfigError as error:
            raise ConfigError(f"{origin}: {error}") from None


def split_key(key: str, origin: str) -> tuple[str | None, str]:
    """``training.steps`` -> ``("training", "steps")``, ``id`` -> ``(None, "id")``; unknown keys raise."""
    parts = key.split(".")
    if len(parts) == 1 and parts[0] in TOP_LEVEL:
        return None, parts[0]
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ConfigError(
            f"{origin} {shown(key)}: unknown key; use SECTION.KEY with a section of {', '.join(SECTIONS)}"
        )
    section, name = parts
    known = [f.name for f in fields(SECTIONS[section])]
    if name not in known:
        raise ConfigError(f"{origin} {shown(key)}: unknown key; known keys of {section}: {', '.join(known)}")
    return section, name
