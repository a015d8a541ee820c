"""Two configurations compared over their seeds (``show A B`` between replicate groups, ``show SWEEP`` between
configurations), one way in both views.

The difference is that of the two groups' mean eval losses. Where the two share their seeds (a sweep gives every
configuration the same seeds; ``new --seeds`` from two bases too), the runs are paired by seed: the seed decides the
initialization and the data order, which move both configurations' losses alike (73% of the variance in a no-effect
sweep), so the error is the spread of the per-seed differences, ``sd_d / sqrt(n)`` at ``n - 1`` degrees of freedom;
else the groups are independent and the error is Welch's, ``sqrt(sd_a^2 / n_a + sd_b^2 / n_b)`` at Welch's degrees of
freedom. Every run read the same validation blocks, so that spread holds no evaluation noise: the evaluation's part is
the paired error of the two groups' mean per-block losses (``views.paired.group_pair``, over clusters of blocks),
added in squares (``noise.Error``). Where a run kept no checked evaluation block by block, the evaluation's part is the
groups' own errors combined as if independent (an upper bound). The seeds a configuration needs for 80% power at the
smallest effect of interest (``--min-effect``) come from the same two parts: the seeds' shrinks with more seeds, the
evaluation's does not (``student.seeds_for_power``). Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from octlm.config import flatten
from octlm.core.records.freeform import ConfigTree
from octlm.core.reporting import counted
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views import paired as pairing
from octlm.views.compare import noise, student
from octlm.views.compare.noise import Error, Size, Verdict
from octlm.views.paired import Paired

MOST_SEEDS = 1000  # what ``seeds_for_power`` looks up to (``new --seeds`` makes at most as many)


@dataclass(frozen=True)
class Member:
    """One seed of a configuration: its run's final eval loss, that evaluation's own standard error and, where kept
    (and checked), the evaluation block by block."""

    id: str
    seed: Any
    loss: float
    error: float | None = None
    blocks: BlockEvaluation | None = None


@dataclass(frozen=True)
class Design:
    """How the seeds were compared: the test, the difference, the seeds' error and its degrees of freedom, the members
    the means are over, and the seeds' error at ``n`` seeds a configuration (for the power)."""

    test: str
    sizes: str
    difference: float
    error: float
    df: float
    seeds: int
    used: tuple[list[Member], list[Member]]
    at: Callable[[int], tuple[float, float]]


@dataclass(frozen=True)
class Compared:
    """Two configurations compared: the verdict (its words come after Holm's adjustment: ``words``), the seeds it is
    over in words, and whether more seeds alone could never reach 80% power at the smallest effect of interest (the
    evaluation's error is too large for it)."""

    verdict: Verdict
    sizes: str
    evaluation_bound: bool


def configuration(firsts: Sequence[Member], others: Sequence[Member], size: Size) -> Compared | None:
    """``others - firsts`` as configurations, or None with fewer than two seeds on a side."""
    design = _design(firsts, others)
    if design is None:
        return None
    evaluation = _evaluation(*design.used)
    error = replace(evaluation, seed=design.error, seed_df=design.df)
    verdict = noise.measured("configuration", design.test, design.difference, error, size)
    verdict["seeds"] = design.seeds

    def at(n: int) -> tuple[float, float]:
        seed_se, seed_df = design.at(n)
        total = replace(evaluation, seed=seed_se, seed_df=seed_df).total
        return total if total is not None else (seed_se, seed_df)

    verdict["seeds_needed"] = student.seeds_for_power(size.min_effect, at, MOST_SEEDS)
    alone = evaluation.total  # the evaluation's part, which no number of seeds lowers
    bound = alone is not None and student.seeds_for_power(size.min_effect, lambda _: alone, 2) is None
    return Compared(verdict, design.sizes, bound)


def _design(firsts: Sequence[Member], others: Sequence[Member]) -> Design | None:
    """Paired by seed when one group's seeds (two or more) are all among the other's, else Welch's."""
    a, b = _by_seed(firsts), _by_seed(others)
    shared = [seed for seed in a if seed in b]
    if len(shared) >= 2 and len(shared) == min(len(a), len(b)):
        differences = [b[seed].loss - a[seed].loss for seed in shared]
        sd, n = statistics.stdev(differences), len(shared)
        return Design(
            "paired by seed",
            counted(n, "seed"),
            statistics.fmean(differences),
            sd / math.sqrt(n),
            n - 1.0,
            n,
            ([a[s] for s in shared], [b[s] for s in shared]),
            lambda m: (sd / math.sqrt(m), m - 1.0),
        )
    if len(a) < 2 or len(b) < 2:
        return None
    left, right = [m.loss for m in a.values()], [m.loss for m in b.values()]
    sd_a, sd_b = statistics.stdev(left), statistics.stdev(right)
    return Design(
        "Welch",
        f"{counted(len(b), 'seed')} against {len(a)}",
        statistics.fmean(right) - statistics.fmean(left),
        math.sqrt(sd_a**2 / len(a) + sd_b**2 / len(b)),
        student.welch_df(sd_a, len(a), sd_b, len(b)),
        min(len(a), len(b)),
        (list(a.values()), list(b.values())),
        lambda m: (math.sqrt((sd_a**2 + sd_b**2) / m), student.welch_df(sd_a, m, sd_b, m)),
    )


def _by_seed(members: Sequence[Member]) -> dict[Any, Member]:
    """One member a seed (the first), those with a finite loss."""
    found: dict[Any, Member] = {}
    for member in members:
        if math.isfinite(member.loss):
            found.setdefault(_hashable(member.seed), member)
    return found


def _hashable(seed: Any) -> Any:
    return seed if isinstance(seed, (int, float, str, type(None))) else repr(seed)


