"""The documents ``--json`` writes that cross layers, each spelled once as a TypedDict: a use case builds it, the
command writes it, ``docs/reference/json.md`` is generated from it and a test holds the output to it. The figures
of an evaluation carry the same names everywhere: ``train --json``, ``eval --json`` and ``show --json`` alike
(``step``, ``eval_loss``, ``eval_loss_se``, ...)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from octlm.core.records.runs import RunRecord, SourceFigures


class ShownFingerprints(TypedDict):
    """A run's fingerprints, as ``show ID`` says them (None: not recorded): its config's, its data's and its
    tokenizer's; what ``show ID --json`` writes and the trackers' export writes beside a run's records."""

    config: str | None
    data: str | None
    tokenizer: str | None


class Figures(TypedDict):
    """An evaluation's figures, each with its standard error over clusters of blocks (None: one cluster), and the
    clusters: how many (G: judge with Student's t at G-1 degrees of freedom) and what they are (documents, chunks of
    8 consecutive blocks, or blocks; None: a run made before octlm said, its errors over blocks)."""

    eval_loss: float | None
    perplexity: float | None
    bits_per_byte: float | None
    eval_loss_se: float | None
    perplexity_se: float | None
    bits_per_byte_se: float | None
    eval_tokens: int | None
    eval_clusters: int | None
    eval_cluster_unit: str | None


class TrainResult(Figures):
    """``octlm train --json`` and ``resume --json``: how the run ended, its newest figures, where it is kept. Written
    when a signal stops the run too (status ``interrupted``, at the step of the checkpoint kept; exit 129, 130, 143)."""

    id: str
    kind: str  # train | resume
    status: str  # completed | stopped (by --until) | complete (nothing to do) | interrupted (by a signal)
    run_id: int | None
    start_step: int
    step: int  # the step it ended at
    end_step: int  # the same (an older name, kept)
    steps: int  # training.steps
    tokens: int
    train_loss: float | None
    epochs: float | None
    seconds: float
    tokens_per_second: float | None
    eval_seconds: float
    eval_split: str  # validation; training when the corpus has no validation documents (data.validation_fraction 0)
    checkpoint: str | None
    metrics: RunRecord  # the newest value of each field of the run file
    data_hash: str
    tokenizer_hash: str
    config_hash: str
    discarded: NotRequired[list[str]]  # train --restart: what it discarded, relative to the home


class EvalResult(Figures):
    """``octlm eval --json``: the checkpoint evaluated, on what, and its figures."""

    id: str
    step: int
    checkpoint: str
    on: list[str]  # the sources, or ["validation"]
    blocks: int
    eval_seconds: float
    eval_sources: NotRequired[dict[str, SourceFigures]]  # with several sources: each one's figures
    summary: str


class Problem(TypedDict):
    """One thing doctor found: what kind, where (an ID, a file, a run), what exactly, and whether it was or can be
    repaired."""

    kind: str
    where: str
    detail: str
    repaired: bool
    repairable: bool


class Checkup(TypedDict):
    """What ``octlm doctor --json`` writes."""

    home: str
    repair: bool
    problems: list[Problem]
    healthy: bool
    advice: str  # the closing line: healthy, or what to do about the problems left
