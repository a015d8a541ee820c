"""A miniature modern decoder-only transformer. ``nn.Module`` only: no I/O, no printing.

Token embedding tied to the output head, pre-norm RMSNorm, rotary position embeddings,
causal attention through ``F.scaled_dot_product_attention``, a SwiGLU MLP, no biases.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from octlm.config import Config
from octlm.core.reporting import counted
from octlm.train.model import piecewise
from octlm.train.model.piecewise import PiecePlan


def rotary_table(context_length: int, head_dim: int, base: float) -> torch.Tensor:
    """Unit complex numbers e^(i * position * frequency): (T, hd/2) complex64."""
    inverse = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))  # (hd/2,)
    angles = torch.outer(torch.arange(context_length, dtype=torch.float64), inverse)  # (T, hd/2)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def apply_rotary(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    # x: (B, T, H, hd). Each adjacent (even, odd) pair is a complex number rotated by its
    # position's angle: one complex multiply instead of four real ones and a concatenation.
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # (B, T, H, hd/2)
    rotated = pairs * rotation[: x.shape[1], None, :]  # (T, 1, hd/2) broadcast over heads
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)  # (B, T, H, hd)


class Attention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        model = config.model
        self.n_heads = model.n_heads
        self.head_dim = model.d_model // model.n_heads
        self.dropout = model.dropout
        # Separate projections: measured ~5% faster per step on a CPU than one fused QKV matmul,
        # whose backward pass must concatenate the three gradients.
        self.q = nn.Linear(model.d_model, model.d_model, bias=False)
        self.k = nn.Linear(model.d_model, model.d_model, bias=False)
        self.v = nn.Linear(model.d_model, model.d_model, bias=False)
        self.proj = nn.Linear(model.d_model, model.d_model, bias=False)

    def forward(self, x: torch.Tensor, rotation: torch.Tensor, plan: PiecePlan | None = None) -> torch.Tensor:
        batch, length, width = x.shape  # (B, T, C)
        heads = (batch, length, self.n_heads, self.head_dim)
        q = apply_rotary(piecewise.linear(self.q, x, plan).view(heads), rotation)  # (B, T, H, hd)
        k = apply_rotary(piecewise.linear(self.k, x, plan).view(heads), rotation)  # (B, T, H, hd)
        q, k, v = (t.transpose(1, 2) for t in (q, k, piecewise.linear(self.v, x, plan).view(heads)))  # (B, H, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return piecewise.linear(self.proj, y.transpose(1, 2).reshape(batch, length, width), plan)  # (B, T, C)


# torch splits an elementwise op over more than GRAIN (32,768) elements into min(threads, n / GRAIN) equal shares, and
# each share's last elements short of two vectors (32 floats with AVX-512) take scalar code, whose SiLU is not always
# the vector code's bits: where the shares end depends on the thread count (4 of 90,112 elements differ at 4 threads
# here). A call on at most GRAIN elements is never split, and one on 2 x GRAIN is split at GRAIN or not at all, both
# on a multiple of 64: their bits are the same at every thread count.
GRAIN = 32768


def splits_evenly(n: int) -> bool:
    """Whether ``F.silu`` over ``n`` elements gives the same bits at any thread count (see GRAIN)."""
    return n <= GRAIN or (n <= 2 * GRAIN and n % 64 == 0)


def silu_parts(n: int) -> list[int]:
    """The calls ``F.silu`` over ``n`` elements is cut into for the same bits at any thread count: one where it
    splits evenly, else ``_fixed_parts``."""
    return [n] if splits_evenly(n) else _fixed_parts(n)


def _fixed_parts(n: int) -> list[int]:
    """Lengths that cut ``n`` elements into calls of 2 x GRAIN, the rest into calls of at most GRAIN."""
    whole, rest = divmod(n, 2 * GRAIN)
    return [2 * GRAIN] * whole + ([GRAIN, rest - GRAIN] if rest > GRAIN else [rest] if rest else [])


class ThreadInvariantSiLU:
    """SiLU (and its gradient) computed in fixed parts (2 x GRAIN, the rest in parts of at most GRAIN): the same bits
    at any thread count, for canonical pieces, which promise them (``training.micro_batches``). One piece of
    ``piecewise.PieceSiLU``, which makes the same calls."""

    @staticmethod
    def apply(x: torch.Tensor) -> torch.Tensor:
        return piecewise.PieceSiLU.apply(x, 1, _fixed_parts)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int, thread_invariant: bool = False):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
        self.thread_invariant = thread_invariant

    def forward(self, x: torch.Tensor, plan: PiecePlan | None = None) -> torch.Tensor:
        gate = piecewise.linear(self.gate, x, plan)
        if plan is not None:  # SiLU per piece, as each piece alone calls it
            activated = piecewise.silu(gate, plan, silu_parts if self.thread_invariant else None)
        elif self.thread_invariant and not splits_evenly(gate.numel()):  # day1's pieces split evenly: F.silu
            activated = ThreadInvariantSiLU.apply(gate)
        else:
            activated = F.silu(gate)
        return piecewise.linear(self.down, activated * piecewise.linear(self.up, x, plan), plan)  # (B, T, C)


class Block(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.model.d_model)
        self.attention = Attention(config)
        self.mlp_norm = nn.RMSNorm(config.model.d_model)
        # canonical pieces: the same bits at any thread count; compiled, Inductor's one-thread SiLU has them already
        invariant = bool(config.training.micro_batches) and not config.training.compile
        self.mlp = SwiGLU(config.model.d_model, config.mlp_hidden, thread_invariant=invariant)
        self.dropout = nn.Dropout(config.model.dropout)

    def forward(self, x: torch.Tensor, rotation: torch.Tensor, plan: PiecePlan | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attention(piecewise.rms_norm(self.attention_norm, x, plan), rotation, plan))
        return x + self.dropout(self.mlp(piecewise.rms_norm(self.mlp_norm, x, plan), plan))


class Decoder(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        model = config.model
        self.context_length = model.context_length
        self.embedding = nn.Embedding(config.tokenizer.vocab_size, model.d_model)
        self.dropout = nn.Dropout(model.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(model.n_layers))
        self.norm = nn.RMSNorm(model.d_model)
        rotation = rotary_table(model.context_length, model.d_model // model.n_heads, model.rope_base)
        self.register_buffer("rotation", rotation, persistent=False)
        self._initialise(model.n_layers)

    def _initialise(self, n_layers: int) -> None:
        # GPT-2 style: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers) so the
        # residual stream's variance does not grow with depth. Module order is fixed, so the
        # global generator is consumed in the same order on every run.
        residual = {m.proj for m in self.modules() if isinstance(m, Attention)}
        residual |= {m.down for m in self.modules() if isinstance(m, SwiGLU)}
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = 0.02 / math.sqrt(2 * n_layers) if module in residual else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens: torch.Tensor, plan: PiecePlan | None = None) -> torch.Tensor:
        """Logits (B, T, V) of ``tokens`` (B, T). With ``plan``, the batch is ``plan.pieces`` canonical pieces run
        in one pass, whose parameter gradients go to the plan's leaves (``piecewise``), never to ``.grad``."""
        length = tokens.shape[1]  # tokens: (B, T)
        if length > self.context_length:
            raise ValueError(f"sequence of {counted(length, 'token')} exceeds the context length {self.context_length}")
        x = self.dropout(piecewise.embedding(self.embedding, tokens, plan))  # (B, T, C)
        for block in self.blocks:
            x = block(x, self.rotation, plan)
        return piecewise.head(piecewise.rms_norm(self.norm, x, plan), self.embedding.weight, plan)  # tied: (B, T, V)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def loss_sums(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy (nats) over non-PAD targets, and how many there were."""
    flat = logits.float().reshape(-1, logits.shape[-1])
    total = F.cross_entropy(flat, targets.reshape(-1), ignore_index=pad_id, reduction="sum")
    return total, (targets != pad_id).sum()


def loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean cross-entropy over non-PAD targets: the training objective."""
    total, count = loss_sums(logits, targets, pad_id)
    return total / count.clamp(min=1)
