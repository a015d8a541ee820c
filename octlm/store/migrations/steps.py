"""The registry's migrations: named and append-only, applied with sqlite-utils (``migration_set``), the tables as
each migration created them, the columns each later one adds (``ADDED``), and the columns each table has once they
all ran (``TABLE_COLUMNS``, derived from what they create and add).

Never edit or reorder a migration that has shipped: add a new one at the end, and declare the columns it adds
in ``ADDED`` (its function adds them from there). sqlite-utils is imported only to apply migrations
(``migration_set``), so commands that find the registry migrated (``octlm show``, ``octlm new``) never load it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

SET_NAME = "octlm"
Migration = Callable[["Database"], None]
STEPS: list[Migration] = []  # every migration, in the order they apply


def migration(step: Migration) -> Migration:
    """Register ``step`` as the next migration (named by its function)."""
    STEPS.append(step)
    return step


@functools.cache
def migration_set() -> Migrations:
    """The migrations as sqlite-utils applies them; sqlite-utils is imported here, on first need."""
    from sqlite_utils.migrations import Migrations

    found = Migrations(SET_NAME)
    for step in STEPS:
        found()(step)
    return found


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
# The columns each later migration adds, in order: (table, column, type, its not-null default or None). Part of
# shipped migrations (their functions add them from here), so never change an entry: a new migration adds its own.
Added = tuple[str, str, type, int | None]
ADDED: dict[str, tuple[Added, ...]] = {
    "m003_pid_start_json_guards": (("runs", "pid_start", int, None),),
    "m004_lifecycle_metrics": (("experiments", "archived", int, 0), ("experiments", "tags", str, None)),
    "m005_ranks": (
        ("runs", "world_size", int, 1),
        ("runs", "nnodes", int, 1),
        ("runs", "backend", str, None),
        ("runs", "resharded_from", int, None),
    ),
    "m006_identity_remote": (
        ("experiments", "uuid", str, None),
        ("runs", "uuid", str, None),
        ("verifications", "uuid", str, None),
        ("notes", "uuid", str, None),
        ("experiments", "former_ids", str, None),
        ("checkpoints", "remote_host", str, None),
        ("checkpoints", "remote_path", str, None),
    ),
    "m007_data_order_evaluation": (
        ("metrics", "epochs", float, None),
        ("metrics", "data_blocks", int, None),
        ("metrics", "data_receipt", str, None),
        ("metrics", "skipped_steps", int, None),
        ("metrics", "eval_loss_se", float, None),
        ("metrics", "perplexity_se", float, None),
        ("metrics", "bits_per_byte_se", float, None),
        ("metrics", "eval_tokens", int, None),
        ("metrics", "eval_seconds", float, None),
    ),
    "m008_run_resources": (("runs", "load_average", float, None), ("runs", "peak_rss", int, None)),
    "m012_eval_clusters": (("metrics", "eval_clusters", int, None), ("metrics", "eval_cluster_unit", str, None)),
}


def _add_columns(db: Database, name: str, then: Callable[[str, str], None] | None = None) -> None:
    """Add the columns ``ADDED`` declares for migration ``name``, in order; ``then(table, column)`` after each."""
    for table, column, kind, default in ADDED[name]:
        db.table(table).add_column(column, kind, not_null_default=default)
        if then is not None:
            then(table, column)


@migration
def m001_initial(db: Database) -> None:
    db.table("experiments").create(EXPERIMENTS_V1, pk="id")
    db.table("runs").create(RUNS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("runs").create_index(["experiment_id"])
    db.table("checkpoints").create(CHECKPOINTS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("checkpoints").create_index(["path"], unique=True)
    db.table("checkpoints").create_index(["experiment_id", "step"])
    db.table("verifications").create(VERIFICATIONS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])


@migration
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


@migration
def m003_pid_start_json_guards(db: Database) -> None:
    # The start time of a run's process beside its pid (liveness.start_time), so a reused pid is not
    # taken for the run; and the summary view again, each JSON cell read only when it is valid JSON,
    # so one damaged cell no longer fails every read of the view.
    _add_columns(db, "m003_pid_start_json_guards")
    _guarded_summary_view(db, lifecycle=False)


SUMMARY_METRICS = ("train_loss", "eval_loss", "perplexity", "bits_per_byte", "tokens")  # m003's, never changed


def _guarded_summary_view(db: Database, lifecycle: bool, metrics_shown: tuple[str, ...] = SUMMARY_METRICS) -> None:
    """The summary view (m002's columns) with each JSON cell read only when it is valid JSON (m003 on);
    with ``lifecycle`` also ``archived`` and ``tags`` (m004 on); ``metrics_shown``: the latest metrics it reads."""
    metrics = ",\n".join(
        f"case when json_valid(r.latest_metrics) then json_extract(r.latest_metrics, '$.{name}') end as {name}"
        for name in metrics_shown
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


@migration
def m004_lifecycle_metrics(db: Database) -> None:
    # The experiment lifecycle (archived, tags as a JSON list, notes) and the run files' records as rows,
    # so sqlite-utils and Datasette can chart curves; the summary view again, with archived and tags.
    _add_columns(db, "m004_lifecycle_metrics")
    db.table("notes").create(NOTES_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("notes").create_index(["experiment_id"])
    db.table("metrics").create(METRICS_V1, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db.table("metrics").create_index(["experiment_id", "track", "step"])
    _guarded_summary_view(db, lifecycle=True)


@migration
def m005_ranks(db: Database) -> None:
    # Data-parallel runs: how many processes (ranks) a run trained on, over how many nodes, with which
    # torch.distributed backend (null for a single process), and the world size of the checkpoint it
    # resumed from when --reshard changed it (else null). Every earlier run was one process on one node.
    _add_columns(db, "m005_ranks")


@migration
def m006_identity_remote(db: Database) -> None:
    # Many boxes: a UUID per experiment, run, verdict and note, given at creation and kept forever (the short ID
    # stays the name within one home; existing rows get one here); ``former_ids``, the IDs (a JSON list) an
    # experiment's checkpoints may name from before it was unpacked under another ID (``unpack --as``); and the
    # box and absolute path of an imported checkpoint row that stays on another box (``registry import``).
    def give_uuids(table: str, column: str) -> None:  # right after each uuid column: existing rows get one
        if column == "uuid":
            for (key,) in db.execute(f"select id from {table}").fetchall():
                db.execute(f"update {table} set uuid = ? where id = ?", (str(uuid.uuid4()), key))
            db.table(table).create_index(["uuid"], unique=True)

    _add_columns(db, "m006_identity_remote", give_uuids)


@migration
def m007_data_order_evaluation(db: Database) -> None:
    # Data and evaluation one can trust: each metrics row carries the data order read so far (epochs, blocks, the
    # receipt's rolling digest), the spike guard's skipped steps, and the evaluation's standard errors, tokens and
    # cost (the run file's per-source figures stay in the run file).
    _add_columns(db, "m007_data_order_evaluation")


@migration
def m008_run_resources(db: Database) -> None:
    # Whether a slow run was the box's fault: the load average when it started (the 1-minute figure, before the run
    # added its own threads) and the peak resident memory of its process, in bytes, when it ended.
    _add_columns(db, "m008_run_resources")


# The tables of m009 as created then.
SWEEPS_V1: dict[str, type] = {
    "id": int,
    "name": str,  # unique in the home; never an experiment ID
    "uuid": str,
    "base": str,  # the experiment its trials were made from
    "description": str,
    "spec": str,  # JSON: grid, ranges, random draws, seeds, sampler, budget, metric, halving rungs, keep
    "created": str,
    "updated": str,
}
SWEEP_TRIALS_V1: dict[str, type] = {
    "id": int,
    "sweep_id": int,
    "experiment_id": str,
    "position": int,  # the queue's order
    "params": str,  # JSON: {dotted key: value} the trial varies, the seed left out
    "group_key": str,  # its configuration (the params, canonical): replicates share it
    "replicate": int,  # 0 ... seeds - 1
    "seed": int,  # training.seed
    "status": str,  # queued | running | done | failed | stopped (not promoted)
    "rung": int,  # the halving rung it trains to (0 without halving)
    "target_step": int,  # the step it trains to now
    "value": float,  # the metric at target_step, once done
    "error": str,  # a failed trial's message and the last lines of its log
    "updated": str,
}
SWEEP_CLAIMS_V1: dict[str, type] = {
    "id": int,
    "trial_id": int,
    "sweep_id": int,
    "experiment_id": str,
    "target_step": int,
    "host": str,
    "pid": int,
    "pid_start": int,  # liveness.start_time: a reused pid is not the claimant
    "threads": int,  # the worker's share of the cores
    "device": str,  # the GPU it was given ("cuda:0"), else "cpu"
    "claimed": str,
    "released": str,  # null while held
    "outcome": str,  # done | failed | released (a signal) | lost (its worker died) | busy
}
SWEEP_DECISIONS_V1: dict[str, type] = {
    "id": int,
    "sweep_id": int,
    "rung": int,
    "step": int,
    "ranking": str,  # JSON: the configurations by their metric at the rung, best first
    "promoted": str,  # JSON: the experiment IDs that go on to the next rung
    "created": str,
}


@migration
def m009_sweeps(db: Database) -> None:
    # Many experiments, not one: a sweep and its trials (ordinary experiments, in a queue), the queue's claims
    # (who trains a trial: host, pid and its start time, so a dead worker's claim is taken over; released ones
    # stay as the history), and successive halving's decisions. At most one open claim per trial.
    db.table("sweeps").create(SWEEPS_V1, pk="id")
    db.table("sweeps").create_index(["name"], unique=True)
    db.table("sweeps").create_index(["uuid"], unique=True)
    trial_keys = [("sweep_id", "sweeps", "id"), ("experiment_id", "experiments", "id")]
    db.table("sweep_trials").create(SWEEP_TRIALS_V1, pk="id", foreign_keys=trial_keys)
    db.table("sweep_trials").create_index(["sweep_id", "experiment_id"], unique=True)
    db.table("sweep_trials").create_index(["experiment_id"])
    claim_keys = [("trial_id", "sweep_trials", "id"), ("experiment_id", "experiments", "id")]
    db.table("sweep_claims").create(SWEEP_CLAIMS_V1, pk="id", foreign_keys=claim_keys)
    db.table("sweep_claims").create_index(["experiment_id"])
    db.execute("create unique index sweep_claims_open on sweep_claims (trial_id) where released is null")
    db.table("sweep_decisions").create(SWEEP_DECISIONS_V1, pk="id", foreign_keys=[("sweep_id", "sweeps", "id")])
    db.table("sweep_decisions").create_index(["sweep_id", "rung"], unique=True)


@migration
def m010_summary_error(db: Database) -> None:
    # The list's eval loss with its standard error (``show --json`` carries eval_loss_se as train and eval do).
    _guarded_summary_view(db, lifecycle=True, metrics_shown=(*SUMMARY_METRICS, "eval_loss_se"))


# The table of m011 as created then, and how its trigger reads an ID: the prefix is the ID less its trailing digits
# (an ID ends in '-' and 1 to 9 digits, so what is left ends in '-'); the number, those digits (a row whose
# ID ends otherwise counts nowhere). Part of a shipped migration, so never change them.
ID_MARKS_V1: dict[str, type] = {"prefix": str, "highest": int}
_PREFIX = "rtrim({id}, '0123456789')"
_NUMBER = "cast(substr({id}, length(rtrim({id}, '0123456789')) + 1) as integer)"
_AN_ID = "rtrim({id}, '0123456789') like '%-' and length({id}) - length(rtrim({id}, '0123456789')) between 1 and 9"


@migration
def m011_id_marks(db: Database) -> None:
    # IDs never given twice in a home: for each prefix, the highest number ever given with it (``EXP-``: 12), raised
    # by a trigger on every experiment row inserted (``new``, a sweep's trials, an import, a repair) and never
    # lowered, so ``rm`` frees no number; seeded from the experiments here now. ``.octlm/ids.json`` keeps the same
    # beside the registry (``store/kept``), so a registry rebuilt after its loss learns them again.
    db.table("id_marks").create(ID_MARKS_V1, pk="prefix", not_null={"highest"})
    prefix, number, an_id = (part.format(id="new.id") for part in (_PREFIX, _NUMBER, _AN_ID))
    db.execute(
        f"create trigger id_marks_raise after insert on experiments when {an_id} begin"
        f" insert into id_marks (prefix, highest) values ({prefix}, {number})"
        " on conflict(prefix) do update set highest = max(highest, excluded.highest); end"
    )
    prefix, number, an_id = (part.format(id="id") for part in (_PREFIX, _NUMBER, _AN_ID))
    db.execute(
        f"insert into id_marks (prefix, highest) select {prefix}, max({number}) from experiments"
        f" where {an_id} group by 1"
    )


@migration
def m012_eval_clusters(db: Database) -> None:
    # Errors a reviewer would sign (issue 46): each evaluation's standard errors are over clusters of blocks
    # (documents, or chunks of consecutive blocks), and each metrics row says how many and what they are; rows of
    # earlier evaluations leave them null (their errors were over blocks).
    _add_columns(db, "m012_eval_clusters")


NAMES = [step.__name__ for step in STEPS]
CREATED = {  # every table, as the migration that created it created it
    "experiments": EXPERIMENTS_V1,
    "runs": RUNS_V1,
    "checkpoints": CHECKPOINTS_V1,
    "verifications": VERIFICATIONS_V1,
    "notes": NOTES_V1,
    "metrics": METRICS_V1,
    "sweeps": SWEEPS_V1,
    "sweep_trials": SWEEP_TRIALS_V1,
    "sweep_claims": SWEEP_CLAIMS_V1,
    "sweep_decisions": SWEEP_DECISIONS_V1,
    "id_marks": ID_MARKS_V1,
}


def _table_columns() -> dict[str, tuple[str, ...]]:
    columns = {table: list(created) for table, created in CREATED.items()}
    for name in NAMES:
        for table, column, _, _ in ADDED.get(name, ()):
            columns[table].append(column)
    return {table: tuple(names) for table, names in columns.items()}


TABLE_COLUMNS = _table_columns()
"""{table: its columns in order} once every migration ran: what ``PRAGMA table_info`` lists (a test checks)."""