def _evaluation(firsts: list[Member], others: list[Member]) -> Error:
    """The evaluation's part of the difference of the groups' means: their mean per-block losses paired, else the
    groups' own errors combined as if independent (an upper bound), else none."""
    kept_a, kept_b = [m.blocks for m in firsts], [m.blocks for m in others]
    found = None
    if all(kept_a) and all(kept_b):
        found = group_pair(cast(list[BlockEvaluation], kept_a), cast(list[BlockEvaluation], kept_b))
    if found is not None and found["eval_loss_se"] is not None:
        return noise.paired_error(found)
    own = [statistics.fmean(e) for e in ([m.error for m in g if m.error is not None] for g in (firsts, others)) if e]
    return Error(evaluation=math.hypot(*own)) if len(own) == 2 else Error()


def group_pair(firsts: list[BlockEvaluation], others: list[BlockEvaluation]) -> Paired | None:
    """``views.paired.group_pair`` (the two groups' mean per-block losses, paired); until it is there, the same
    computed here: each group averaged block by block, then paired as two runs are."""
    found = getattr(pairing, "group_pair", None)
    if found is not None:
        return cast(Paired | None, found(firsts, others))
    averaged = [_averaged(group) for group in (firsts, others)]
    if averaged[0] is None or averaged[1] is None:
        return None
    return pairing.pair(averaged[0], averaged[1])


def _averaged(group: list[BlockEvaluation]) -> BlockEvaluation | None:
    head = group[0]
    if any(e.digest != head.digest or e.targets != head.targets for e in group):
        return None
    nats = [math.fsum(values) / len(group) for values in zip(*(e.nats for e in group), strict=True)]
    return replace(head, nats=nats)


def advice(compared: Compared, scored_all: bool | None) -> str:
    """What more seeds would do: the seeds a configuration needs for 80% power at the smallest effect of interest, or
    why more seeds alone would not get there."""
    verdict = compared.verdict
    effect = f"80% power to find {verdict['min_effect']:.4f} nats (--min-effect)"
    if verdict["seeds_needed"] is not None:
        have = f", {verdict['seeds']} now" if verdict["seeds"] else ""
        return f"{effect} needs about {counted(verdict['seeds_needed'], 'seed')} a configuration{have}"
    evaluation = verdict["evaluation_se"]
    if compared.evaluation_bound and evaluation is not None:
        return (
            f"no number of seeds gives {effect}: the evaluation's own error (± {evaluation:.4f}) is too large for it; "
            f"{noise.more_evaluation(scored_all)}"
        )
    return f"more than {MOST_SEEDS:,} seeds a configuration would be needed for {effect}"


def words(verdict: Verdict, first: str, other: str, sizes: str, more: str, metric: str = "eval loss") -> str:
    """``as configurations, EXP-009's mean eval loss is lower than EXP-008's: -0.0523 ± 0.0130 (paired by seed, 3
    seeds paired; the seeds' ± 0.0126 and the evaluation's ± 0.0009 over 4 documents; t at ..., p = ...): beyond
    seed and evaluation noise: ... (seed noise dominates); effect ...; 80% power ... needs about N seeds``."""
    d, se = verdict["difference"], verdict["se"]
    if d is None or se is None:
        return f"no {metric} over the seeds to compare"
    head = f"as configurations, {other}'s mean {metric} is {noise.direction(d)} than {first}'s: {d:+.4f} ± {se:.4f}"
    parts = f"{verdict['test']}, {sizes}; {_parts(verdict)}; {noise.numbers(verdict)}"
    past = verdict["critical"] is not None and abs(d) > verdict["critical"] * se  # beyond, by the whole error's test
    if verdict["evaluation_alone"] and verdict["within_noise"] and past:
        judged = f"within noise: the evaluation's own error alone (± {verdict['evaluation_se']:.4f}) could explain it"
    else:
        seed, evaluation = verdict["seed_se"] or 0.0, verdict["evaluation_se"] or 0.0
        dominant = "seed noise" if seed >= evaluation else "evaluation noise"
        judged = f"{noise.side(verdict, 'seed and evaluation noise')} ({dominant} dominates)"
    effect = noise.effect_words(verdict, f"{first}'s mean loss")
    return f"{head} ({parts}): {judged}; {effect}" + (f"; {more}" if more and verdict["within_noise"] else "")


def _parts(verdict: Verdict) -> str:
    """``the seeds' ± 0.0126 and the evaluation's ± 0.0009 over 4 documents``."""
    seeds = f"the seeds' ± {verdict['seed_se']:.4f}" if verdict["seed_se"] is not None else "no seed spread"
    evaluation = verdict["evaluation_se"]
    if evaluation is None:
        return f"{seeds}; the evaluation's own error unknown"
    where = (
        f" over {counted(verdict['clusters'], verdict['cluster_unit'][:-1])}"
        if verdict["clusters"] and verdict["cluster_unit"]
        else " (unpaired: not every run kept a checked evaluation block by block)"
    )
    return f"{seeds} and the evaluation's ± {evaluation:.4f}{where}"


def scored_all(config: ConfigTree, blocks: int | None) -> bool | None:
    """Whether an evaluation of ``blocks`` blocks read the whole validation split its config asked of: all of it
    asked (``eval_tokens`` and ``eval_blocks`` 0), or fewer blocks read than asked (the split ran out). None: not
    known."""
    flat = flatten(dict(config))
    tokens, wanted, width = (
        flat.get("training.eval_tokens"),
        flat.get("training.eval_blocks"),
        flat.get("model.context_length"),
    )
    if not isinstance(tokens, int) or not isinstance(wanted, int) or not isinstance(width, int) or width <= 0:
        return None
    asked = -(-tokens // width) if tokens else wanted
    if asked == 0:
        return True
    return None if blocks is None else blocks < asked
