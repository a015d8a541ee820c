"""Several canonical pieces in one forward and backward, each piece's gradient with the bits it gets alone.

A rank holding several pieces (``training.micro_batches``) runs all of their blocks as one batch. Every kernel of
the step except the reductions over rows gives a row the same bits whatever other rows share its call (measured by
``benchmarks/row_invariance.py`` and checked against the per-piece passes by the tests), so only those reductions
are taken per piece here, each with the very calls autograd makes when the piece runs alone, and each lands in the
piece's leaf of the canonical tree (``runtime.pieces``):

- a linear layer's weight gradient (the tied head's too): ``grad.t().mm(input)`` over the piece's rows, written
  straight into the piece's leaf, so no flattening copy follows;
- the embedding's gradient: ``embedding_dense_backward`` of the piece's tokens, added to the tied head's;
- RMSNorm's weight gradient: ``(grad * normalized).sum_to_size(weight)`` over the piece's rows (the reduction the
  autograd engine makes for a broadcast weight);
- SiLU, whose bits depend on where its call's elements end (``decoder.GRAIN``): called per piece;
- the loss: per piece, as a piece alone computes it, then every piece's backward in one call.

A leaf is one flat buffer: every parameter's gradient in parameter order, then the piece's loss. A plan keeps its
leaves from step to step (the parameters' gradients are views of them until ``zero_grad``), so a step allocates
nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Ctx = Any  # torch.autograd.function.FunctionCtx, with the attributes set below


# How much one pass takes at most: the tokens of its pieces (their activations) and the bytes of their leaves. A rank
# whose pieces exceed either runs them in several passes, so a run that chose pieces to bound its memory (pieces are
# also octlm's exact gradient accumulation) keeps about that bound. Neither changes any bit.
PASS_TOKENS = 8192
PASS_LEAF_BYTES = 256 * 2**20


def pass_size(pieces: int, piece_tokens: int, leaf_bytes: int) -> int:
    """How many of a rank's ``pieces`` one pass takes (at least one): as many as ``PASS_TOKENS`` and
    ``PASS_LEAF_BYTES`` allow."""
    return max(1, min(pieces, PASS_TOKENS // max(1, piece_tokens), PASS_LEAF_BYTES // max(1, leaf_bytes)))


class PiecePlan:
    """The leaves of ``pieces`` pieces run in one pass over ``parameters``: row k of ``leaves`` is piece k's, and
    ``slots[i]`` holds parameter i's gradient in each piece's leaf (views)."""

    def __init__(self, parameters: list[nn.Parameter], pieces: int):
        self.pieces = pieces
        self.index = {id(p): i for i, p in enumerate(parameters)}
        self.offsets = list(accumulate([p.numel() for p in parameters], initial=0))
        self.shapes = [p.shape for p in parameters]
        self.like = parameters[0]
        self.leaves, self.slots = self._allocate()
        self.written: set[int] = set()  # the parameters whose gradients this pass has written

    def _allocate(self) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        leaves = torch.empty(self.pieces, self.offsets[-1] + 1, dtype=self.like.dtype, device=self.like.device)
        ends = list(zip(self.offsets, self.offsets[1:], self.shapes, strict=False))
        # parameter i's gradient in every piece's leaf at once, (pieces, *shape): one call writes all of them
        self.stacked = [leaves[:, start:end].view(self.pieces, *shape) for start, end, shape in ends]
        return leaves, [[leaf[start:end].view(shape) for leaf in leaves] for start, end, shape in ends]

    def begin(self, keep: bool = True) -> PiecePlan:
        """Ready for a pass. ``keep``: into the last pass's leaves (the step's only pass: its gradients are gone by
        then, ``zero_grad``); else into new ones (a step of several passes, whose earlier leaves the tree holds)."""
        if not keep:
            self.leaves, self.slots = self._allocate()
        self.written.clear()
        return self

    def cut(self, tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``tensor``'s rows (its first dimension) by piece."""
        return tensor.chunk(self.pieces) if self.pieces > 1 else (tensor,)

    def fresh(self, i: int) -> bool:
        """Whether parameter ``i``'s gradients are still unwritten in this pass; from now on they are not."""
        if i in self.written:
            return False
        self.written.add(i)
        return True

    def finish(self, losses: torch.Tensor) -> list[torch.Tensor]:
        """Every piece's leaf once the backward is done: a parameter the pass did not reach set to zero (as
        ``PieceSum`` does), and each piece's loss (``losses``: one a piece) last."""
        for i in set(range(len(self.slots))) - self.written:
            self.stacked[i].zero_()
        self.leaves[:, -1].copy_(losses.detach())
        return list(self.leaves.unbind(0))


