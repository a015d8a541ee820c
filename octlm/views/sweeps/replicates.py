"""Seed replicates and their noise (torch-free): experiments whose configs are the same but for ``training.seed``
(and what does not change what a model learns: the fingerprint's bookkeeping keys) are replicates of one
configuration, made by ``--seeds S`` or by hand. A group is shown as the mean ± sd of each metric over its
replicates; whether two groups differ beyond noise is ``compare.seeds``'s verdict (paired by seed where they share
their seeds, else Welch's).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict, get_args

from octlm.config import BOOKKEEPING, canonical, flatten
from octlm.core.records.freeform import ConfigTree
from octlm.core.reporting import counted
from octlm.views.compare import noise, seeds

SEED = "training.seed"
LossMetric = Literal["train_loss", "eval_loss", "perplexity", "bits_per_byte"]
LOSS_METRICS: tuple[LossMetric, ...] = get_args(LossMetric)  # a run's loss figures, in the order every view shows them


class Spread(TypedDict):
    """A metric over a group's replicates."""

    n: int
    mean: float | None
    sd: float | None  # None below two values
    values: list[float]


class Group(TypedDict):
    """One configuration's replicates (``show``'s ``replicates``)."""

    ids: list[str]
    seeds: list[Any]
    counted: list[str]  # the replicates the spread is over: those at the furthest step, one per seed
    step: int | None  # that step
    metrics: dict[str, Spread]  # LOSS_METRICS, over the replicates' final values
    eval_loss_se: float | None  # the mean of their final evaluations' own standard errors


def key(config: ConfigTree) -> str:
    """What replicates share: the config's fingerprinted keys without the seed (canonical JSON)."""
    return _key(flatten(dict(config)))


def _key(flat: Mapping[str, Any]) -> str:
    return canonical({k: v for k, v in flat.items() if k not in BOOKKEEPING and k != SEED})


def twins(a: ConfigTree, b: ConfigTree) -> bool:
    """Whether two configs train the same bits: the same fingerprinted keys, seed included (not replicates)."""
    return bool(a) and key(a) == key(b) and flatten(dict(a)).get(SEED) == flatten(dict(b)).get(SEED)


def spread(values: Sequence[object]) -> Spread:
    """Count, mean and sd of the finite numbers among ``values`` (anything else, a run file's junk too, left out)."""
    found = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return {
        "n": len(found),
        "mean": statistics.fmean(found) if found else None,
        "sd": statistics.stdev(found) if len(found) > 1 else None,
        "values": found,
    }


def groups(configs: Mapping[str, ConfigTree]) -> list[list[str]]:
    """The replicate groups among ``configs`` ({ID: resolved config}): two IDs or more with two seeds or more,
    in ID order within a group, groups by their first ID."""
    by_key: dict[str, list[str]] = {}
    seeds: dict[str, Any] = {}
    for experiment_id in sorted(configs):
        if configs[experiment_id]:
            flat = flatten(dict(configs[experiment_id]))  # once per config: a home may hold 10,000
            by_key.setdefault(_key(flat), []).append(experiment_id)
            seeds[experiment_id] = flat.get(SEED)
    found = [ids for ids in by_key.values() if len({seeds[i] for i in ids}) > 1]
    return sorted(found)


def group_of(experiment_id: str, configs: Mapping[str, ConfigTree]) -> list[str]:
    """The replicate group ``experiment_id`` belongs to ([] when it has no replicate)."""
    return next((ids for ids in groups(configs) if experiment_id in ids), [])


def summarize(ids: list[str], configs: Mapping[str, ConfigTree], finals: Mapping[str, Mapping[str, object]]) -> Group:
    """A group from each member's final record (``finals``: {ID: the newest value of each field, ``step`` among
    them}). Only the members at the group's furthest step count, one per seed (a second experiment with the same
    seed trains the same bits: no replicate)."""
    seeds = {i: flatten(dict(configs.get(i, {}))).get(SEED) for i in ids}
    furthest = max((_step(finals.get(i, {})) for i in ids), default=0)
    counted: dict[Any, str] = {}
    for experiment_id in ids:
        if _step(finals.get(experiment_id, {})) == furthest:
            counted.setdefault(seeds[experiment_id], experiment_id)
    used = list(counted.values())
    return {
        "ids": ids,
        "seeds": [seeds[i] for i in ids],
        "counted": used,
        "step": furthest or None,
        "metrics": {metric: spread([finals.get(i, {}).get(metric) for i in used]) for metric in LOSS_METRICS},
        "eval_loss_se": spread([finals.get(i, {}).get("eval_loss_se") for i in used])["mean"],
    }


def _step(final: Mapping[str, object]) -> int:
    step = final.get("step")
    return step if isinstance(step, int) else 0


def shown(value: Spread, digits: int = 4) -> str:
    """``5.2310 ± 0.0123 (3 seeds)``; one seed without ``±``."""
    if value["mean"] is None:
        return "-"
    sd = f" ± {value['sd']:.{digits}f}" if value["sd"] is not None else ""
    return f"{value['mean']:.{digits}f}{sd} ({counted(value['n'], 'seed')})"


def difference(a: Spread, b: Spread) -> tuple[bool | None, str]:
    """Whether ``b``'s mean differs from ``a``'s (``b - a``) beyond the seeds' noise, and that in words, from the two
    spreads alone (no seeds to pair them by, no evaluation block by block): Welch's test of ``compare.seeds``, as
    ``benchmarks/calibration.py`` measures it."""
    if a["mean"] is None or b["mean"] is None:
        return None, "no metric to compare"
    firsts = [seeds.Member(f"a{i}", ("a", i), value) for i, value in enumerate(a["values"])]
    others = [seeds.Member(f"b{i}", ("b", i), value) for i, value in enumerate(b["values"])]
    compared = seeds.configuration(firsts, others, noise.Size(a["mean"]))
    if compared is None:
        delta = b["mean"] - a["mean"]
        return None, f"{delta:+.4f}; no seed spread to judge it by (give each configuration --seeds 2 or more)"
    verdict = compared.verdict
    verdict["words"] = seeds.words(verdict, "the first", "the other", compared.sizes, seeds.advice(compared, None))
    return verdict["within_noise"], verdict["words"]
