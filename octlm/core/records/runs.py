"""What one logged step of a run says, spelled once.

A ``RunRecord`` is written by the training loop (every ``training.log_interval`` steps, with the evaluation's
fields at evaluation steps), timed by the session, appended to ``runs/<ID>.jsonl``, kept as a row of the
registry's ``metrics`` table, exported with the run file, and read by the views. Every one of them takes its
field names from here (``RUN_RECORD_FIELDS``), so a field added here reaches them all.
"""

from __future__ import annotations

from typing import TypedDict


class SourceFigures(TypedDict):
    """One data source's part of an evaluation over several (a record's and ``eval --json``'s ``eval_sources``, by
    the source's name): the loss over its own blocks and its standard error over its own clusters, in the
    evaluation's unit, and the clusters and target tokens it is over."""

    eval_loss: float
    eval_loss_se: float | None  # None: one cluster
    eval_tokens: int
    eval_clusters: int
    eval_cluster_unit: str  # documents, chunks or blocks


class RunRecord(TypedDict, total=False):
    step: int  # the step just taken (1-based: after the first step, 1)
    tokens: int  # tokens trained on so far
    lr: float  # the learning rate of that step
    train_loss: float  # the mean training loss of the steps since the previous record
    eval_loss: float  # at evaluation steps: the held-out loss (nats per target token)
    perplexity: float  # exp(eval_loss)
    bits_per_byte: float  # eval nats / (ln 2 x target bytes)
    eval_loss_se: float | None  # the standard error of eval_loss over the evaluation's clusters (None: one)
    perplexity_se: float | None  # of perplexity (perplexity x eval_loss_se)
    bits_per_byte_se: float | None  # of bits_per_byte over the clusters
    eval_tokens: int  # the target tokens the evaluation read
    eval_clusters: int  # the clusters of blocks the errors are over (G: judged with Student's t at G-1 df)
    eval_cluster_unit: str  # what they are: documents, chunks (of 8 consecutive blocks) or blocks (train.evaluation)
    eval_seconds: float  # what the evaluation took
    eval_sources: dict[str, SourceFigures]  # with several data sources: each one's figures, by its name
    gradient_norm: float  # the global gradient norm of that step, before clipping
    epochs: float  # the blocks read so far over the training blocks (with data.sampling: epochs, epochs completed)
    data_blocks: int  # the blocks read so far (all ranks' global batches)
    data_receipt: str  # the rolling hash of every block index read so far, in order (16 hex digits)
    skipped_steps: int  # under training.spike_guard: skip, the steps whose update was left out so far
    elapsed_seconds: float  # training time so far, all processes of the run together
    tokens_per_second: float  # of this process's run since it started


class RunTotals(TypedDict):
    """What a training run's summary says of the whole run rather than of one step (its own time, where a record's
    ``elapsed_seconds`` counts every run so far): the session keeps it under ``TOTALS`` in its run row's
    ``final_metrics``, so that ``show ID`` opens with the figures ``train`` and ``resume`` ended with."""

    seconds: float  # the session's, from its start to its end
    tokens_per_second: float | None  # the tokens it trained over those seconds
    eval_seconds: float  # of those seconds, what its evaluations took
    eval_split: str  # what its evaluations read: validation, or training (the corpus has no validation documents)


TOTALS = "totals"  # the key of a run's ``RunTotals`` in its row's ``final_metrics`` (beside the newest record's fields)
RUN_RECORD_FIELDS: tuple[str, ...] = tuple(RunRecord.__annotations__)  # in the order above
TEXT_FIELDS = ("data_receipt", "eval_cluster_unit")
NESTED_FIELDS = ("eval_sources",)  # in the run file only: the registry's metrics table holds the others
NUMBER_FIELDS = tuple(n for n in RUN_RECORD_FIELDS if n not in (*TEXT_FIELDS, *NESTED_FIELDS))  # views compute
METRIC_FIELDS = tuple(name for name in RUN_RECORD_FIELDS if name not in NESTED_FIELDS)
EVALUATION_FIELDS = (
    "eval_loss",
    "perplexity",
    "bits_per_byte",
    "eval_loss_se",
    "perplexity_se",
    "bits_per_byte_se",
    "eval_tokens",
    "eval_clusters",
    "eval_cluster_unit",
    "eval_seconds",
)
TIMING_FIELDS = ("elapsed_seconds", "tokens_per_second", "eval_seconds")  # they differ between equal runs
OPTIONAL_FIELDS = ("skipped_steps", "eval_sources")  # only where the feature is on
# eval_clusters and eval_cluster_unit are absent from the evaluations of runs made before issue 46: their errors
# were over blocks (the views say so, as they do for a blocks file of the first format)
LOOP_FIELDS = tuple(name for name in RUN_RECORD_FIELDS if name not in TIMING_FIELDS)  # what the loop writes


class Environment(TypedDict, total=False):
    """The environment record: what a checkpoint records of the process and machine that wrote it, compared on
    resume (``runtime.machine.environment`` builds it; a checkpoint of an older octlm may lack any key, so the
    comparisons read it as a mapping)."""

    octlm: str
    torch: str
    python: str
    platform: str  # Linux-x86_64
    device: str  # cpu, cuda, mps
    dtype: str  # fp32, bf16, fp16
    threads: int
    optimizer: str  # foreach, fused, ...
    processor: str
    kernels: str  # the kernel variables set: "MKL_CBWR=AUTO,STRICT ..." (empty: none)
    determinism: str  # under a tier that pins kernels: "portable (MKL_CBWR=...)"
    canary: str | None  # ... and its canary's digest
    mkl: str  # the path MKL takes (Intel, AMD Zen; "Intel (interposed)": told so by a library); under local too
