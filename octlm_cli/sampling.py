"""``octlm sample``: text from an experiment's newest (or chosen) checkpoint.

Generation draws from its own seeded generator, never from the training streams.
"""

from __future__ import annotations

from typing import Any

import torch

from . import experiments, generate, runtime
from .artifacts import ExperimentFiles
from .checkpoint import Loaded
from .config import from_dict
from .errors import BadInput, Refused
from .home import Home
from .model import Decoder
from .registry import Registry
from .tokenizer import Tokenizer


def _check_options(max_new_tokens: int, temperature: float, top_k: int | None) -> None:
    if max_new_tokens <= 0:
        raise BadInput(f"--max-new-tokens {max_new_tokens}: must be positive")
    if temperature < 0:
        raise BadInput(f"--temperature {temperature}: must not be negative (0 means greedy)")
    if top_k is not None and top_k <= 0:
        raise BadInput(f"--top-k {top_k}: must be positive")


def _load(home: Home, experiment_id: str, step: int | None) -> tuple[Loaded, Decoder, Tokenizer, torch.device]:
    """The checkpoint to sample from, its model on the configured device, and its tokenizer."""
    experiments.load(home, experiment_id)  # a clear error for an unknown experiment
    files = ExperimentFiles(home, experiment_id)
    with Registry(home.registry, create=False) as registry:
        loaded = files.newest_valid(registry, step)
    if loaded is None:
        raise Refused(
            f"{experiment_id} has no checkpoint to sample from: train it first with `octlm train {experiment_id}`"
        )
    tokenizer = Tokenizer.load(files.tokenizer)
    if tokenizer.fingerprint != loaded.record.fingerprints.tokenizer:
        raise Refused(f"{files.tokenizer} is not the tokenizer {loaded.path.name} was trained with")
    config = from_dict(loaded.record.config, loaded.path.name)
    device = runtime.select_device(config.training.device)
    model = Decoder(config)
    model.load_state_dict(loaded.record.model)
    return loaded, model.to(device), tokenizer, device


def sample(
    home: Home,
    experiment_id: str,
    *,
    prompt: str = "",
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    step: int | None = None,
) -> dict[str, Any]:
    _check_options(max_new_tokens, temperature, top_k)
    loaded, model, tokenizer, device = _load(home, experiment_id, step)
    context = [tokenizer.bos_id, *tokenizer.encode(prompt, add_special_tokens=False)]
    if temperature == 0:
        produced = generate.greedy(model, context, max_new_tokens, device, stop_id=tokenizer.eos_id)
    else:
        produced = generate.sample(
            model,
            context,
            max_new_tokens,
            device,
            temperature=temperature,
            top_k=top_k,
            seed=seed,
            stop_id=tokenizer.eos_id,
        )
    return {
        "id": experiment_id,
        "step": loaded.record.step,
        "checkpoint": str(loaded.path),
        "prompt": prompt,
        "text": tokenizer.decode(produced[1:]),
        "tokens": len(produced) - len(context),
        "seed": seed,
    }
