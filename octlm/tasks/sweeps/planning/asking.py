"""Search beyond grid and random: Optuna's samplers through their ask-and-tell interface. Optuna is imported here,
inside the functions, and only by a sweep that uses it (``octlm --help``, ``show`` and ``new`` never load it).

The registry is the study: each ask rebuilds an in-memory study from the sweep's configurations (finished ones
told with their metric, the mean over their replicates; failed ones as failed; those still queued or running as
running, so a constant liar keeps new asks away from them), with the sampler seeded by the sweep's seed plus the
number of configurations so far, so the same history asks the same values. The trials stay octlm experiments.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from octlm.core.errors import BadInput
from octlm.core.records.freeform import ConfigTree
from octlm.store.sweeps.records import QueuedTrial, SweepSpec

FINISHED = ("done", "failed", "stopped")


def ask(
    spec: SweepSpec, finished: Sequence[tuple[ConfigTree, float | None]], count: int, pending: Sequence[ConfigTree] = ()
) -> list[ConfigTree]:
    """``count`` new configurations from the sweep's sampler, given what finished (params, value; None: failed)
    and what is ``pending``."""
    if count <= 0:
        return []
    try:
        import optuna
    except ImportError:
        raise BadInput(f"--sampler {spec['sampler']} needs Optuna: pip install 'octlm[sweeps]'") from None

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    state = optuna.trial.TrialState
    distributions = _distributions(optuna, spec)
    seed = int(spec["seed"]) + len(finished) + len(pending)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True))
    for params, value in finished:
        told = state.COMPLETE if value is not None else state.FAIL
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value, state=told))
    for params in pending:
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, state=state.RUNNING))
    return [_rounded(study.ask(distributions).params, spec) for _ in range(count)]


def _distributions(optuna: Any, spec: SweepSpec) -> dict[str, Any]:
    found: dict[str, Any] = {
        key: optuna.distributions.CategoricalDistribution(values) for key, values in spec["grid"].items()
    }
    for key, bounds in spec["ranges"].items():
        if bounds["int"]:
            found[key] = optuna.distributions.IntDistribution(
                int(bounds["low"]), int(bounds["high"]), log=bounds["log"]
            )
        else:
            found[key] = optuna.distributions.FloatDistribution(bounds["low"], bounds["high"], log=bounds["log"])
    return found


def _rounded(params: ConfigTree, spec: SweepSpec) -> ConfigTree:
    """Floats of ranges to four significant digits (a config a person reads), as the random draws are."""
    return {k: float(f"{v:.4g}") if k in spec["ranges"] and isinstance(v, float) else v for k, v in params.items()}


def history(trials: Sequence[QueuedTrial]) -> tuple[list[tuple[ConfigTree, float | None]], list[ConfigTree], int]:
    """The sweep's configurations as a study sees them: finished (params, mean value or None), pending, and how
    many there are in all."""
    groups: dict[str, list[QueuedTrial]] = {}
    for trial in trials:
        groups.setdefault(trial["group_key"], []).append(trial)
    finished, pending = [], []
    for members in groups.values():
        params = members[0]["params"] or {}
        if all(m["status"] in FINISHED for m in members):
            values = [m["value"] for m in members if m["status"] != "failed" and m["value"] is not None]
            finished.append((params, statistics.fmean(values) if values else None))
        else:
            pending.append(params)
    return finished, pending, len(groups)
