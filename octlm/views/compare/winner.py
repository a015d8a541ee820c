"""A sweep's winner, judged as a reviewer would (torch-free): every other configuration at the best's step against
the best (``challengers``: as configurations over their seeds where each has two or more, paired by seed, since a
sweep gives every configuration the same seeds; as two runs on the same blocks where each has one), Holm-adjusted
over every pair of configurations, and which of them are within noise of it; the best's expected optimism; the best
so far named for what it is, the luckiest single trial; and the advice to confirm the best on fresh seeds.

**Holm over every pair.** The best is the configuration whose mean came out lowest, so "the best against each
other" are comparisons chosen after looking at all of them: the best against the worst is the largest of the
``k(k-1)/2`` pairwise differences. Holm's adjustment over the ``k - 1`` challengers alone called a no-effect sweep's
best beyond noise of some other configuration in 7.5% of 1,500 simulated sweeps of 6 configurations x 3 seeds (8.2%
of 500 drawn from real runs, ``benchmarks/calibration.py``); the challengers are adjusted as members of the family
of all ``k(k-1)/2`` pairs (``student.holm``'s ``family``): 2.6% of the same 1,500 sweeps.

**Optimism.** The best of ``k`` configurations is the one whose mean came out lowest, so its mean is biased low:
where the configurations are alike, by the expected largest of ``k`` standard normal draws (``e_k``,
``student.expected_maximum``) times the standard error of a configuration's mean, ``sd / sqrt(n)`` over ``n``
seeds, i.e. ``e_k / sqrt(n)`` seed standard deviations (0.73 for 6 configurations of 3 seeds; less where the best
is truly better, so it is an upper bound). The best single trial of ``T`` is the best of ``T`` draws: ``e_T`` seed
standard deviations (1.82 for 18). Fresh seeds, drawn after the choice, carry no such bias.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from octlm.core.records.freeform import ConfigTree
from octlm.core.reporting import counted
from octlm.views.compare import comparable, noise, seeds, student
from octlm.views.compare.noise import Size, Verdict
from octlm.views.paired import pair


class Challenger(TypedDict):
    """Another configuration at the best's step, against the best: the best minus it (negative: the best lower)."""

    rank: int
    params: ConfigTree  # the configuration: {config key: value}
    comparable: bool
    verdict: Verdict | None
    words: str


class Optimism(TypedDict):
    """How far the best's figures are expected to lie below the truth by chance alone, where the configurations are
    alike (module docstring)."""

    configurations: int  # k: those at the best's step
    seeds: int  # n: the best's
    expected_maximum: float  # e_k: the mean of the largest of k standard normal draws
    seed_sds: float  # e_k / sqrt(n): the best's mean's optimism, in seed standard deviations
    nats: float | None  # that in nats, by the seeds' pooled sd (None: one seed each, no spread known)
    trials: int  # T: the finished trials the best so far is the best of
    luckiest_seed_sds: float  # e_T: the best single trial's optimism, in seed standard deviations


@dataclass(frozen=True)
class Entry:
    """A configuration as the verdicts need it: its rank, its params in words, its seeds' members, the fingerprints
    of what it trained on and its data sources."""

    rank: int
    params: ConfigTree  # the configuration: {config key: value}
    members: list[seeds.Member]
    prints: Mapping[str, str | None] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    @property
    def named(self) -> str:
        return f"rank {self.rank} ({', '.join(f'{k}={v}' for k, v in self.params.items()) or 'the base config'})"


def challengers(entries: Sequence[Entry], metric: str, size: Size, scored_all: bool | None) -> list[Challenger]:
    """Every entry after the first (the best) against the best, Holm-adjusted over every pair of the entries (the
    module says why), each in words."""
    best = entries[0]
    found = [_against(best, other, metric, size) for other in entries[1:]]
    noise.adjust([verdict for verdict, _, _ in found], pairs(len(entries)))
    said: list[Challenger] = []
    for other, (verdict, compared, why) in zip(entries[1:], found, strict=True):
        words = why or _words(verdict, compared, metric, scored_all, f"rank {other.rank}")
        if verdict is not None:
            verdict["words"] = words
        said.append(
            {"rank": other.rank, "params": other.params, "comparable": not why, "verdict": verdict, "words": words}
        )
    return said


def pairs(k: int) -> int:
    """The pairs of ``k`` configurations, ``k(k-1)/2``: the comparisons the choice of the best was made from."""
    return k * (k - 1) // 2


