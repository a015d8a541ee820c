"""Evaluation: loss, perplexity and bits per byte of a model on fixed blocks, drawing from no random stream."""

from __future__ import annotations

import math

import torch
from torch import nn

from octlm.data.blocks import TokenBlocks, bits_per_byte
from octlm.runtime.machine import autocast
from octlm.train.decoder import loss_sums


@torch.no_grad()
def evaluate(
    model: nn.Module, blocks: TokenBlocks, device: torch.device, precision: str, batch_size: int
) -> dict[str, float]:
    """Loss, perplexity and bits per byte over fixed blocks; draws from no random stream."""
    was_training = model.training
    model.eval()
    nats = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    total_bytes = 0
    for start in range(0, len(blocks), batch_size):
        inputs, targets = blocks.batch(slice(start, start + batch_size))
        with autocast(device, precision):
            logits = model(inputs.to(device))
        batch_nats, batch_count = loss_sums(logits, targets.to(device), blocks.pad_id)
        nats += batch_nats.double()
        count += batch_count
        total_bytes += int(blocks.target_bytes(targets).sum())
    model.train(was_training)
    total_nats, total_count = nats.item(), count.item()
    mean = total_nats / max(1, total_count)
    return {
        "eval_loss": mean,
        "perplexity": math.exp(min(mean, 700.0)),
        "bits_per_byte": bits_per_byte(total_nats, total_bytes),
    }
