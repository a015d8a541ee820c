"""A sweep's spec as every reader takes it (torch-free): described in words from what it holds now (``describe``:
after ``sweep extend``, the configurations and seeds it has grown to)."""

from __future__ import annotations

import math

from octlm.store.sweeps.records import SweepSpec


def describe(spec: SweepSpec) -> str:
    """``2 configurations x 3 seeds, grid``: the configurations the spec makes (a sampler that asks as trials
    finish: its budget, ``trials``), its seeds per configuration and its sampler."""
    seeds = int(spec.get("seeds") or 1)
    budget = spec.get("trials")
    grid = spec.get("grid") or {}
    count = budget or math.prod(len(values) for values in grid.values()) * max(int(spec.get("random") or 0), 1)
    words = f"{count} configuration{'s' * (count != 1)} x {seeds} seed{'s' * (seeds != 1)}"
    return f"{words}, {spec.get('sampler') or 'grid'}"
