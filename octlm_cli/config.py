"""Experiment configs: frozen, typed dataclasses, loaded from YAML and fully validated.

Every error names the file and the dotted key (``EXP-008.yaml: training.warmup_steps: ...``).
The fingerprint covers only the fields that determine the training trajectory; see
``BOOKKEEPING`` for the fields left out, so changing how often a run evaluates or
checkpoints never blocks a resume.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml

from .errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")


def _doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with its documentation in metadata (shown by ``octlm new --help``)."""
    return field(metadata={"doc": text, **kwargs.pop("meta", {})}, **kwargs)


@dataclass(frozen=True)
class DataConfig:
    sources: tuple[str, ...] = _doc(
        "builtin:docs, builtin:stdlib, or paths/globs of .txt, .md and .jsonl files",
        default=("builtin:docs",),
    )
    validation_fraction: float = _doc("share of documents held out for evaluation", default=0.1)
    max_bytes: int = _doc("cap on the corpus size in bytes (0 = no cap)", default=0)


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = _doc("byte-level BPE vocabulary size, special tokens included", default=1024)


@dataclass(frozen=True)
class ModelConfig:
    context_length: int = _doc("tokens per block (T)", default=128)
    d_model: int = _doc("width of the residual stream", default=128)
    n_layers: int = _doc("number of transformer blocks", default=4)
    n_heads: int = _doc("attention heads; must divide d_model", default=4)
    mlp_hidden: int = _doc("SwiGLU hidden width (0 = 8/3 * d_model rounded up to 32)", default=0)
    dropout: float = _doc("dropout probability", default=0.0)
    rope_base: float = _doc("rotary embedding base", default=10000.0)


@dataclass(frozen=True)
class TrainingConfig:
    steps: int = _doc("optimizer steps in the run", default=200)
    warmup_steps: int = _doc("linear warmup steps", default=20)
    learning_rate: float = _doc("peak learning rate", default=3e-4)
    min_learning_rate: float = _doc("floor of the cosine decay", default=3e-5)
    batch_size: int = _doc("blocks per step", default=8)
    weight_decay: float = _doc("AdamW decay on matrices only", default=0.1)
    grad_clip: float = _doc("global gradient-norm limit (0 = no clipping)", default=1.0)
    beta1: float = _doc("AdamW beta1", default=0.9)
    beta2: float = _doc("AdamW beta2", default=0.95)
    seed: int = _doc("seed of model initialisation and of the batch sampler", default=1337)
    precision: str = _doc("fp32, bf16 or fp16 (autocast)", default="fp32", meta={"choices": PRECISIONS})
    device: str = _doc("auto, cpu, cuda or mps", default="auto", meta={"choices": DEVICES})
    compile: bool = _doc("train through torch.compile (needs a C++ compiler on CPU, Triton on GPU)", default=False)
    eval_interval: int = _doc("evaluate and log every N steps (and at the end)", default=20)
    eval_blocks: int = _doc("validation blocks per evaluation (fixed, no randomness)", default=16)


@dataclass(frozen=True)
class CheckpointConfig:
    interval: int = _doc("write a checkpoint every N steps (and always at the last)", default=100)
    keep: int = _doc("newest checkpoints kept (the final one always is)", default=3)


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "tokenizer": TokenizerConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "checkpoint": CheckpointConfig,
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
    }
)

# Keys added after the first release, left out of the fingerprint while they hold these values,
# so that adding a key never changes the fingerprint of an existing experiment.
ADDED_LATER = {"training.compile": False}


@dataclass(frozen=True)
class Config:
    id: str = ""
    description: str = ""
    preset: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["data"]["sources"] = list(self.data.sources)
        return out

    def canonical_json(self) -> str:
        return canonical(self.to_dict())

    def trajectory_dict(self) -> dict[str, Any]:
        """The fingerprinted part: everything but ``BOOKKEEPING``."""
        return {k: v for k, v in flatten(self.to_dict()).items()
                if k not in BOOKKEEPING and not (k in ADDED_LATER and v == ADDED_LATER[k])}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(canonical(self.trajectory_dict()).encode()).hexdigest()

    @property
    def mlp_hidden(self) -> int:
        if self.model.mlp_hidden:
            return self.model.mlp_hidden
        return 32 * math.ceil(8 * self.model.d_model / 3 / 32)

    def replace(self, **sections: Any) -> "Config":
        return dataclasses.replace(self, **sections)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Field-by-field differences of two resolved config dicts: ``key: old -> new``."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            lines.append(f"{key}: {_show(a.get(key, '<absent>'))} -> {_show(b.get(key, '<absent>'))}")
    return lines


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# ---------------------------------------------------------------- loading and validation