def _against(best: Entry, other: Entry, metric: str, size: Size) -> tuple[Verdict | None, seeds.Compared | None, str]:
    """The best minus ``other``: as configurations (two seeds or more each), else as two runs on the same blocks
    (one each, the eval loss); or why not."""
    blocks = [e.members[0].blocks if e.members else None for e in (other, best)]
    same = blocks[0] is not None and blocks[1] is not None and blocks[0].digest == blocks[1].digest
    ids = [e.members[0].id if e.members else "ID" for e in (other, best)]
    why = comparable.reason(ids[0], ids[1], (other.prints, best.prints), same, best.sources)
    if why is not None:
        return None, None, why
    reference = statistics.fmean(m.loss for m in other.members) if other.members else None
    sized = Size(reference, _pooled([best, other]), size.min_effect)
    if len(best.members) >= 2 and len(other.members) >= 2:
        compared = seeds.configuration(other.members, best.members, sized)
        return (compared.verdict if compared else None), compared, ""
    found = pair(blocks[0], blocks[1]) if metric == "eval_loss" else None
    if found is None:
        return None, None, ""
    difference = found["eval_loss_difference"]
    return noise.measured("run", "paired", difference, noise.paired_error(found), sized), None, ""


def _words(
    verdict: Verdict | None, compared: seeds.Compared | None, metric: str, scored_all: bool | None, other: str
) -> str:
    shown = metric.replace("_", " ")
    if verdict is None:
        return f"nothing to judge it by: no {shown} over two seeds or more, nor checked evaluations of the same blocks"
    if compared is not None:
        more = seeds.advice(compared, scored_all)
        return seeds.words(verdict, other, "the best", compared.sizes, more, shown)
    hint = "; one seed each: whether the configuration is better, seeds say"
    said = noise.run_words(verdict, other, "the best", "paired", hint, shown)
    return said + (f"; {noise.more_evaluation(scored_all)} narrow it" if verdict["within_noise"] else "")


def _pooled(entries: Sequence[Entry]) -> float | None:
    """The seeds' standard deviation pooled over the entries with two seeds or more (None: none has)."""
    variances = [statistics.variance([m.loss for m in e.members]) for e in entries if len(e.members) >= 2]
    return math.sqrt(statistics.fmean(variances)) if variances else None


def optimism(entries: Sequence[Entry], trials: int) -> Optimism | None:
    """The best's expected optimism among ``entries`` (the best first), and the best single trial's among
    ``trials``."""
    if not entries:
        return None
    k, n = len(entries), max(1, len(entries[0].members))
    expected = student.expected_maximum(k)
    pooled = _pooled(entries)
    return {
        "configurations": k,
        "seeds": n,
        "expected_maximum": expected,
        "seed_sds": expected / math.sqrt(n),
        "nats": expected / math.sqrt(n) * pooled if pooled is not None else None,
        "trials": trials,
        "luckiest_seed_sds": student.expected_maximum(trials),
    }


def notes(found: list[Challenger], best: Entry, bias: Optimism | None, name: str) -> list[str]:
    """The winner in words: those within noise of it, its optimism, the advice to confirm it on fresh seeds."""
    said = []
    if found:
        within = [f"rank {c['rank']}" for c in found if c["verdict"] is not None and c["verdict"]["within_noise"]]
        k = len(found) + 1
        adjusted = (
            f", Holm-adjusted over the {pairs(k)} pairs of {k} configurations the best was chosen from"
            if len(found) > 1
            else ""
        )
        tied = ", ".join(within) if within else "none"
        said.append(f"within noise of the best (each against it{adjusted}): {tied}")
    if bias is not None and bias["configurations"] > 1:
        nats = f" ({bias['nats']:.4f} nats)" if bias["nats"] is not None else ""
        said.append(
            f"expected optimism: picked from {counted(bias['configurations'], 'configuration')} of "
            f"{counted(bias['seeds'], 'seed')}, the best's mean lies by chance alone about {bias['seed_sds']:.2f} seed "
            f"SDs{nats} below its true mean where the configurations are alike (the expected largest of "
            f"{bias['configurations']} standard normal draws, {bias['expected_maximum']:.2f}, over the square root "
            f"of {counted(bias['seeds'], 'seed')})"
        )
    more = max(bias["seeds"] + 3 if bias else 3, 3)
    said.append(
        f"confirm {best.named} on fresh seeds, whose results carry no selection: `octlm sweep extend {name} --seeds "
        f"{more}` (new seeds for every configuration)"
    )
    return said


def luckiest(value: float, trials: int, bias: Optimism | None) -> str:
    """``best so far: 4.1234 after 18 finished trials, the luckiest single trial ...``."""
    lucky = (
        f"by chance alone about {bias['luckiest_seed_sds']:.2f} seed SDs below its configuration's mean (the expected "
        f"largest of {trials} standard normal draws)"
        if bias is not None and trials > 1
        else "one draw"
    )
    return (
        f"best so far: {value:.4f} after {counted(trials, 'finished trial')}: the luckiest single trial, {lucky}; "
        "the configurations' means rank them"
    )
