"""Seed replicates and their noise (torch-free): experiments whose configs are the same but for ``training.seed``
(and what does not change what a model learns: the fingerprint's bookkeeping keys) are replicates of one
configuration, made by ``--seeds S`` or by hand. A group is shown as the mean ± sd of each metric over its
replicates, and two groups differ beyond seed noise when their means are further apart than Student's two-sided 95%
critical value (at the Welch-Satterthwaite degrees of freedom) times the standard error the seeds' spread gives
their difference (sqrt(sd_a^2 / n_a + sd_b^2 / n_b)): calibrated at 5% for normal seed noise, where two errors
would say "different" of two groups of 3 seeds of one config about 12% of the time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from octlm.config import BOOKKEEPING, canonical, flatten
from octlm.core.records.freeform import ConfigTree
from octlm.core.reporting import counted
from octlm.views import noise

SEED = "training.seed"
METRICS = ("train_loss", "eval_loss", "perplexity", "bits_per_byte")


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
    metrics: dict[str, Spread]  # METRICS, over the replicates' final values
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
        "metrics": {metric: spread([finals.get(i, {}).get(metric) for i in used]) for metric in METRICS},
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


def difference(a: Spread, b: Spread, eval_se: float | None = None) -> tuple[bool | None, str]:
    """Whether ``b``'s mean differs from ``a``'s (``b - a``) within noise, and that in words: judged by the seeds'
    spread, unless the evaluations' own standard error (``eval_se``) could explain the lead (``noise.over_seeds``)."""
    if a["mean"] is None or b["mean"] is None:
        return None, "no metric to compare"
    delta = b["mean"] - a["mean"]
    if a["sd"] is None or b["sd"] is None:
        return None, f"{delta:+.4f}; no seed spread to judge it by (give each configuration --seeds 2 or more)"
    welch = math.sqrt(a["sd"] ** 2 / a["n"] + b["sd"] ** 2 / b["n"])
    df = noise.welch_df(a["sd"], a["n"], b["sd"], b["n"])
    judged = noise.over_seeds(delta, welch, eval_se, seeds_to_resolve(delta, a["sd"], b["sd"]), df)
    return judged.within, judged.words


def seeds_to_resolve(delta: float, sd_a: float, sd_b: float, most: int = 1000) -> int | None:
    """How many seeds each configuration would need for a difference of ``delta`` to stand beyond seed noise, the
    spreads as measured: the least ``n`` with ``|delta| > t(df) sqrt((sd_a^2 + sd_b^2) / n)``, ``t`` Student's
    two-sided 95% critical value at the Welch degrees of freedom of ``n`` seeds each (bisection over ``n``); None for
    no difference, or past ``most``."""
    if delta == 0:
        return None

    def resolves(n: int) -> bool:
        df = noise.welch_df(sd_a, n, sd_b, n)
        threshold = noise.t_critical(df) if math.isfinite(df) else noise.NOISE
        return abs(delta) > threshold * math.sqrt((sd_a**2 + sd_b**2) / n)

    if not resolves(most):
        return None
    low, high = 1, most  # resolves(high); not resolves(low) (one seed has no spread)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if resolves(middle) else (middle, high)
    return max(2, high)
