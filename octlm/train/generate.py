"""Greedy decoding and temperature / top-k sampling.

Sampling draws from its own seeded generator and never from the training streams, so
generating text in the middle of an experiment changes nothing about its trajectory.
"""

from __future__ import annotations

import torch

from octlm.train.model.decoder import Decoder


@torch.no_grad()
def _next_logits(model: Decoder, ids: list[int], device: torch.device) -> torch.Tensor:
    window = ids[-model.context_length :]
    logits = model(torch.tensor([window], device=device))  # (1, t, V)
    return logits[0, -1].float()  # (V,)


@torch.no_grad()
def greedy(
    model: Decoder, ids: list[int], max_new_tokens: int, device: torch.device, stop_id: int | None = None
) -> list[int]:
    was_training = model.training
    model.eval()
    out = list(ids)
    for _ in range(max_new_tokens):
        token = int(_next_logits(model, out, device).argmax())
        out.append(token)
        if token == stop_id:
            break
    model.train(was_training)
    return out


@torch.no_grad()
def sample(
    model: Decoder,
    ids: list[int],
    max_new_tokens: int,
    device: torch.device,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    stop_id: int | None = None,
) -> list[int]:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    was_training = model.training
    model.eval()
    out = list(ids)
    for _ in range(max_new_tokens):
        logits = _next_logits(model, out, device).cpu() / max(temperature, 1e-6)
        if top_k is not None and top_k < logits.numel():
            kth = torch.topk(logits, top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        token = int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))
        out.append(token)
        if token == stop_id:
            break
    model.train(was_training)
    return out