_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _coerce(value: Any, kind: Any, where: str) -> Any:
    """Check ``value`` against a field type; return it normalised or raise naming ``where``."""
    if get_origin(kind) is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{where}: expected a non-empty list of strings, got {_kind(value)}")
        return tuple(_coerce(item, get_args(kind)[0], f"{where}[{i}]") for i, item in enumerate(value))
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {_kind(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_kind(value)}")
        return value
    if kind is float:
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 3e-4 as text; accept it as the number it is
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {_kind(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value}")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected text, got {_kind(value)}")
        return value
    raise TypeError(kind)  # pragma: no cover - a programming error, not user input


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"text ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _section(cls: type, raw: Any, where: str, origin: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: {where}: expected a mapping of keys, got {_kind(raw)}")
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(
                f"{origin}: {where}.{key}: unknown key; known keys of {where}: {', '.join(known)}"
            )
    values = {}
    for name, spec in known.items():
        if name not in raw:
            continue
        dotted = f"{where}.{name}"
        try:
            value = _coerce(raw[name], _field_type(cls, name), dotted)
        except ConfigError as error:
            raise ConfigError(f"{origin}: {error}") from None
        choices = spec.metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{origin}: {dotted}: must be one of {', '.join(choices)}, got {value!r}")
        values[name] = value
    return cls(**values)


def _field_type(cls: type, name: str) -> Any:
    hints = {"tuple[str, ...]": tuple[str, ...], "int": int, "float": float, "str": str, "bool": bool}
    annotation = next(f.type for f in fields(cls) if f.name == name)
    return hints[annotation] if isinstance(annotation, str) else annotation


