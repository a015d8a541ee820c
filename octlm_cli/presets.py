"""The presets ``day1`` ... ``day4`` as plain data, following the seed notebook.

Every preset keeps the learning-rate floor at 10% of the peak.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ConfigError

PRESETS: dict[str, dict[str, Any]] = {
    # The seed's Day 1: a ~1M-parameter model that trains on 2 CPU cores in about 15 seconds;
    # the experiment behind exact resume and overfitting one block (EXP-008).
    "day1": {
        "data": {"sources": ["builtin:docs"], "validation_fraction": 0.1, "max_bytes": 0},
        "tokenizer": {"vocab_size": 1024},
        "model": {"context_length": 128, "d_model": 128, "n_layers": 4, "n_heads": 4},
        "training": {
            "steps": 200, "warmup_steps": 20, "learning_rate": 3e-4, "min_learning_rate": 3e-5,
            "batch_size": 8, "weight_decay": 0.1, "grad_clip": 1.0, "precision": "fp32",
            "eval_interval": 20,
        },
        "checkpoint": {"interval": 100, "keep": 3},
    },
    # A ~12M-parameter model (the "about 10M") on the Python standard library (tens of MB of real text),
    # sized for a CPU box overnight. Compiled: ~10% faster per step for ~25 s of compilation per process
    # (a few seconds once Inductor's cache is warm), which a run of hours repays many times over.
    "day2": {
        "data": {"sources": ["builtin:stdlib"], "validation_fraction": 0.02, "max_bytes": 0},
        "tokenizer": {"vocab_size": 4096},
        "model": {"context_length": 256, "d_model": 384, "n_layers": 6, "n_heads": 6},
        "training": {
            "steps": 10000, "warmup_steps": 200, "learning_rate": 6e-4, "min_learning_rate": 6e-5,
            "batch_size": 16, "weight_decay": 0.1, "grad_clip": 1.0, "precision": "fp32",
            "compile": True, "eval_interval": 250,
        },
        "checkpoint": {"interval": 500, "keep": 3},
    },
    # Between the two: a ~3.7M-parameter model on the docs plus 8 MB of the standard library;
    # about half an hour on a CPU box. For trying an idea before committing a night to it. Compiled, as day2.
    "day3": {
        "data": {"sources": ["builtin:docs", "builtin:stdlib"], "validation_fraction": 0.05, "max_bytes": 8_000_000},
        "tokenizer": {"vocab_size": 2048},
        "model": {"context_length": 256, "d_model": 256, "n_layers": 4, "n_heads": 4},
        "training": {
            "steps": 2000, "warmup_steps": 100, "learning_rate": 5e-4, "min_learning_rate": 5e-5,
            "batch_size": 16, "weight_decay": 0.1, "grad_clip": 1.0, "precision": "fp32",
            "compile": True, "eval_interval": 100,
        },
        "checkpoint": {"interval": 250, "keep": 3},
    },
    # The seed's Day 4: 24,000 steps with 500 warmup and bf16 mixed precision, a GPU-sized
    # (~91M-parameter) model.
    "day4": {
        "data": {"sources": ["builtin:stdlib"], "validation_fraction": 0.02, "max_bytes": 0},
        "tokenizer": {"vocab_size": 8192},
        "model": {"context_length": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12},
        "training": {
            "steps": 24000, "warmup_steps": 500, "learning_rate": 6e-4, "min_learning_rate": 6e-5,
            "batch_size": 32, "weight_decay": 0.1, "grad_clip": 1.0, "precision": "bf16",
            "device": "auto", "eval_interval": 500,
        },
        "checkpoint": {"interval": 1000, "keep": 3},
    },
}

DESCRIPTIONS = {
    "day1": "~1M parameters, builtin:docs, 200 steps, fp32: the seed experiment, ~15 s on 2 cores",
    "day2": "~12M parameters, builtin:stdlib, 10,000 steps, fp32, compiled: a CPU box overnight",
    "day3": "~3.7M parameters, docs + 8 MB of stdlib, 2,000 steps, compiled: ~30 min on 2 cores",
    "day4": "~91M parameters, builtin:stdlib, 24,000 steps, bf16: a GPU run",
}


def preset(name: str, origin: str = "--preset") -> dict[str, Any]:
    """A deep copy of a preset's raw config mapping."""
    if name not in PRESETS:
        raise ConfigError(f"{origin}: unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[name]) | {"preset": name}
