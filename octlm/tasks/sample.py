"""``octlm sample``: text from an experiment's newest (or chosen) checkpoint.

Generation draws from its own seeded generator, never from the training streams. The checkpoint is
checked like one to resume from (its experiment, its track, its config fingerprint against the
experiment's YAML as it is now, the tokenizer) before anything is generated, and falling back past
an invalid newer checkpoint is said, never silent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import torch

from octlm.config import from_dict
from octlm.core.errors import BadInput, Refused
from octlm.core.home import Home
from octlm.data.fingerprints import Fingerprints
from octlm.data.tokenizer import Tokenizer
from octlm.run.files import ExperimentFiles
from octlm.run.runner import check_owner
from octlm.runtime import machine as runtime
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.train import checkpoint, generate
from octlm.train.checkpoint import Loaded
from octlm.train.model.decoder import Decoder


def _check_options(max_new_tokens: int, temperature: float, top_k: int | None) -> None:
    if max_new_tokens <= 0:
        raise BadInput(f"--max-new-tokens {max_new_tokens}: must be positive")
    if temperature < 0:
        raise BadInput(f"--temperature {temperature}: must not be negative (0 means greedy)")
    if top_k is not None and top_k <= 0:
        raise BadInput(f"--top-k {top_k}: must be positive")


def load_model(
    home: Home, experiment_id: str, step: int | None, warn: Callable[[str], None]
) -> tuple[Loaded, Decoder, Tokenizer, torch.device]:
    """The newest valid checkpoint (or ``step``'s) after ``resume``'s owner checks, its model on the configured
    device, and its tokenizer: what ``sample`` and ``export`` start from."""
    current = experiments.load(home, experiment_id)  # also a clear error for an unknown experiment
    files = ExperimentFiles(home, experiment_id)
    with Registry(home.registry, create=False) as registry:
        loaded, former = files.newest_valid(registry, step), registry.former_ids(experiment_id)
    if loaded is None:
        raise Refused(f"{experiment_id} has no checkpoint: train it first with `octlm train {experiment_id}`")
    for reason in loaded.skipped:
        warn(f"skipped an invalid checkpoint: {reason}; using the older {loaded.path.name}")
    check_owner(loaded, experiment_id, former=former)
    tokenizer = Tokenizer.load(files.tokenizer, current.tokenizer.named())
    # The data is not read to sample: the dataset hash is the checkpoint's own.
    now = Fingerprints(
        current.fingerprint_at(loaded.record.world_size), loaded.record.fingerprints.data, tokenizer.fingerprint
    )
    checkpoint.check_fingerprints(loaded.record, config=current, current=now, path=loaded.path)
    config = from_dict(loaded.record.config, loaded.path.name)
    device = runtime.select_device(config.training.device)
    model = Decoder(config)
    checkpoint.load_weights(model, loaded.record, loaded.path)
    return loaded, model.to(device), tokenizer, device


class Sampled(TypedDict):
    """What ``octlm sample --json`` writes."""

    id: str
    step: int  # the checkpoint's
    checkpoint: str
    prompt: str
    completion: str
    text: str  # prompt + completion
    tokens: int  # generated
    held_back: int  # tokens at the end that stopped inside a character
    special_tokens: dict[str, int]  # how often each special token was generated, by name
    seed: int


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
    warn: Callable[[str], None] = lambda message: None,
) -> Sampled:
    _check_options(max_new_tokens, temperature, top_k)
    loaded, model, tokenizer, device = load_model(home, experiment_id, step, warn)
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
    new, held = _whole_characters(tokenizer, produced[len(context) :])
    completion = tokenizer.decode(new)
    return {
        "id": experiment_id,
        "step": loaded.record.step,
        "checkpoint": str(loaded.path),
        "prompt": prompt,
        "completion": completion,
        "text": prompt + completion,
        "tokens": len(new),
        "held_back": held,  # tokens at the end that stopped inside a character
        "special_tokens": _special_counts(tokenizer, new),
        "seed": seed,
    }


def _whole_characters(tokenizer: Tokenizer, ids: list[int]) -> tuple[list[int], int]:
    """``ids`` without the last few tokens when they end inside a character (a byte-level token can hold part of
    one: decoded, it reads U+FFFD), and how many were held back; at most three (a character has at most 4 bytes)."""
    for held in range(min(3, len(ids)) + 1):
        kept = ids[: len(ids) - held]
        if not tokenizer.decode(kept).endswith("\ufffd"):
            return kept, held
    return ids, 0  # a replacement character the model really wrote


def _special_counts(tokenizer: Tokenizer, ids: list[int]) -> dict[str, int]:
    """How often each special token was generated (they decode to nothing), by name."""
    names = {tokenizer.bos_id: tokenizer.bos, tokenizer.eos_id: tokenizer.eos, tokenizer.pad_id: tokenizer.pad}
    counts: dict[str, int] = {}
    for token in ids:
        if token in names:
            counts[names[token]] = counts.get(names[token], 0) + 1
    return counts