def from_dict(raw: Any, origin: str = "<config>") -> Config:
    """Build and validate a Config from a parsed YAML mapping; ``origin`` names the file."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections at the top, got {_kind(raw)}")
    for key in raw:
        if key not in SECTIONS and key not in TOP_LEVEL:
            raise ConfigError(
                f"{origin}: {key}: unknown key; known keys: {', '.join((*TOP_LEVEL, *SECTIONS))}"
            )
    top = {}
    for key in TOP_LEVEL:
        if key in raw and raw[key] is not None:
            try:
                top[key] = _coerce(raw[key], str, key)
            except ConfigError as error:
                raise ConfigError(f"{origin}: {error}") from None
    if top.get("preset"):
        from .presets import PRESETS

        if top["preset"] not in PRESETS:
            raise ConfigError(f"{origin}: preset: unknown preset {top['preset']!r}; choose one of {', '.join(PRESETS)}")
    sections = {name: _section(cls, raw.get(name), name, origin) for name, cls in SECTIONS.items()}
    config = Config(**top, **sections)
    check(config, origin)
    return config


def check(config: Config, origin: str) -> None:
    """Impossible values, each named by file and dotted key."""

    def fail(key: str, message: str) -> None:
        raise ConfigError(f"{origin}: {key}: {message}")

    positive = {
        "tokenizer.vocab_size": config.tokenizer.vocab_size,
        "model.context_length": config.model.context_length,
        "model.d_model": config.model.d_model,
        "model.n_layers": config.model.n_layers,
        "model.n_heads": config.model.n_heads,
        "training.steps": config.training.steps,
        "training.batch_size": config.training.batch_size,
        "training.learning_rate": config.training.learning_rate,
        "training.eval_interval": config.training.eval_interval,
        "training.eval_blocks": config.training.eval_blocks,
        "checkpoint.interval": config.checkpoint.interval,
        "checkpoint.keep": config.checkpoint.keep,
        "model.rope_base": config.model.rope_base,
    }
    for key, value in positive.items():
        if value <= 0:
            fail(key, f"must be positive, got {value}")
    non_negative = {
        "data.max_bytes": config.data.max_bytes,
        "model.mlp_hidden": config.model.mlp_hidden,
        "training.warmup_steps": config.training.warmup_steps,
        "training.min_learning_rate": config.training.min_learning_rate,
        "training.weight_decay": config.training.weight_decay,
        "training.grad_clip": config.training.grad_clip,
        "training.seed": config.training.seed,
    }
    for key, value in non_negative.items():
        if value < 0:
            fail(key, f"must not be negative, got {value}")
    if not 0.0 <= config.data.validation_fraction < 1.0:
        fail("data.validation_fraction", f"must be at least 0 and below 1, got {config.data.validation_fraction}")
    if config.tokenizer.vocab_size < 260:
        fail("tokenizer.vocab_size", f"must be at least 260 (256 bytes + 3 special tokens + 1), got {config.tokenizer.vocab_size}")
    if config.model.d_model % config.model.n_heads:
        fail("model.n_heads", f"must divide model.d_model ({config.model.d_model}), got {config.model.n_heads}")
    if (config.model.d_model // config.model.n_heads) % 2:
        fail("model.n_heads", f"head size d_model/n_heads must be even for rotary embeddings, got {config.model.d_model // config.model.n_heads}")
    if not 0.0 <= config.model.dropout < 1.0:
        fail("model.dropout", f"must be at least 0 and below 1, got {config.model.dropout}")
    if config.training.warmup_steps >= config.training.steps:
        fail("training.warmup_steps", f"must be below training.steps ({config.training.steps}), got {config.training.warmup_steps}")
    if config.training.min_learning_rate > config.training.learning_rate:
        fail("training.min_learning_rate", f"must not exceed training.learning_rate ({config.training.learning_rate}), got {config.training.min_learning_rate}")
    for key in ("beta1", "beta2"):
        value = getattr(config.training, key)
        if not 0.0 <= value < 1.0:
            fail(f"training.{key}", f"must be at least 0 and below 1, got {value}")
    if config.training.seed >= 2**63:
        fail("training.seed", "must be below 2**63")


def parse_yaml(text: str, origin: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{origin}:{where}: malformed YAML: {problem}") from None


def load(path: Path) -> Config:
    """Load and validate an experiment config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot be read: {error}") from None
    raw = parse_yaml(text, path.name)
    return from_dict(resolve_preset(raw, path.name), path.name)


def resolve_preset(raw: Any, origin: str) -> Any:
    """A config may name ``preset:``; its keys fill in what the file leaves out."""
    if not isinstance(raw, dict) or not raw.get("preset"):
        return raw
    from .presets import preset

    name = raw["preset"]
    if not isinstance(name, str):
        raise ConfigError(f"{origin}: preset: expected text, got {_kind(name)}")
    base = preset(name, origin=f"{origin}: preset")
    return merge(base, raw)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[str], origin: str = "--set") -> dict[str, Any]:
    """Apply ``a.b=c`` overrides to a raw config mapping; values are parsed as YAML scalars."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{origin} {item!r}: expected KEY=VALUE, for example training.steps=400")
        parts = key.split(".")
        if len(parts) == 1 and parts[0] in TOP_LEVEL:
            out[parts[0]] = text
            continue
        if len(parts) != 2 or parts[0] not in SECTIONS:
            raise ConfigError(f"{origin} {key}: unknown key; use SECTION.KEY with a section of {', '.join(SECTIONS)}")
        section, name = parts
        if name not in {f.name for f in fields(SECTIONS[section])}:
            known = ", ".join(f.name for f in fields(SECTIONS[section]))
            raise ConfigError(f"{origin} {key}: unknown key; known keys of {section}: {known}")
        value = parse_yaml(text, f"{origin} {key}") if text.strip() else ""
        target = out.setdefault(section, {})
        if not isinstance(target, dict):
            target = out[section] = {}
        target[name] = value
    return out


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, sections in their usual order."""
    body = config.to_dict()
    ordered = {k: body[k] for k in TOP_LEVEL if body.get(k)}
    ordered.update({k: body[k] for k in SECTIONS})
    return yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)
