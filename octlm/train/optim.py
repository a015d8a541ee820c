"""The optimizer as the seed has it: AdamW (betas from the config, eps 1e-8) with decay on matrices only,
its parameter groups in a fixed order, and the implementation chosen per device."""

from __future__ import annotations

import torch
from torch import nn

from octlm.config import Config
from octlm.core.records.freeform import StateDict


def optimizer_impl(device: torch.device) -> str:
    """fused AdamW on CPU and CUDA (measured fastest, per-element and deterministic), else foreach."""
    return "fused" if device.type in ("cpu", "cuda") else "foreach"


def parameter_groups(model: nn.Module, weight_decay: float) -> list[StateDict]:
    """Matrices decay; norm gains, biases and every other 1-D parameter do not.

    Built in ``named_parameters`` order (never from a set), so optimizer state lines up
    with the same parameters in every process.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if parameter.ndim < 2 or name.endswith("bias") else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, config: Config, impl: str) -> torch.optim.AdamW:
    training = config.training
    options = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    return torch.optim.AdamW(
        parameter_groups(model, training.weight_decay),
        lr=training.learning_rate,
        betas=(training.beta1, training.beta2),
        eps=1e-8,
        **options,
    )
