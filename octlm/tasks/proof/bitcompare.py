"""Bit-for-bit comparison of two checkpoints' trees (``verify-resume``'s checks): every tensor and value by its
dotted path, and the random states, of which a run of canonical pieces holds one distinct state whatever its world
size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import torch

from octlm.core.records.freeform import StateDict
from octlm.train.checkpoint import Record


class Differing(TypedDict):
    """A leaf that differs between the two runs, or the first step where their run files part."""

    name: str  # the leaf's dotted path (a tensor, a number), or what differs
    max_abs_diff: float | None  # the largest gap of two floating tensors; none for anything else


class Check(TypedDict):
    """One comparison of verify-resume: what was compared, how many leaves, those that differ."""

    check: str
    compared: int
    differing: list[Differing]
    values: NotRequired[list[float]]  # the next-batch loss of each side


class Streams(TypedDict):
    sampler: torch.Tensor
    ranks: list[StateDict]


def tensors(tree: object, prefix: str = "") -> dict[str, object]:
    """Flatten nested dicts/lists to {dotted.path: leaf}."""
    if isinstance(tree, dict):
        out: dict[str, object] = {}
        for key, value in tree.items():
            out.update(tensors(value, f"{prefix}{key}."))
        return out
    if isinstance(tree, (list, tuple)) and not (tree and isinstance(tree[0], (int, float))):
        out = {}
        for index, value in enumerate(tree):
            out.update(tensors(value, f"{prefix}{index}."))
        return out
    return {prefix.rstrip("."): tree}


def same(a: Any, b: Any) -> tuple[bool, float | None]:
    """Whether two leaves are identical (tensors: shape, dtype and bits), with the largest gap of two floating ones."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, None
        if torch.equal(a, b):
            return True, 0.0
        if a.is_floating_point():
            return False, float((a.double() - b.double()).abs().max())
        return False, None
    return a == b, None


def section(name: str, a: Mapping[str, object], b: Mapping[str, object]) -> Check:
    """One check: every leaf of ``a`` against ``b``'s at the same path, the differing ones named."""
    left, right = tensors(a), tensors(b)
    differing: list[Differing] = []
    for key in sorted(set(left) | set(right)):
        equal, gap = same(left.get(key), right.get(key))
        if not equal:
            differing.append({"name": f"{name}.{key}", "max_abs_diff": gap})
    return {"check": name, "compared": len(set(left) | set(right)), "differing": differing}


def streams(record: Record, pieces: bool) -> Streams:
    """The random states to compare: the sampler's and every rank's; with canonical pieces, every distinct one
    (one, when the ranks agree as they must), so that sides of different world sizes compare."""
    states = record.rng
    if pieces:
        states = [state for index, state in enumerate(states) if all(_differ(state, s) for s in states[:index])]
    return {"sampler": record.sampler, "ranks": states}


def _differ(a: StateDict, b: StateDict) -> bool:
    left, right = tensors(a), tensors(b)
    return left.keys() != right.keys() or not all(same(left[key], right[key])[0] for key in left)
