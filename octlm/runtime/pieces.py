"""Canonical pieces (``training.micro_batches: K``): one step's gradient summed in one fixed tree, at any world size.

Every global batch is cut into K pieces of B/K blocks; piece k is leaf k of the tree, and its leaf value is one flat
buffer: every parameter's gradient from that piece's forward and backward alone, in parameter order, then the
piece's loss (its mean loss weighted by its share of the global batch's non-PAD target tokens).

**The tree.** A node [lo, hi) of two or more leaves splits at lo plus the largest power of two below hi - lo, so
each left child is a perfect binary tree: K = 4 sums (0+1)+(2+3), K = 6 sums ((0+1)+(2+3))+(4+5). Each node's
value is its left child's plus its right child's: one elementwise addition of two whole buffers, which has the
same bits on any rank and at any thread count.

**Who computes what.** Rank r of N (N divides K) holds leaves [r*K/N, (r+1)*K/N). It computes the largest nodes of
the tree inside its range (its cover) with a stack: each finished piece is pushed as a leaf, and the two on top
merge (the left one's buffer takes the right one's in place) while they are the two children of one node. The
stack never holds more than about log2(K) + 1 buffers, and when the rank's last piece is in, it holds the cover.
The ranks then all-gather their covers (padded to the longest), and every rank builds the rest of the tree from the
gathered nodes in the same order. Never a ring all-reduce, whose association of the ranks' sums depends on N, except
on 2 ranks that each hold one child of the root: their sum is one addition per element, the same bits in either
order, so one all-reduce in place builds the root. On one process the cover is the root itself: the same code
accumulates the K pieces.

``OCTLM_DISTRIBUTED_FAULT=ring-sum`` (tests only) plants that mistake: each rank folds its own cover and the ranks
all-reduce their sums, which tests show is not the same at every world size.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from octlm.runtime.distributed import Ranks

Node = tuple[int, int]  # the leaves [lo, hi) of a node of the tree


def split(lo: int, hi: int) -> int:
    """Where node [lo, hi) (two leaves or more) splits: its left child has a power of two leaves."""
    return lo + (1 << ((hi - lo - 1).bit_length() - 1))


def leaves(rank: int, world_size: int, pieces: int) -> range:
    """The pieces rank ``rank`` of ``world_size`` computes (``world_size`` divides ``pieces``)."""
    share = pieces // world_size
    return range(rank * share, (rank + 1) * share)


def cover(first: int, end: int, node: Node) -> list[Node]:
    """The largest nodes under ``node`` that lie inside leaves [first, end), left to right."""
    lo, hi = node
    if hi <= first or lo >= end:
        return []
    if first <= lo and hi <= end:
        return [node]
    middle = split(lo, hi)
    return cover(first, end, (lo, middle)) + cover(first, end, (middle, hi))


def siblings(left: Node, right: Node, pieces: int) -> bool:
    """Whether ``left`` and ``right`` are the two children of one node of the tree over ``pieces`` leaves."""
    lo, hi = left[0], right[1]
    node = (0, pieces)
    while node[1] - node[0] > 1 and node != (lo, hi):
        middle = split(*node)
        if hi <= middle:
            node = (node[0], middle)
        elif lo >= middle:
            node = (middle, node[1])
        else:
            return False
    return node == (lo, hi) and left[1] == split(lo, hi)


def _add_into(flat: torch.Tensor, parts: list[torch.Tensor]) -> None:
    """``flat += torch.cat(parts)`` (flattened), one part at a time."""
    offset = 0
    for part in parts:
        flat[offset : offset + part.numel()].add_(part.reshape(-1))
        offset += part.numel()


def total(nodes: dict[Node, torch.Tensor], node: Node) -> torch.Tensor:
    """The value of ``node`` from the known values of ``nodes``, left child plus right child where unknown."""
    if node in nodes:
        return nodes[node]
    middle = split(*node)
    return total(nodes, (node[0], middle)) + total(nodes, (middle, node[1]))


class PieceSum:
    """One step's canonical sum on this rank: ``add`` each of its pieces in order, then ``finish``.
    ``clock``: where the seconds spent combining (flattening, merging, gathering, the rest of the tree) go."""

    def __init__(self, pieces: int, ranks: Ranks, clock: list[float] | None = None):
        self.pieces, self.ranks, self.clock = pieces, ranks, clock
        self.stack: list[tuple[Node, torch.Tensor]] = []
        self.seconds = 0.0

    def add(self, piece: int, parameters: list[torch.nn.Parameter], loss: torch.Tensor) -> None:
        """Piece ``piece`` as a leaf: the gradients its backward left in ``parameters`` (cleared) and its loss.
        A right child is added into its left sibling's buffer parameter by parameter (the same additions as
        flattening it first, without the copy); a left one is flattened into a buffer of its own."""
        started = self._now(loss.device)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        last = loss.detach().reshape(1).to(grads[0].dtype)
        node = (piece, piece + 1)
        if self.stack and siblings(self.stack[-1][0], node, self.pieces):
            left, flat = self.stack.pop()
            _add_into(flat, [*grads, last])
            node = (left[0], node[1])
        else:
            flat = torch.cat([*(g.reshape(-1) for g in grads), last])
        for parameter in parameters:
            parameter.grad = None
        self._push(node, flat)
        self.seconds += self._now(loss.device) - started

    def add_leaf(self, piece: int, leaf: torch.Tensor) -> None:
        """Piece ``piece`` as a leaf already flat (``train.model.piecewise``): every parameter's gradient, then the
        loss. The same additions as ``add``."""
        started = self._now(leaf.device)
        node = (piece, piece + 1)
        if self.stack and siblings(self.stack[-1][0], node, self.pieces):
            left, flat = self.stack.pop()
            leaf, node = flat.add_(leaf), (left[0], node[1])
        self._push(node, leaf)
        self.seconds += self._now(leaf.device) - started

    def _push(self, node: Node, flat: torch.Tensor) -> None:
        """``flat`` as the value of ``node``, merged with its left siblings on the stack while it has them."""
        while self.stack and siblings(self.stack[-1][0], node, self.pieces):
            left, buffer = self.stack.pop()
            flat, node = buffer.add_(flat), (left[0], node[1])
        self.stack.append((node, flat))

    def finish(self, parameters: list[torch.nn.Parameter]) -> torch.Tensor:
        """The root: every rank's cover gathered and the rest of the tree built; its gradient goes to
        ``parameters`` and the step's loss is returned."""
        device = self.stack[0][1].device
        started = self._now(device)
        if self.ranks.fault == "ring-sum":
            root = self._fault()
        elif self._halves():  # the root's two children, one on each of 2 ranks: left + right is right + left
            root = self.ranks.total_in_place(self.stack[0][1])
        else:
            root = total(self._gathered(), (0, self.pieces))
        offset = 0
        for parameter in parameters:  # views of the root, which nothing else holds: no copy
            parameter.grad = root[offset : offset + parameter.numel()].view_as(parameter)
            offset += parameter.numel()
        self.seconds += self._now(device) - started
        if self.clock is not None:
            self.clock.append(self.seconds)
        return root[-1].clone()

    def _gathered(self) -> dict[Node, torch.Tensor]:
        """Every rank's cover by node: this rank's stack alone on one process."""
        mine = dict(self.stack)
        if not self.ranks.parallel:
            return mine
        covers = [cover(r.start, r.stop, (0, self.pieces)) for r in self._ranges()]
        assert list(mine) == covers[self.ranks.rank], (list(mine), covers)
        longest = max(len(nodes) for nodes in covers)
        buffers = [buffer for _, buffer in self.stack]
        buffers += [torch.zeros_like(buffers[0])] * (longest - len(buffers))
        gathered = self.ranks.gather_tensor(buffers[0][None] if longest == 1 else torch.stack(buffers))
        return {node: gathered[r][j] for r, nodes in enumerate(covers) for j, node in enumerate(nodes)}

    def _halves(self) -> bool:
        """Whether 2 CPU ranks each hold one child of the root (K a power of two, or any K whose tree splits at
        K/2). Their sum is then one addition per element, which gives the same bits in either order, so one
        all-reduce in place builds the root: no gathered copy and no new buffer."""
        if self.ranks.world_size != 2 or not self.ranks.parallel or self.stack[0][1].device.type != "cpu":
            return False
        return split(0, self.pieces) * 2 == self.pieces and len(self.stack) == 1

    def _ranges(self) -> list[range]:
        return [leaves(r, self.ranks.world_size, self.pieces) for r in range(self.ranks.world_size)]

    def _fault(self) -> torch.Tensor:
        """The planted mistake: this rank's cover folded left to right, then the ranks' sums all-reduced."""
        mine = [buffer for _, buffer in self.stack]
        folded = mine[0]
        for buffer in mine[1:]:
            folded = folded + buffer
        return self.ranks.total(folded)

    def _now(self, device: torch.device) -> float:
        if self.clock is not None and device.type == "cuda":
            torch.cuda.synchronize()  # time the work, not its queueing
        return time.perf_counter()