def _weight_hook(plan: PiecePlan, weight: torch.Tensor, x: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """What a linear layer's output hands its gradient to: each piece's ``grad.t().mm(input)`` (autograd's call for
    a weight used as ``weight.t()``) into the piece's leaf, added where the tied weight has one already.

    The pieces' products are one ``bmm`` over the pieces, each of whose matrices gets the bits of that ``mm``
    (MKL's product per matrix; checked at 1 and 2 threads, with MKL's strict mode and without, by
    ``tests/train/test_one_pass.py``): one call where there were one a piece, and no Python loop. Not ``out=``:
    into the leaves' strided view, without MKL's strict mode, ``bmm`` took another kernel for narrow inputs."""
    i, pieces = plan.index[id(weight)], plan.pieces

    def hook(grad: torch.Tensor) -> None:
        rows, inputs = grad.reshape(pieces, -1, grad.shape[-1]), x.reshape(pieces, -1, x.shape[-1])
        products = torch.bmm(rows.transpose(1, 2), inputs)  # (pieces, out, in)
        plan.stacked[i].copy_(products) if plan.fresh(i) else plan.stacked[i].add_(products)

    return hook


def _embedding_hook(plan: PiecePlan, weight: torch.Tensor, tokens: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """The embedding's gradient per piece (``embedding_dense_backward``, autograd's call), added to the head's."""
    i = plan.index[id(weight)]

    def hook(grad: torch.Tensor) -> None:
        fresh = plan.fresh(i)
        for g, t, slot in zip(plan.cut(grad), plan.cut(tokens), plan.slots[i], strict=True):
            value = torch.ops.aten.embedding_dense_backward(g, t, weight.shape[0], -1, False)
            slot.copy_(value) if fresh else slot.add_(value)

    return hook


def _scale_hook(plan: PiecePlan, weight: torch.Tensor, normalized: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """RMSNorm's weight gradient per piece: ``(grad * normalized).sum_to_size(weight)``, the reduction the autograd
    engine makes for a broadcast factor."""
    i = plan.index[id(weight)]

    def hook(grad: torch.Tensor) -> None:
        parts, dims = plan.cut(grad.mul(normalized)), tuple(range(grad.dim() - 1))
        if plan.fresh(i):  # sum_to_size is this sum over the leading dimensions, here straight into the leaf
            for part, slot in zip(parts, plan.slots[i], strict=True):
                torch.sum(part, dims, out=slot)
        else:
            for part, slot in zip(parts, plan.slots[i], strict=True):
                slot.add_(part.sum_to_size(weight.shape))

    return hook


class PieceSiLU(torch.autograd.Function):
    """SiLU called once per piece (in the parts ``parts`` gives a piece, where given), as the piece alone calls it."""

    @staticmethod
    def forward(ctx: Ctx, x: torch.Tensor, pieces: int, parts: Callable[[int], list[int]] | None) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        ctx.lengths = _lengths(x.numel(), pieces, parts)
        for part, into in zip(x.view(-1).split(ctx.lengths), out.view(-1).split(ctx.lengths), strict=True):
            torch.ops.aten.silu.out(part, out=into)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx: Ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (x,) = ctx.saved_tensors
        result = torch.empty_like(x)
        cut = (t.view(-1).split(ctx.lengths) for t in (grad.contiguous(), x, result))
        for g, part, into in zip(*cut, strict=True):
            torch.ops.aten.silu_backward.grad_input(g, part, grad_input=into)
        return result, None, None


class PieceLoss(torch.autograd.Function):
    """Each piece's summed cross-entropy over its non-PAD targets, with the bits ``F.cross_entropy(...,
    reduction="sum")`` gives the piece alone (it is ``nll_loss`` of ``log_softmax``): ``log_softmax`` once over
    every row (row-invariant), ``nll_loss`` per piece (a sum over the piece's rows). The backward writes each piece's
    ``nll_loss_backward`` into its rows of one buffer (autograd would concatenate the pieces' gradients) and calls
    ``log_softmax``'s backward once."""

    @staticmethod
    def forward(ctx: Ctx, logits: torch.Tensor, targets: torch.Tensor, pieces: int, pad_id: int) -> torch.Tensor:
        logp = torch.log_softmax(logits, 1)
        cut = zip(logp.chunk(pieces), targets.chunk(pieces), strict=True)
        sums = [torch.ops.aten.nll_loss_forward(part, t, None, SUM, pad_id) for part, t in cut]
        ctx.pieces, ctx.pad_id, ctx.weights = pieces, pad_id, [weight for _, weight in sums]
        ctx.save_for_backward(logp, targets)
        return torch.stack([total for total, _ in sums])

    @staticmethod
    def backward(ctx: Ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        logp, targets = ctx.saved_tensors
        into = torch.empty_like(logp)
        cut = (t.chunk(ctx.pieces) for t in (logp, targets, into))
        for g, part, t, rows, weight in zip(grad.unbind(), *cut, ctx.weights, strict=True):
            torch.ops.aten.nll_loss_backward.grad_input(g, part, t, None, SUM, ctx.pad_id, weight, grad_input=rows)
        return torch.ops.aten._log_softmax_backward_data(into, logp, 1, logp.dtype), None, None, None


SUM = 2  # ATen's reduction code for "sum"


def piece_losses(logits: torch.Tensor, targets: torch.Tensor, pad_id: int, counted: int, pieces: int) -> torch.Tensor:
    """Every piece's loss as a piece alone weighs it (``loop._backward``): its mean cross-entropy over its non-PAD
    targets (``decoder.loss``) times its share of the ``counted`` targets of the global batch; one a piece, with the
    same divisions and products, element by element."""
    totals = PieceLoss.apply(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), pieces, pad_id)
    counts = (targets != pad_id).reshape(pieces, -1).sum(1)
    shares = torch.tensor([count / max(1, counted) for count in counts.tolist()], dtype=totals.dtype)
    return totals / counts.clamp(min=1) * shares.to(totals.device)


def _lengths(n: int, pieces: int, parts: Callable[[int], list[int]] | None) -> list[int]:
    """The calls SiLU over ``n`` elements makes: each piece's ``n / pieces``, cut by ``parts`` where given."""
    each = n // pieces
    return (parts(each) if parts is not None else [each]) * pieces


def linear(module: nn.Linear, x: torch.Tensor, plan: PiecePlan | None) -> torch.Tensor:
    return module(x) if plan is None else head(x, module.weight, plan)


def head(x: torch.Tensor, weight: torch.Tensor, plan: PiecePlan | None) -> torch.Tensor:
    """``F.linear(x, weight)``: the tied output head, or (through ``linear``) any linear layer. With a plan, the
    weight enters detached, so autograd computes the input's gradient alone, with the nodes it always makes, and
    the weight's gradient goes to the plan per piece (``_weight_hook``)."""
    if plan is None:
        return F.linear(x, weight)
    y = F.linear(x, weight.detach())
    y.register_hook(_weight_hook(plan, weight, x))
    return y


def embedding(module: nn.Embedding, tokens: torch.Tensor, plan: PiecePlan | None) -> torch.Tensor:
    """The embedding; with a plan, a leaf of the pass whose gradient goes to the plan per piece."""
    if plan is None:
        return module(tokens)
    x = F.embedding(tokens, module.weight.detach()).requires_grad_()
    x.register_hook(_embedding_hook(plan, module.weight, tokens))
    return x


def rms_norm(module: nn.RMSNorm, x: torch.Tensor, plan: PiecePlan | None) -> torch.Tensor:
    """RMSNorm over every row in one call (the input's gradient gathers its terms as for a piece alone); with a
    plan, its weight enters detached and its gradient goes to the plan per piece (``_scale_hook``)."""
    if plan is None:
        return module(x)
    normalized = F.rms_norm(x, module.normalized_shape, None, module.eps)
    y = normalized.mul(module.weight.detach())
    y.register_hook(_scale_hook(plan, module.weight, normalized))
    return y


def silu(x: torch.Tensor, plan: PiecePlan, parts: Callable[[int], list[int]] | None) -> torch.Tensor:
    """SiLU per piece; ``parts(n)``: the lengths a piece of ``n`` elements is cut into, or None for one call."""
    return PieceSiLU.apply(x, plan.pieces, parts)
