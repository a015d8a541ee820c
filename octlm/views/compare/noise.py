"""Whether a difference is beyond noise: one record (``Verdict``) and one wording for every view (``show A B``,
``show SWEEP``, the report). A difference is the later minus the first (``show A B``: B - A; a sweep's best against
another: the best minus the other, negative when the best is lower). Its standard error is made of the noises it
carries: the evaluation's (the blocks read are a sample of the text: over clusters of blocks, documents or chunks,
Student's t at G - 1 degrees of freedom) and, for configurations, the seeds' (over seeds: paired by seed, or Welch's);
the two add in squares and their degrees of freedom are Satterthwaite's. The difference is beyond noise when its
two-sided p (Student's t, ``compare.student``) is below 5%, Holm-adjusted when one command makes several comparisons,
and never when the evaluation's own error alone could explain it (an intersection-union test: ``p`` is the larger of
the two tests' p). Every verdict says its numbers (difference, error, degrees of freedom, p, the 95% interval), the
effect in nats, in percent of the loss and in seed standard deviations, and names the noise its error carries; a
run-level verdict always says that seed noise is not in its error. Zero difference with zero error is "identical".
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from octlm.core.reporting import counted
from octlm.views.compare import student

if TYPE_CHECKING:
    from octlm.views.paired import Paired

MIN_EFFECT = 0.01  # nats: the default smallest difference worth finding (``show --min-effect``)
Level = Literal["run", "configuration"]  # a run-level verdict, or a configuration-level one


class Effect(TypedDict):
    """A difference's size three ways."""

    nats: float
    percent: float | None  # of the first's eval loss (its configuration's mean)
    seed_sds: float | None  # in the seeds' standard deviation (pooled over the two; None: no replicates to tell)


class Verdict(TypedDict):
    """A difference judged, with every number it rests on (``show A B --json``'s ``versus[].run`` and
    ``versus[].configuration``, ``show SWEEP --json``'s ``best_against_next`` and ``challengers[].verdict``):
    ``difference`` (the later minus the first, nats) and its standard error ``se``, made of the seeds' part
    ``seed_se`` and the evaluation's ``evaluation_se`` (over ``clusters`` clusters of ``cluster_unit``), at ``df``
    degrees of freedom (Satterthwaite's; null: the normal's), the two-sided 95% ``critical`` value of Student's t there,
    the two-sided ``p`` (the larger of the whole error's and the evaluation's alone) and ``p_adjusted`` (Holm's, over
    ``comparisons``), the 95% interval ``low`` to ``high``, ``within_noise``, ``evaluation_alone`` (the evaluation's
    error alone could explain the difference), ``identical`` (0 ± 0), the ``effect`` three ways, the ``seeds`` compared
    and the ``seeds_needed`` a configuration for 80% power at ``min_effect`` nats, and the ``words`` shown."""

    level: Literal[
        "run", "configuration"
    ]  # run: two trained models on the same blocks; configuration: over the seeds of each
    test: str  # paired (on blocks), unpaired, paired by seed, Welch
    difference: float | None  # the later minus the first, in nats
    se: float | None  # its standard error: the seeds' and the evaluation's parts added in squares
    seed_se: float | None  # the seeds' part (None: a run-level verdict)
    evaluation_se: float | None  # the evaluation's part (over clusters of blocks)
    df: float | None  # Satterthwaite's degrees of freedom of se (inf, null in --json: the normal's)
    critical: float | None  # two-sided 95% Student's t at df
    p: float | None  # two-sided, Student's t; the larger of the whole error's and the evaluation's alone
    p_adjusted: float | None  # Holm's, over the comparisons one command made (p itself when one)
    comparisons: int  # how many comparisons ``p_adjusted`` is adjusted over (a sweep's challengers: every pair)
    low: float | None  # the 95% interval: difference -/+ critical x se
    high: float | None
    within_noise: bool | None  # p_adjusted >= 5% (None: nothing to judge by)
    evaluation_alone: bool | None  # whether the evaluation's own error alone could explain the difference
    identical: bool  # a zero difference with a zero error: every block's loss the same (twins)
    blocks: int | None  # the blocks both evaluations read
    clusters: int | None  # G: the clusters of blocks the evaluation's part is over
    cluster_unit: str | None  # documents, chunks or blocks
    seeds: int | None  # configuration: the seeds paired, or the smaller group's
    effect: Effect | None
    min_effect: float  # the smallest difference of interest, in nats (--min-effect)
    seeds_needed: int | None  # seeds a configuration needs for 80% power at min_effect (None: not reachable)
    words: str


