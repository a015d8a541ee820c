"""Bit-for-bit comparison of two checkpoints' trees (``verify-resume``'s and ``verify-run``'s checks): every tensor
and value by its dotted path, and the random states, of which a run of canonical pieces holds one distinct state
whatever its world size; and of two run files, timings aside."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import torch

from octlm.core.records import RunRecord
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


def state_checks(ra: Record, rb: Record, pieces: bool) -> list[Check]:
    """Every part of two checkpoints' training state, one check each: model, optimizer, random states (``pieces``:
    every rank's alike, compared once per side), data order, and where either has them the spike guard, the fp16
    scaler and a loss sum pending between two logged steps."""
    checks = [
        section("model", ra.model, rb.model),
        section("optimizer", ra.optimizer, rb.optimizer),
        section("rng", streams(ra, pieces), streams(rb, pieces)),
        section("data order", ra.receipt, rb.receipt),  # the blocks read so far and their rolling digest
    ]
    if ra.guard or rb.guard:  # the spike guard's window and skipped steps
        checks.append(section("guard", ra.guard, rb.guard))
    if ra.scaler or rb.scaler:  # fp16 only
        checks.append(section("scaler", {"scaler": ra.scaler}, {"scaler": rb.scaler}))
    if ra.log_accumulator or rb.log_accumulator:
        checks.append(section("log", {"log": ra.log_accumulator}, {"log": rb.log_accumulator}))
    return checks


def run_files(records_a: list[RunRecord], records_b: list[RunRecord]) -> tuple[Check, int | str | None]:
    """Two run files' records (timings aside), and the first step where they differ (None when equal)."""
    pairs = zip(records_a, records_b, strict=False)
    first_step: int | str | None = next((left.get("step") for left, right in pairs if left != right), None)
    if first_step is None and len(records_a) != len(records_b):
        first_step = "length differs"
    differing: list[Differing] = []
    if first_step is not None:
        differing.append({"name": f"first differing step: {first_step}", "max_abs_diff": None})
    check: Check = {"check": "run file", "compared": max(len(records_a), len(records_b)), "differing": differing}
    return check, first_step
