"""Successive halving with exact promotion (``sweep new --halving 100,400,1600 --keep 0.5``). Torch-free.

Every trial's ``training.steps`` is the last rung, so every rung is a point of one exact trajectory: a trial
trains to the first rung (``resume --until RUNG``), and once no trial of that rung is queued or running, the
best ``keep`` fraction of the configurations (at least one), ranked by the mean of their replicates' metric at
the rung (lower is better), is promoted by resuming to the next rung; the rest stop there. A configuration with
a failed replicate is ranked last and not promoted. ``decide`` is pure: the queue calls it inside the
transaction that records a trial's end (``Registry.settle_claim``), so each rung is decided once, by whoever ends it.
"""

from __future__ import annotations

import math
import statistics

from octlm.store.sweeps.records import RankedGroup, SweepRow, TrialRow
from octlm.store.sweeps.rows import Decision

WAITING = ("queued", "running")


def decide(sweep: SweepRow, trials: list[TrialRow]) -> Decision | None:
    """The decision due on the lowest rung that is complete and not yet decided, or None."""
    spec = sweep["spec"] or {}
    rungs, keep = spec.get("halving") or [], float(spec.get("keep") or 0.5)
    for rung in range(len(rungs) - 1):
        at = [t for t in trials if t["rung"] == rung]
        if any(t["status"] in WAITING for t in at) or not any(t["status"] == "done" for t in at):
            continue
        ranking = rank(at)
        best = max(1, math.floor(len(ranking) * keep))
        eligible = [group for group in ranking if group["value"] is not None][:best]
        for group in ranking:
            group["promoted"] = group in eligible
        promoted = [experiment for group in eligible for experiment in group["trials"]]
        return Decision(rung, rungs[rung], ranking, promoted, rungs[rung + 1])
    return None


def rank(trials: list[TrialRow]) -> list[RankedGroup]:
    """The configurations of one rung, best first: {group, params, trials, values, value (their mean; None when
    one failed), sd}; ties by queue order."""
    groups: dict[str, list[TrialRow]] = {}
    for trial in sorted(trials, key=lambda t: t["position"]):
        groups.setdefault(trial["group_key"], []).append(trial)
    ranked: list[RankedGroup] = []
    for key, members in groups.items():
        values = [m["value"] for m in members]
        known = [v for v in values if v is not None]
        complete = len(known) == len(values) and all(m["status"] == "done" for m in members)
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
