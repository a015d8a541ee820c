"""The presets ``day1`` ... ``day4`` as plain data, following the seed notebook.

Every preset keeps the learning-rate floor at 10% of the peak.
"""

from __future__ import annotations

import copy
from typing import Any

from octlm.config.validation import shown
from octlm.core.errors import ConfigError
from octlm.core.records.freeform import ConfigTree

# One row per preset. day1: the seed's Day 1, the experiment behind exact resume and overfitting one block
# (EXP-008), ~15 s on 2 cores. day2: a real small model on the standard library for a CPU box overnight,
# compiled (~10% faster per step for ~25 s of compilation per process, which hours of training repay).
# day3: between the two, ~30 min on a CPU box, for trying an idea before a night. day4: the seed's Day 4,
# a GPU-sized model in bf16. Every preset keeps the floor at 10% of the peak, decay 0.1, clipping at 1.0
# and the newest 3 checkpoints.
_ROWS: tuple[tuple[Any, ...], ...] = (
    # name, sources, validation, max_bytes, vocab, (T, d, layers, heads), steps, warmup, peak, batch, eval, checkpoint
    ("day1", ["builtin:docs"], 0.1, 0, 1024, (128, 128, 4, 4), 200, 20, 3e-4, 8, 20, 100),
    ("day2", ["builtin:stdlib"], 0.02, 0, 4096, (256, 384, 6, 6), 10000, 200, 6e-4, 16, 250, 500),
    ("day3", ["builtin:docs", "builtin:stdlib"], 0.05, 8000000, 2048, (256, 256, 4, 4), 2000, 100, 5e-4, 16, 100, 250),
    ("day4", ["builtin:stdlib"], 0.02, 0, 8192, (1024, 768, 12, 12), 24000, 500, 6e-4, 32, 500, 1000),
)
_EXTRA: dict[str, dict[str, Any]] = {
    "day2": {"compile": True},
    "day3": {"compile": True},
    "day4": {"precision": "bf16", "device": "auto"},
}


def _preset(row: tuple[Any, ...]) -> dict[str, Any]:
    name, sources, validation, max_bytes, vocab, shape, steps, warmup, peak, batch, evals, every = row
    context, d_model, layers, heads = shape
    training = {
        "steps": steps,
        "warmup_steps": warmup,
        "learning_rate": peak,
        "min_learning_rate": round(peak / 10, 12),
        "batch_size": batch,
        "weight_decay": 0.1,
        "grad_clip": 1.0,
        "precision": "fp32",
        "eval_interval": evals,
    }
    return {
        "data": {"sources": sources, "validation_fraction": validation, "max_bytes": max_bytes},
        "tokenizer": {"vocab_size": vocab},
        "model": {"context_length": context, "d_model": d_model, "n_layers": layers, "n_heads": heads},
        "training": training | _EXTRA.get(name, {}),
        "checkpoint": {"interval": every, "keep": 3},
    }


PRESETS: dict[str, dict[str, Any]] = {row[0]: _preset(row) for row in _ROWS}

DESCRIPTIONS = {
    "day1": "~1M parameters, builtin:docs, 200 steps, fp32: the seed experiment, ~15 s on 2 cores",
    "day2": "~12M parameters, builtin:stdlib, 10,000 steps, fp32, compiled: a CPU box overnight",
    "day3": "~3.7M parameters, docs + 8 MB of stdlib, 2,000 steps, compiled: ~30 min on 2 cores",
    "day4": "~91M parameters, builtin:stdlib, 24,000 steps, bf16: a GPU run",
}


def preset(name: str, origin: str = "--preset") -> ConfigTree:
    """A deep copy of a preset's raw config mapping."""
    if name not in PRESETS:
        raise ConfigError(f"{origin}: unknown preset {shown(name, quote=True)}; choose one of {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[name]) | {"preset": name}
