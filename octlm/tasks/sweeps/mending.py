"""A sweep that heals: ``sweep retry`` queues failed trials (and, asked, the ones halving stopped) to run once more.
A failed trial goes back to the step it was going to; a stopped one is promoted to the sweep's last rung, past every
decision (so no rung is decided twice). Its worker continues it from its newest checkpoint where it has one, exactly
as a takeover does. One transaction (``Registry.requeue``), the reason each trial stopped before kept in the sweep's
history, the record beside the registry kept too. Torch-free."""

from __future__ import annotations

from typing import Any

from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.store import kept
from octlm.store.registry import Registry

RETRYABLE = ("failed", "stopped")


def retry(home: Home, name: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    """Queue again the trials of ``name`` in ``statuses`` that no worker holds; the history event it recorded
    (``trials`` empty when there was nothing to retry)."""
    unknown = [status for status in statuses if status not in RETRYABLE]
    if unknown or not statuses:
        raise BadInput(f"sweep retry takes --failed and --stopped, not {', '.join(unknown) or 'nothing'}")
    with Registry(home.registry) as registry:
        sweep = registry.sweep(name)
        rungs = list(((sweep or {}).get("spec") or {}).get("halving") or [])
        event = registry.requeue(name, statuses, lambda trial: _going(trial, rungs))
        if event["trials"]:
            kept.keep_sweep(home, registry, name)  # what survives the registry's loss
    return {"name": name, **event}


def _going(trial: dict[str, Any], rungs: list[int]) -> tuple[int, int] | None:
    """(step, rung) a retried trial trains to: a failed one where it was going; a stopped one to the last rung."""
    if trial["status"] == "failed":
        return int(trial["target_step"]), int(trial["rung"])
    if rungs and trial["target_step"] < rungs[-1]:
        return int(rungs[-1]), len(rungs) - 1
    return None  # stopped at the last step already: nothing more to train