@dataclass(frozen=True)
class Error:
    """A difference's standard error by the noises it carries: the seeds' (``seed``, at ``seed_df``) and the
    evaluation's (``evaluation``, at ``evaluation_df``, over ``clusters`` clusters of ``cluster_unit``)."""

    seed: float | None = None
    seed_df: float = math.inf
    evaluation: float | None = None
    evaluation_df: float = math.inf
    clusters: int | None = None
    cluster_unit: str | None = None
    blocks: int | None = None

    @property
    def total(self) -> tuple[float, float] | None:
        """``(se, df)``: the parts added in squares, Satterthwaite's degrees of freedom (None: no part known)."""
        parts = [
            (se, df) for se, df in ((self.seed, self.seed_df), (self.evaluation, self.evaluation_df)) if se is not None
        ]
        if not parts:
            return None
        return math.sqrt(sum(se * se for se, _ in parts)), student.satterthwaite(parts)


@dataclass(frozen=True)
class Size:
    """What an effect is measured against: the first's loss (``reference``) and the seeds' pooled sd."""

    reference: float | None = None
    seed_sd: float | None = None
    min_effect: float = MIN_EFFECT


def paired_error(paired: Paired) -> Error:
    """The evaluation's error of a paired difference, over the clusters its blocks make (each block its own where
    the evaluations recorded none)."""
    found = cast(Mapping[str, Any], paired)  # clusters, cluster_unit and df: the clustered pair's (issue 46 item 1)
    clusters = int(found.get("clusters") or paired["blocks"])
    return Error(
        evaluation=paired["eval_loss_se"],
        evaluation_df=float(found.get("df") or clusters - 1),
        clusters=clusters,
        cluster_unit=str(found.get("cluster_unit") or "blocks"),
        blocks=paired["blocks"],
    )


def measured(level: Level, test: str, difference: float | None, error: Error, size: Size) -> Verdict:
    """The verdict's numbers (its words and any Holm adjustment come after: ``adjust``, then the wording)."""
    total = error.total if difference is not None else None
    se, df = total if total is not None else (None, None)
    critical = student.t_critical(df) if df is not None else None
    p, alone = _p(difference, error, se, df)
    identical = difference == 0 and se == 0
    return {
        "level": level,
        "test": test,
        "difference": difference,
        "se": se,
        "seed_se": error.seed,
        "evaluation_se": error.evaluation,
        "df": df,
        "critical": critical,
        "p": p,
        "p_adjusted": p,
        "comparisons": 1,
        "low": difference - critical * se
        if critical is not None and se is not None and difference is not None
        else None,
        "high": difference + critical * se
        if critical is not None and se is not None and difference is not None
        else None,
        "within_noise": None if p is None else p >= 1 - student.LEVEL,
        "evaluation_alone": alone,
        "identical": identical,
        "blocks": error.blocks,
        "clusters": error.clusters,
        "cluster_unit": error.cluster_unit,
        "seeds": None,
        "effect": _effect(difference, size),
        "min_effect": size.min_effect,
        "seeds_needed": None,
        "words": "",
    }


def _p(difference: float | None, error: Error, se: float | None, df: float | None) -> tuple[float | None, bool | None]:
    """The verdict's p (the larger of the whole error's and the evaluation's alone) and whether the evaluation's own
    error alone could explain the difference."""
    if difference is None or se is None or df is None:
        return None, None
    if se == 0:
        return (1.0 if difference == 0 else 0.0), difference == 0
    p = student.p_value(difference / se, df)
    if error.evaluation is None:
        return p, None
    alone = student.p_value(difference / error.evaluation, error.evaluation_df) if error.evaluation else 0.0
    return max(p, alone), alone >= 1 - student.LEVEL


def _effect(difference: float | None, size: Size) -> Effect | None:
    if difference is None:
        return None
    percent = 100 * difference / size.reference if size.reference else None
    return {"nats": difference, "percent": percent, "seed_sds": difference / size.seed_sd if size.seed_sd else None}


def adjust(verdicts: list[Verdict | None], family: int = 0) -> None:
    """Holm's adjustment over the comparisons one command made (each verdict with a p), in place: ``p_adjusted``,
    ``comparisons`` and ``within_noise`` by the adjusted p. ``family``: the comparisons to adjust over where more were
    looked at than judged (``student.holm``: a sweep's best was chosen among all its pairs)."""
    adjusted = student.holm([v["p"] if v is not None else None for v in verdicts], family)
    made = max(sum(p is not None for p in adjusted), family)
    for verdict, p in zip(verdicts, adjusted, strict=True):
        if verdict is not None and p is not None:
            verdict["p_adjusted"], verdict["comparisons"] = p, made
            verdict["within_noise"] = p >= 1 - student.LEVEL


