"""The experiment config: typed, frozen dataclasses, valid by construction, loaded from YAML (torch-free).

Owns what an experiment's YAML may say and what it means: the config and its fingerprint (``schema``), its sections
and their keys (``section_classes``, ``training_section``), the determinism tiers (``tiers``), the learning-rate
schedules, pure arithmetic of the step (``schedules``), how a raw value becomes a typed one with a one-line error
naming the key (``validation``), the presets (``presets``), canonical JSON, dotted keys and diffs (``tree``), and
reading files, ``--set`` overrides and key descriptions (``files``). Everything above imports the config from here:
``from octlm.config import Config, load``.
May import: ``core``.
"""

from octlm.config.files import (
    apply_overrides,
    describe_keys,
    from_dict,
    load,
    merge,
    parse_yaml,
    resolve_preset,
    to_yaml,
)
from octlm.config.schema import (
    ADDED_LATER,
    BOOKKEEPING,
    DEVICES,
    NEW_DEFAULTS,
    PRECISIONS,
    SECTIONS,
    TOP_LEVEL,
    CheckpointConfig,
    Config,
    DataConfig,
    InitConfig,
    ModelConfig,
    TokenizerConfig,
    TrainingConfig,
)
from octlm.config.training_section import (
    exact_world_sizes,
    moves_between,
    new_pieces,
    pieces_fit,
)
from octlm.config.tree import (
    canonical,
    diff,
    flatten,
)

__all__ = [
    "ADDED_LATER",
    "BOOKKEEPING",
    "NEW_DEFAULTS",
    "DEVICES",
    "PRECISIONS",
    "SECTIONS",
    "TOP_LEVEL",
    "CheckpointConfig",
    "Config",
    "DataConfig",
    "InitConfig",
    "ModelConfig",
    "TokenizerConfig",
    "TrainingConfig",
    "apply_overrides",
    "canonical",
    "describe_keys",
    "diff",
    "exact_world_sizes",
    "flatten",
    "from_dict",
    "load",
    "merge",
    "moves_between",
    "new_pieces",
    "parse_yaml",
    "pieces_fit",
    "resolve_preset",
    "to_yaml",
]
