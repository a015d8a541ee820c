"""The registry's schema as named, append-only migrations (sqlite-utils ``Migrations``).

Never edit or reorder a migration that has shipped: add a new one at the end.
"""

from __future__ import annotations

import uuid

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

SET_NAME = "octlm"
migrations = Migrations(SET_NAME)


# The tables of m001 as created then; part of a shipped migration, so never change them.
EXPERIMENTS_V1: dict[str, type] = {
    "id": str,
    "description": str,
    "preset": str,
    "created": str,
    "updated": str,
    "yaml_path": str,
    "config_json": str,
    "config_hash": str,
}
RUNS_V1: dict[str, type] = {
    "id": int,
    "experiment_id": str,
    "kind": str,  # train | resume | verify-resume | overfit
    "status": str,  # running | completed | failed | interrupted | crashed
    "start_step": int,
    "end_step": int,
    "target_step": int,
    "started": str,
    "ended": str,
    "updated": str,
    "host": str,
    "pid": int,
    "argv": str,
    "octlm_version": str,
    "python_version": str,
    "torch_version": str,
    "device": str,
    "dtype": str,
    "threads": int,
    "git_commit": str,
    "git_dirty": int,
    "config_hash": str,
    "data_hash": str,
    "tokenizer_hash": str,
    "resumed_from": str,
    "latest_metrics": str,
    "final_metrics": str,
    "error": str,
}
CHECKPOINTS_V1: dict[str, type] = {
    "id": int,
    "experiment_id": str,
    "run_id": int,
    "step": int,
    "path": str,
    "sha256": str,
    "size": int,
    "tokens": int,
    "created": str,
    "config_hash": str,
    "data_hash": str,
    "tokenizer_hash": str,
    "metrics": str,
}
VERIFICATIONS_V1: dict[str, type] = {
    "id": int,
    "experiment_id": str,
    "run_id": int,
    "kind": str,  # verify-resume | overfit
    "verdict": str,  # pass | fail
    "created": str,
    "details": str,
}