def numbers(v: Verdict) -> str:
    """``t at 3 df, p = 0.00061 (0.0018 Holm-adjusted over 3 comparisons); 95% interval -1.1152 to -0.7352``."""
    df = "normal approximation" if v["df"] is None or math.isinf(v["df"]) else f"t at {v['df']:.3g} df"
    held = ""
    if v["comparisons"] > 1 and v["p_adjusted"] is not None:
        held = f" ({_p_text(v['p_adjusted'], '')} Holm-adjusted over {v['comparisons']} comparisons)"
    interval = (
        f"; 95% interval {v['low']:+.4f} to {v['high']:+.4f}" if v["low"] is not None and v["high"] is not None else ""
    )
    return f"{df}, {_p_text(v['p'], 'p ')}{held}{interval}"


def _p_text(p: float | None, name: str) -> str:
    """``p = 0.031``, ``p < 0.0001`` (``name`` ``"p "``), or the bare figure (``name`` ``""``)."""
    if p is None:
        return f"{name}unknown"
    if p < 1e-4:
        return f"{name}< 0.0001"
    return f"{name}= {p:.2g}" if name else f"{p:.2g}"


def side(v: Verdict, noise: str) -> str:
    """``beyond evaluation noise: 15.5x its standard error, past the critical 3.18``, or ``within ...``."""
    if v["se"] is None or v["difference"] is None:
        return "with no standard error to judge it by"
    ratio = abs(v["difference"]) / v["se"] if v["se"] else math.inf
    times = f"{ratio:.1f}x its standard error" if math.isfinite(ratio) else "with no spread at all"
    place = "past" if ratio > (v["critical"] or 0) else "inside"
    critical = (
        f", {place} the critical {v['critical']:.2f}" if v["critical"] is not None and math.isfinite(ratio) else ""
    )
    return f"{'within' if v['within_noise'] else 'beyond'} {noise}: {times}{critical}"


def effect_words(v: Verdict, reference: str) -> str:
    """``effect -0.9252 nats, -17.6% of EXP-008's loss, -2.4 seed SDs`` (each part only when known)."""
    found = v["effect"]
    if found is None:
        return ""
    parts = [f"{found['nats']:+.4f} nats"]
    if found["percent"] is not None:
        parts.append(f"{found['percent']:+.2f}% of {reference}")
    if found["seed_sds"] is not None:
        parts.append(f"{found['seed_sds']:+.2f} seed SDs")
    return "effect " + ", ".join(parts)


def direction(difference: float) -> str:
    return "lower" if difference < 0 else "higher" if difference > 0 else "the same"


def run_words(v: Verdict, first: str, other: str, test: str, hint: str, metric: str = "eval loss") -> str:
    """A run-level verdict: ``on these blocks, EXP-009's eval loss is lower than EXP-008's: -0.9252 ± 0.0597
    (paired, 16 blocks, 4 documents; t at 3 df, p = ...; 95% interval ...): beyond evaluation noise: ...; effect ...;
    seed noise is not in this error (...)``; ``test`` the unpaired fallback's reason."""
    d = v["difference"]
    if d is None:
        return "no eval loss to compare"
    if v["identical"]:
        return (
            f"on these blocks, {other} and {first} are identical: every block's loss the same (0 ± 0, {_sample(v)}); "
            f"seed noise is not in this error{hint}"
        )
    sample = _sample(v) if v["test"] == "paired" else test
    head = (
        f"on these blocks, {other}'s eval loss is {direction(d)} than {first}'s"
        if v["test"] == "paired"
        else (f"{other}'s final eval loss is {direction(d)} than {first}'s")
    )
    error = f" ± {v['se']:.4f}" if v["se"] is not None else ""
    said = f"{head}: {d:+.4f}{error} ({sample}; {numbers(v)}): {side(v, 'evaluation noise')}"
    return f"{said}; {effect_words(v, f'{first}' + chr(39) + 's loss')}; seed noise is not in this error{hint}"


def _sample(v: Verdict) -> str:
    """``paired, 16 blocks, 4 documents`` (``each block its own unit`` where no clusters were recorded)."""
    blocks = counted(v["blocks"] or 0, "block")
    if v["cluster_unit"] in (None, "blocks"):
        return f"paired, {blocks}, each its own unit: no clusters recorded, so the error may understate"
    return f"paired, {blocks}, {counted(v['clusters'] or 0, v['cluster_unit'][:-1])}"


def more_evaluation(scored_all: bool | None) -> str:
    """What lowers the evaluation's error: more of the validation split, or, where all of it was read, a larger
    split (which means training again: the split is part of the data)."""
    if scored_all:
        return (
            "the whole validation split was scored: only a larger one (data.validation_fraction, trained again) would"
        )
    return "more evaluation tokens (training.eval_tokens; 0 with eval_blocks 0 reads the whole split) would"
