"""The rows a read of the registry returns (``ExperimentRow`` ... ``MetricRow``, ``SummaryRow``): TypedDicts that
name the columns ``steps.TABLE_COLUMNS`` derives from the migrations (a test holds them together)."""

from __future__ import annotations

from typing import Any, TypedDict

# A JSON cell reads decoded (``Any``: whatever JSON it holds; None when malformed). A column the schema lets be
# null is typed so, but for those octlm always fills: ``id``, ``experiment_id``, ``uuid`` (m006 and every insert
# give one) and the fields every export record must have.
Json = Any


class ExperimentRow(TypedDict):
    id: str
    description: str | None
    preset: str | None
    created: str | None
    updated: str | None
    yaml_path: str | None
    config_json: Json
    config_hash: str | None
    archived: int
    tags: list[str]  # [] when absent or malformed
    uuid: str
    former_ids: Json


class RunRow(TypedDict):
    id: int
    experiment_id: str
    kind: str | None
    status: str  # the effective status (a dead process reads crashed), never null in a read
    start_step: int | None
    end_step: int | None
    target_step: int | None
    started: str | None
    ended: str | None
    updated: str | None
    host: str | None
    pid: int | None
    argv: Json
    octlm_version: str | None
    python_version: str | None
    torch_version: str | None
    device: str | None
    dtype: str | None
    threads: int | None
    git_commit: str | None
    git_dirty: int | None
    config_hash: str | None
    data_hash: str | None
    tokenizer_hash: str | None
    resumed_from: str | None
    latest_metrics: Json
    final_metrics: Json
    error: str | None
    pid_start: int | None
    world_size: int
    nnodes: int
    backend: str | None
    resharded_from: int | None
    uuid: str
    load_average: float | None
    peak_rss: int | None


class CheckpointRow(TypedDict):
    id: int
    experiment_id: str
    run_id: int | None
    step: int
    path: str
    sha256: str
    size: int | None
    tokens: int | None
    created: str | None
    config_hash: str | None
    data_hash: str | None
    tokenizer_hash: str | None
    metrics: Json
    remote_host: str | None
    remote_path: str | None


class VerificationRow(TypedDict):
    id: int
    experiment_id: str
    run_id: int | None
    kind: str
    verdict: str
    created: str | None
    details: Json
    uuid: str


class NoteRow(TypedDict):
    id: int
    experiment_id: str
    created: str | None
    text: str
    uuid: str


class MetricRow(TypedDict):
    id: int
    experiment_id: str
    run_id: int | None
    track: str
    step: int | None
    tokens: int | None
    lr: float | None
    train_loss: float | None
    eval_loss: float | None
    perplexity: float | None
    bits_per_byte: float | None
    gradient_norm: float | None
    elapsed_seconds: float | None
    tokens_per_second: float | None
    epochs: float | None
    data_blocks: int | None
    data_receipt: str | None
    skipped_steps: int | None
    eval_loss_se: float | None
    perplexity_se: float | None
    bits_per_byte_se: float | None
    eval_tokens: int | None
    eval_seconds: float | None
    eval_clusters: int | None
    eval_cluster_unit: str | None


class SummaryRow(TypedDict):
    """A row of the ``experiment_summary`` view: an experiment with its latest training run and verdict."""

    id: str
    description: str | None
    preset: str | None
    created: str | None
    config_hash: str | None
    archived: int
    tags: Json  # the JSON text of the tags list (null when malformed)
    status: str | None  # none: never trained
    last_run_kind: str | None
    step: int | None
    steps: int | None
    train_loss: float | None
    eval_loss: float | None
    perplexity: float | None
    bits_per_byte: float | None
    tokens: int | None
    eval_loss_se: float | None
    last_verdict: str | None
    updated: str | None
