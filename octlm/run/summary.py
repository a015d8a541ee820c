"""How a run ends, as ``train`` and ``resume`` report it: ``RunSummary`` (the summary line, and ``--json``: the run's
figures, its newest checkpoint and fingerprints, what the evaluations took) and ``Stopped`` (a run stopped by a
signal, which carries its summary, so that a script reading stdout learns how the run ended as it would of any other
end). Built by the session (``session``) and by a run with nothing left to do (``runner``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from octlm.core.errors import Interrupted
from octlm.core.records import RunRecord, TrainResult
from octlm.data.fingerprints import Fingerprints


@dataclass(frozen=True)
class RunSummary:
    """What ``train`` and ``resume`` report about a run: the summary line, and ``--json`` (``as_json``)."""

    id: str
    kind: str
    status: str  # completed | stopped (by --until) | complete (nothing to do) | interrupted (by a signal)
    start_step: int
    end_step: int
    steps: int  # training.steps
    tokens: int
    seconds: float
    tokens_per_second: float | None
    checkpoint: Path | None  # the newest checkpoint of the run
    metrics: RunRecord  # the newest value of each field of the run file
    fingerprints: Fingerprints
    run_id: int | None = None
    discarded: tuple[str, ...] | None = None  # what ``train --restart`` discarded, relative to the home
    eval_seconds: float = 0.0  # of ``seconds``, what the evaluations took
    eval_split: str = "validation"  # what the evaluations read ("training": no validation documents)

    def as_json(self) -> TrainResult:
        metrics = self.metrics
        shown: TrainResult = {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "run_id": self.run_id,
            "start_step": self.start_step,
            "step": self.end_step,
            "end_step": self.end_step,
            "steps": self.steps,
            "tokens": self.tokens,
            "train_loss": metrics.get("train_loss"),
            "eval_loss": metrics.get("eval_loss"),
            "perplexity": metrics.get("perplexity"),
            "bits_per_byte": metrics.get("bits_per_byte"),
            "eval_loss_se": metrics.get("eval_loss_se"),
            "perplexity_se": metrics.get("perplexity_se"),
            "bits_per_byte_se": metrics.get("bits_per_byte_se"),
            "eval_tokens": metrics.get("eval_tokens"),
            "eval_clusters": metrics.get("eval_clusters"),
            "eval_cluster_unit": metrics.get("eval_cluster_unit"),
            "epochs": metrics.get("epochs"),
            "seconds": round(self.seconds, 3),
            "tokens_per_second": self.tokens_per_second,
            "eval_seconds": round(self.eval_seconds, 3),
            "eval_split": self.eval_split,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "metrics": metrics,
            "data_hash": self.fingerprints.data,
            "tokenizer_hash": self.fingerprints.tokenizer,
            "config_hash": self.fingerprints.config,
        }
        if self.discarded is not None:
            shown["discarded"] = list(self.discarded)
        return shown


class Stopped(Interrupted):
    """A run stopped by a signal (exit 129, 130, 143), with what ``train --json`` and ``resume --json`` say of it
    (``summary``: status ``interrupted``, the step of the checkpoint kept, that checkpoint): the stop is said on
    stderr, and a script reading stdout learns how the run ended as it would of any other end."""

    def __init__(self, message: str, exit_code: int, summary: RunSummary):
        super().__init__(message, exit_code)
        self.summary = summary
