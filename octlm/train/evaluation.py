"""Evaluation: loss, perplexity and bits per byte of a model on fixed blocks, with their standard errors.

The blocks are read in a fixed order and the evaluation draws from no random stream, so it never changes the
trajectory. The mean loss is the nats of every non-PAD target over their count; its standard error is a ratio
estimator's over clusters of blocks (``se^2 = G/(G-1) * sum_g (A_g - L B_g)^2 / B^2`` with cluster g's nats ``A_g``
and targets ``B_g``, ``B = sum B_g``, ``G`` clusters), so it says how much the figure would move on another draw of
as many documents (or chunks): the clusters are ``TokenBlocks.cluster_ids``'s (the blocks' documents when they come
from at least 4, else chunks of 8 consecutive blocks of the split, else the blocks), because adjacent blocks of one
document are not independent draws and an error over blocks understated it (1.3-1.9x on the calibration config, issue
46). The record says over what (``eval_clusters``: G, ``eval_cluster_unit``: documents, chunks or blocks): a reader
judges with Student's t at G-1 degrees of freedom. Bits per byte is the same ratio over target bytes, divided by ln 2;
perplexity's error is ``exp(L) * se``. With one cluster there is no error to give (None). Blocks labelled with their
data source (``TokenBlocks.sources``) are also evaluated per source, each over its own clusters. Each block's nats,
targets, bytes and cluster are kept (``PerBlock``, with a digest of the blocks' tokens), so two evaluations of the
same blocks can be paired later.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from octlm.core.records import RunRecord, SourceFigures
from octlm.data.blocks import TokenBlocks, bits_per_byte
from octlm.runtime.machine import autocast
from octlm.train.model.decoder import loss_sums


def ratio_error(numerators: np.ndarray, denominators: np.ndarray, clusters: np.ndarray | None = None) -> float | None:
    """The standard error of ``sum(numerators) / sum(denominators)`` over its units (None for fewer than two): each
    value alone, or with ``clusters`` (one id per value), the sums of each cluster."""
    if clusters is not None:
        ids = np.unique(clusters, return_inverse=True)[1]
        numerators, denominators = np.bincount(ids, weights=numerators), np.bincount(ids, weights=denominators)
    k, total = len(numerators), float(np.sum(denominators))
    if k < 2 or total <= 0:
        return None
    ratio = float(np.sum(numerators)) / total
    spread = float(np.sum((numerators - ratio * denominators) ** 2))
    return math.sqrt(k / (k - 1) * spread) / total


def _per_block(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Each block's summed nats (float64), PAD targets left out: (b,)."""
    flat = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=pad_id, reduction="none")
    return flat.view(targets.shape).double().sum(dim=1)


@dataclass(frozen=True)
class PerBlock:
    """One evaluation, block by block: each block's summed nats, its target tokens and their bytes, the sha256
    of the blocks' tokens in the order read (two evaluations with the same digest read the same blocks), and each
    block's cluster with the clusters' unit (``TokenBlocks.cluster_ids``)."""

    nats: np.ndarray  # float64, one per block
    targets: np.ndarray  # int64
    target_bytes: np.ndarray  # int64
    digest: str
    clusters: np.ndarray  # int64, numbered from 0
    cluster_unit: str  # documents, chunks or blocks


def evaluate(model: nn.Module, blocks: TokenBlocks, device: torch.device, precision: str, batch_size: int) -> RunRecord:
    """Loss, perplexity and bits per byte over ``blocks`` with their standard errors, the tokens read, the seconds
    it took, and (for labelled blocks) the same per data source; draws from no random stream."""
    return evaluate_blocks(model, blocks, device, precision, batch_size)[0]


@torch.no_grad()
def evaluate_blocks(
    model: nn.Module, blocks: TokenBlocks, device: torch.device, precision: str, batch_size: int
) -> tuple[RunRecord, PerBlock]:
    """``evaluate``'s figures and the evaluation block by block (``PerBlock``)."""
    started, was_training = time.perf_counter(), model.training
    model.eval()
    nats = torch.zeros((), dtype=torch.float64, device=device)
    units: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # per block: nats, targets, bytes
    read = hashlib.sha256()
    for start in range(0, len(blocks), batch_size):
        inputs, targets = blocks.batch(slice(start, start + batch_size))
        read.update(torch.cat([inputs[:, :1], targets], dim=1).numpy().astype("<i8").tobytes())
        with autocast(device, precision):
            logits = model(inputs.to(device))
        batch_nats, _ = loss_sums(logits, targets.to(device), blocks.pad_id)
        nats += batch_nats.double()  # the figure itself, summed per batch as it always was
        counted = (targets != blocks.pad_id).sum(dim=1)
        units.append((_per_block(logits, targets.to(device), blocks.pad_id).cpu(), counted, _bytes(blocks, targets)))
    model.train(was_training)
    if not units:
        raise ValueError("an evaluation needs at least one block")
    a, b, y = (torch.cat(parts).numpy().astype(np.float64) for parts in zip(*units, strict=True))
    clusters, unit = blocks.cluster_ids()
    found = _figures(float(nats.item()), a, b, y, clusters)
    found |= {"eval_tokens": int(b.sum()), "eval_clusters": _count(clusters), "eval_cluster_unit": unit}
    found["eval_seconds"] = round(time.perf_counter() - started, 4)
    if blocks.sources is not None and len(blocks.source_names) > 1:
        found["eval_sources"] = _by_source(blocks, (a, b, y), clusters, unit)
    return found, PerBlock(a, b.astype(np.int64), y.astype(np.int64), read.hexdigest(), clusters, unit)


def _count(clusters: np.ndarray) -> int:
    return len(np.unique(clusters))


def _bytes(blocks: TokenBlocks, targets: torch.Tensor) -> torch.Tensor:
    return blocks.target_bytes(targets).sum(dim=1)


def _figures(total_nats: float, a: np.ndarray, b: np.ndarray, y: np.ndarray, clusters: np.ndarray) -> RunRecord:
    mean = total_nats / max(1.0, float(b.sum()))
    loss_se, bytes_se = ratio_error(a, b, clusters), ratio_error(a, y, clusters)
    perplexity = math.exp(min(mean, 700.0))
    return {
        "eval_loss": mean,
        "perplexity": perplexity,
        "bits_per_byte": bits_per_byte(total_nats, int(y.sum())),
        "eval_loss_se": loss_se,
        "perplexity_se": None if loss_se is None else perplexity * loss_se,
        "bits_per_byte_se": None if bytes_se is None else bytes_se / math.log(2),
    }


def _by_source(
    blocks: TokenBlocks, sums: tuple[np.ndarray, np.ndarray, np.ndarray], clusters: np.ndarray, unit: str
) -> dict[str, SourceFigures]:
    """Loss, its error over the source's own clusters (in the evaluation's unit), the clusters and the tokens of each
    data source among the blocks (by the source's name)."""
    assert blocks.sources is not None
    a, b, _ = sums
    out: dict[str, SourceFigures] = {}
    for index, name in enumerate(blocks.source_names):
        mine = blocks.sources == index
        if not mine.any():
            continue
        mean = float(a[mine].sum()) / max(1.0, float(b[mine].sum()))
        out[name] = {
            "eval_loss": mean,
            "eval_loss_se": ratio_error(a[mine], b[mine], clusters[mine]),
            "eval_tokens": int(b[mine].sum()),
            "eval_clusters": _count(clusters[mine]),
            "eval_cluster_unit": unit,
        }
    return out
