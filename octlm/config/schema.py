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
from dataclasses import dataclass, field, fields
from typing import Any

from octlm.config.presets import PRESETS
from octlm.config.section_classes import (  # re-exported: the config's modules and its users import them from here
    DETERMINISMS as DETERMINISMS,
)
from octlm.config.section_classes import (
    DEVICES as DEVICES,
)
from octlm.config.section_classes import (
    PRECISIONS as PRECISIONS,
)
from octlm.config.section_classes import (
    SAMPLINGS as SAMPLINGS,
)
from octlm.config.section_classes import (
    SPIKE_GUARDS as SPIKE_GUARDS,
)
from octlm.config.section_classes import (
    CheckpointConfig as CheckpointConfig,
)
from octlm.config.section_classes import (
    DataConfig as DataConfig,
)
from octlm.config.section_classes import (
    InitConfig as InitConfig,
)
from octlm.config.section_classes import (
    ModelConfig as ModelConfig,
)
from octlm.config.section_classes import (
    TokenizerConfig as TokenizerConfig,
)
from octlm.config.section_classes import (
    _doc,
    _Section,
)
from octlm.config.section_classes import (
    field_kinds as field_kinds,
)
from octlm.config.training_section import TrainingConfig as TrainingConfig
from octlm.config.tree import canonical, flatten
from octlm.config.tree import diff as diff  # re-exported: config imports it from here
from octlm.config.validation import coerce, kind_of, shown
from octlm.core.errors import ConfigError
from octlm.core.records.freeform import ConfigTree

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
        "training.eval_selection",
        "training.tensorboard",
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
    "data.text_field": "text",
    "training.schedule": "cosine",
    "training.decay_fraction": 0.2,
    "training.spike_guard": "off",
    "training.spike_sigma": 6.0,
    "training.spike_window": 100,
    "init.step": 0,
    "training.micro_batches": 0,
    "tokenizer.file": "",
    "tokenizer.special_tokens": [],
}
# What ``octlm new`` writes into a new experiment's file where its preset (or parent) does not say: the defaults
# of experiments made now, where an absent key keeps what an experiment made before the key existed did. Beside them,
# ``training.micro_batches``, which depends on the batch: ``training_section.new_pieces`` (``store/experiments``).
NEW_DEFAULTS: dict[str, Any] = {
    "data.sampling": "epochs",
    "training.eval_tokens": 8192,
    "training.eval_selection": "spread",
}


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

    def to_dict(self) -> ConfigTree:
        """The config as nested dicts, a new one each call (what ``dataclasses.asdict`` gives, its lists as lists;
        written out by hand: a sweep of 1,000 trials asks it some 7,000 times, and ``asdict`` deep-copies)."""
        out: ConfigTree = _plain(self)
        out["data"]["sources"] = list(self.data.sources)
        out["tokenizer"]["special_tokens"] = list(self.tokenizer.special_tokens)
        return out

    def canonical_json(self) -> str:
        return self._canonical

    @functools.cached_property
    def _canonical(self) -> str:  # a config never changes once built (``replace`` builds another): computed once
        return canonical(self.to_dict())

    def trajectory_dict(self) -> ConfigTree:
        """The fingerprinted part: everything but ``BOOKKEEPING``, and ``tokenizer.vocab_size`` when a tokenizer file
        is brought (``tokenizer.file``): the file's hash, the tokenizer's fingerprint, fixes it, and the config names
        it as 0 (the file's) where the run's checkpoints hold the number."""
        brought = {"tokenizer.vocab_size"} if self.tokenizer.file else set()
        return {
            k: v
            for k, v in flatten(self.to_dict()).items()
            if k not in BOOKKEEPING and k not in brought and not (k in ADDED_LATER and v == ADDED_LATER[k])
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

    def with_keys(self, values: ConfigTree, origin: str = "--set") -> Config:
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


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` for the config's shapes: dataclasses, tuples, lists and dicts of immutable scalars."""
    if type(value) in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _names(type(value))}
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))
