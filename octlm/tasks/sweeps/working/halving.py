"""Successive halving with exact promotion (``sweep new --halving 100,400,1600 --keep 0.5``). Torch-free.

Every trial's ``training.steps`` is the last rung, so every rung is a point of one exact trajectory: a trial
trains to the first rung (``resume --until RUNG``), and once no trial of that rung is queued or running, the
best ``keep`` fraction of the configurations (at least one), ranked by the mean of their replicates' metric at
the rung (lower is better), is promoted by resuming to the next rung; the rest stop there. A configuration with
a failed replicate is ranked last and not promoted. ``decide`` is pure: the queue calls it inside the
transaction that records a trial's end (``Registry.settle_claim``), so each rung is decided once, by whoever ends it.

A rung is never decided again. A trial that ends at a rung decided before it (a failed replicate queued again by
``sweep retry``) is placed where the decision would have put its configuration had it been known then: ranked
among the decision's configurations by its replicates' mean, it is promoted with its replicates (stopped ones
too) to the next rung when it falls within the best ``keep`` fraction, and stopped otherwise; the decision's
row is amended (the configuration marked ``late``), and no configuration promoted then is taken back.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from octlm.store.sweeps.records import DecisionRow, RankedGroup, SweepRow, TrialRow
from octlm.store.sweeps.rows import Decision

WAITING = ("queued", "running")


def decide(sweep: SweepRow, trials: list[TrialRow], decided: Sequence[DecisionRow] = ()) -> Decision | None:
    """The decision due on the lowest rung that is complete and not yet decided, or the placement of trials that
    ended at a rung ``decided`` before them (``late``); None when nothing is due."""
    spec = sweep["spec"] or {}
    rungs, keep = spec.get("halving") or [], float(spec.get("keep") or 0.5)
    taken = {int(row["rung"]): row for row in decided}
    for rung in range(len(rungs) - 1):
        at = [t for t in trials if t["rung"] == rung]
        due = _late(taken[rung], at, keep) if rung in taken else _first(at, keep)
        if due is not None:
            ranking, promoted, stopped, late = due
            return Decision(rung, rungs[rung], ranking, promoted, rungs[rung + 1], stopped, late)
    return None


Due = tuple[list[RankedGroup], list[str], list[str], bool]  # ranking, promoted, stopped, late


def _first(at: list[TrialRow], keep: float) -> Due | None:
    """The rung's decision, once none of its trials waits and one of them is done."""
    if any(t["status"] in WAITING for t in at) or not any(t["status"] == "done" for t in at):
        return None
    ranking = rank(at)
    best = max(1, math.floor(len(ranking) * keep))
    eligible = [group for group in ranking if group["value"] is not None][:best]
    for group in ranking:
        group["promoted"] = group in eligible
    promoted = [experiment for group in eligible for experiment in group["trials"]]
    stopped = [t["experiment_id"] for t in at if t["status"] == "done" and t["experiment_id"] not in promoted]
    return ranking, promoted, stopped, False


def _late(decision: DecisionRow, at: list[TrialRow], keep: float) -> Due | None:
    """The first configuration with a trial done at a rung decided before it, none of its replicates waiting:
    ranked among the decision's configurations, promoted (all its replicates at the rung) or stopped."""
    ready = [
        key
        for key in dict.fromkeys(t["group_key"] for t in at if t["status"] == "done")
        if not any(t["status"] in WAITING for t in at if t["group_key"] == key)
    ]
    if not ready:
        return None
    members = [t for t in at if t["group_key"] == ready[0]]
    (placed,) = rank(members, ended=("done", "stopped"))  # its stopped replicates were measured at the rung
    placed["late"] = True
    before: list[RankedGroup] = list(decision["ranking"] or [])
    order = {group.get("group"): index for index, group in enumerate(before)}
    ranking = sorted(
        [*(g for g in before if g.get("group") != placed["group"]), placed],
        key=lambda g: (g["value"] is None, g["value"] or 0.0, order.get(g["group"], len(order))),
    )
    best = max(1, math.floor(len(ranking) * keep))
    placed["promoted"] = any(g is placed for g in [g for g in ranking if g["value"] is not None][:best])
    promoted = [*(decision["promoted"] or []), *(placed["trials"] if placed["promoted"] else [])]
    stopped = [t["experiment_id"] for t in members if t["status"] == "done" and not placed["promoted"]]
    return ranking, promoted, stopped, True


def rank(trials: list[TrialRow], ended: tuple[str, ...] = ("done",)) -> list[RankedGroup]:
    """The configurations of one rung, best first: {group, params, trials, values, value (their mean; None when
    one failed, or is not ``ended`` there), sd}; ties by queue order."""
    groups: dict[str, list[TrialRow]] = {}
    for trial in sorted(trials, key=lambda t: t["position"]):
        groups.setdefault(trial["group_key"], []).append(trial)
    ranked: list[RankedGroup] = []
    for key, members in groups.items():
        values = [m["value"] for m in members]
        known = [v for v in values if v is not None]
        complete = len(known) == len(values) and all(m["status"] in ended for m in members)
        ranked.append(
            {
                "group": key,
                "params": members[0]["params"],
                "trials": [m["experiment_id"] for m in members],
                "values": values,
                "value": statistics.fmean(known) if complete else None,
                "sd": statistics.stdev(known) if complete and len(known) > 1 else None,
            }
        )
    order = {key: index for index, key in enumerate(groups)}
    return sorted(ranked, key=lambda g: (g["value"] is None, g["value"] or 0.0, order[g["group"]]))
