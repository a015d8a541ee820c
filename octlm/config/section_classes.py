"""The config's sections but training's (``training_section``): each a frozen dataclass that checks and normalises
its fields whenever it is built or replaced (``_Section``), with the choices and bounds its keys take and their help
text."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NoReturn

from octlm.config.tiers import TIERS
from octlm.config.validation import check_bound, check_choice, coerce, shown
from octlm.core.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")
DETERMINISMS = tuple(TIERS)  # the determinism tiers, one record each in tiers.py
SAMPLINGS = ("replacement", "epochs")
SPIKE_GUARDS = ("off", "stop", "skip")
# tokenizer.special_tokens: the roles, each with the spellings a brought tokenizer's token is found by, first found
# first (octlm's own first, GPT-2's <|endoftext|> last: it is both bos and eos there). data.tokenizer reads them.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "bos": ("<|bos|>", "<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>", "[BOS]", "<|endoftext|>"),
    "eos": ("<|eos|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]", "<|endoftext|>"),
    "pad": ("<|pad|>", "<pad>", "[PAD]", "<|padding|>"),
}
SPELLINGS = "; ".join(f"{role}: {', '.join(f'`{name}`' for name in names)}" for role, names in CANDIDATES.items())
EVAL_SELECTIONS = ("first", "spread")  # training.eval_selection: how data.blocks.TokenBlocks.choose chooses


def _doc(
    text: str,
    default: Any,
    *,
    choices: tuple[str, ...] = (),
    bound: str = "",
    maximum: int | None = None,
    empty: bool = False,
) -> Any:
    """A dataclass field with its help text, allowed values, range rule (see ``validation.BOUNDS``) and
    upper limit in metadata; ``{choices}`` in the text stands for the allowed values (shown by ``describe_keys``,
    which also names the limit). Every size has a limit: generous, but below where torch, the tokenizer
    library or an allocation would fail with something other than one clear line. ``empty``: a list that may be
    empty (``data.sources`` may not; ``tokenizer.special_tokens`` may)."""
    metadata = {"doc": text, "choices": choices, "bound": bound, "maximum": maximum, "empty": empty}
    return field(default=default, metadata=metadata)


def field_kinds(cls: type) -> dict[str, object]:
    """The resolved type of each field of a dataclass (annotations are text under ``__future__``), resolved once per
    class: every section built (a sweep builds thousands) reads them."""
    if cls not in _KINDS:
        _KINDS[cls] = typing.get_type_hints(cls)
    return _KINDS[cls]


_KINDS: dict[type, dict[str, object]] = {}


@dataclass(frozen=True)
class _Section:
    """A config section: checks and normalises its fields whenever it is built or replaced."""

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        kinds = field_kinds(type(self))
        for spec in fields(self):
            where, value = f"{self.KEY}.{spec.name}", getattr(self, spec.name)
            if not (spec.metadata["empty"] and isinstance(value, (list, tuple)) and not value):
                value = coerce(value, kinds[spec.name], where)
            else:
                value = ()
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
        "builtin:docs, builtin:stdlib, or paths, globs and folders of text and data files (their formats: octlm config "
        "keys, or the config reference)",
        ("builtin:docs",),
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
    text_field: str = _doc(
        "the field of a record that holds its text: a JSON Lines key, a Parquet or Arrow column", "text"
    )

    def check(self) -> None:
        if not self.text_field:
            self.fail("text_field", "must name a field (the default is text)")


@dataclass(frozen=True)
class TokenizerConfig(_Section):
    """Byte-level BPE trained on the corpus (``vocab_size``), or a tokenizer brought along (``file``), whose
    vocabulary is the file's: a config file that names one and leaves ``vocab_size`` out holds 0 there (what
    ``config.files`` writes), and ``vocab_size`` is then left out of the config's fingerprint, the file's hash (the
    tokenizer's fingerprint) fixing it. ``special_tokens`` is kept as ``ROLE=TOKEN`` texts in bos, eos, pad order,
    whether given so or as a mapping."""

    KEY = "tokenizer"
    vocab_size: int = _doc(
        "the model's vocabulary, special tokens included: byte-level BPE is trained to this size; with "
        "tokenizer.file, the file's: 0 (written where vocab_size is left out) or that number, another refused; "
        "then left out of the fingerprint, which the file's hash fixes",
        1024,
        bound="non-negative",
        maximum=2**20,
    )
    file: str = _doc(
        "a tokenizers JSON file (a tokenizer.json saved from GPT-2, SmolLM or your own tokenizers BPE) used instead "
        "of training byte-level BPE; relative to the home or OCTLM_DATA_ROOT, as data.sources are; its hash is the "
        "tokenizer's fingerprint",
        "",
    )
    special_tokens: tuple[str, ...] = _doc(
        "the file's bos, eos and pad tokens, as a mapping of role to token (`bos: <s>`) or ROLE=TOKEN texts; "
        f"a role left out is found by name ({SPELLINGS}); "
        "a file with no pad token gets `<|pad|>` added after its vocabulary",
        (),
        empty=True,
    )

    def __post_init__(self) -> None:
        given: Any = self.special_tokens  # YAML gives a mapping, a list or a text: the section makes it a tuple
        if isinstance(given, dict):  # {bos: <s>, ...}: kept as ROLE=TOKEN texts
            object.__setattr__(
                self, "special_tokens", [f"{r}={t}" if isinstance(t, str) else t for r, t in given.items()]
            )
        super().__post_init__()

    def check(self) -> None:
        if not self.file and self.vocab_size < 260:
            self.fail("vocab_size", f"must be at least 260 (256 bytes + 3 special tokens + 1), got {self.vocab_size}")
        if self.special_tokens and not self.file:
            self.fail("special_tokens", "names tokens of a tokenizer file: set tokenizer.file too")
        object.__setattr__(self, "special_tokens", tuple(f"{r}={t}" for r, t in self.named().items()))

    def named(self) -> dict[str, str]:
        """The tokens ``special_tokens`` names, by role, in bos, eos, pad order."""
        found: dict[str, str] = {}
        for entry in self.special_tokens:
            role, equals, token = entry.partition("=")
            if role not in CANDIDATES or not equals or not token:
                self.fail("special_tokens", f"{shown(entry, quote=True)}: expected ROLE=TOKEN, a role of bos, eos, pad")
            if role in found:
                self.fail("special_tokens", f"names {role} twice")
            found[role] = token
        return {role: found[role] for role in CANDIDATES if role in found}


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