@migrations()
def m001_initial(db: Database) -> None:
    db.table("experiments").create(EXPERIMENTS_V1, pk="id")
    db.table("runs").create(RUNS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("runs").create_index(["experiment_id"])
    db.table("checkpoints").create(CHECKPOINTS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("checkpoints").create_index(["path"], unique=True)
    db.table("checkpoints").create_index(["experiment_id", "step"])
    db.table("verifications").create(VERIFICATIONS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])


@migrations()
def m002_summary_view(db: Database) -> None:
    # One row per experiment with its latest run and verdict, for sqlite-utils or Datasette.
    db.create_view(
        "experiment_summary",
        """
        select
          e.id, e.description, e.preset, e.created, e.config_hash,
          r.status, r.kind as last_run_kind, r.end_step as step,
          json_extract(e.config_json, '$.training.steps') as steps,
          json_extract(r.latest_metrics, '$.train_loss') as train_loss,
          json_extract(r.latest_metrics, '$.eval_loss') as eval_loss,
          json_extract(r.latest_metrics, '$.perplexity') as perplexity,
          json_extract(r.latest_metrics, '$.bits_per_byte') as bits_per_byte,
          json_extract(r.latest_metrics, '$.tokens') as tokens,
          (select v.kind || ': ' || v.verdict from verifications v
             where v.experiment_id = e.id order by v.id desc limit 1) as last_verdict,
          coalesce(r.updated, e.updated) as updated
        from experiments e
        left join runs r on r.id = (
          select id from runs where experiment_id = e.id and kind in ('train', 'resume')
          order by id desc limit 1)
        """,
    )


@migrations()
def m003_pid_start_json_guards(db: Database) -> None:
    # The start time of a run's process beside its pid (liveness.start_time), so a reused pid is not
    # taken for the run; and the summary view again, each JSON cell read only when it is valid JSON,
    # so one damaged cell no longer fails every read of the view.
    db.table("runs").add_column("pid_start", int)
    _guarded_summary_view(db, lifecycle=False)


def _guarded_summary_view(db: Database, lifecycle: bool) -> None:
    """The summary view (m002's columns) with each JSON cell read only when it is valid JSON (m003 on);
    with ``lifecycle`` also ``archived`` and ``tags`` (m004 on)."""
    metrics = ",\n".join(
        f"case when json_valid(r.latest_metrics) then json_extract(r.latest_metrics, '$.{name}') end as {name}"
        for name in ("train_loss", "eval_loss", "perplexity", "bits_per_byte", "tokens")
    )
    extra = "e.archived, case when json_valid(e.tags) then e.tags end as tags," if lifecycle else ""
    db.execute("drop view if exists experiment_summary")
    db.create_view(
        "experiment_summary",
        f"""
        select
          e.id, e.description, e.preset, e.created, e.config_hash, {extra}
          r.status, r.kind as last_run_kind, r.end_step as step,
          case when json_valid(e.config_json) then json_extract(e.config_json, '$.training.steps') end as steps,
          {metrics},
          (select v.kind || ': ' || v.verdict from verifications v
             where v.experiment_id = e.id order by v.id desc limit 1) as last_verdict,
          coalesce(r.updated, e.updated) as updated
        from experiments e
        left join runs r on r.id = (
          select id from runs where experiment_id = e.id and kind in ('train', 'resume')
          order by id desc limit 1)
        """,
    )


# The tables of m004 as created then.
NOTES_V1: dict[str, type] = {"id": int, "experiment_id": str, "created": str, "text": str}
METRICS_V1: dict[str, type] = {
    "id": int,
    "experiment_id": str,
    "run_id": int,
    "track": str,  # train | overfit
    "step": int,
    "tokens": int,
    "lr": float,
    "train_loss": float,
    "eval_loss": float,
    "perplexity": float,
    "bits_per_byte": float,
    "gradient_norm": float,
    "elapsed_seconds": float,
    "tokens_per_second": float,
}


@migrations()
def m004_lifecycle_metrics(db: Database) -> None:
    # The experiment lifecycle (archived, tags as a JSON list, notes) and the run files' records as rows,
    # so sqlite-utils and Datasette can chart curves; the summary view again, with archived and tags.
    db.table("experiments").add_column("archived", int, not_null_default=0)
    db.table("experiments").add_column("tags", str)
    db.table("notes").create(NOTES_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("notes").create_index(["experiment_id"])
    db.table("metrics").create(METRICS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("metrics").create_index(["experiment_id", "track", "step"])
    _guarded_summary_view(db, lifecycle=True)


@migrations()
def m005_ranks(db: Database) -> None:
    # Data-parallel runs: how many processes (ranks) a run trained on, over how many nodes, with which
    # torch.distributed backend (null for a single process), and the world size of the checkpoint it
    # resumed from when --reshard changed it (else null). Every earlier run was one process on one node.
    db.table("runs").add_column("world_size", int, not_null_default=1)
    db.table("runs").add_column("nnodes", int, not_null_default=1)
    db.table("runs").add_column("backend", str)
    db.table("runs").add_column("resharded_from", int)


@migrations()
def m006_identity_remote(db: Database) -> None:
    # Many boxes: a UUID per experiment, run, verdict and note, given at creation and kept forever (the short ID
    # stays the name within one home; existing rows get one here); ``former_ids``, the IDs (a JSON list) an
    # experiment's checkpoints may name from before it was unpacked under another ID (``unpack --as``); and the
    # box and absolute path of an imported checkpoint row that stays on another box (``registry import``).
    for table in ("experiments", "runs", "verifications", "notes"):
        db.table(table).add_column("uuid", str)
        for (key,) in db.execute(f"select id from {table}").fetchall():
            db.execute(f"update {table} set uuid = ? where id = ?", (str(uuid.uuid4()), key))
        db.table(table).create_index(["uuid"], unique=True)
    db.table("experiments").add_column("former_ids", str)
    db.table("checkpoints").add_column("remote_host", str)
    db.table("checkpoints").add_column("remote_path", str)


NAMES = [m.name for m in migrations._migrations]
