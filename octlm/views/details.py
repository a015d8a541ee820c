"""One experiment in detail, as plain data: config, fingerprints, runs, checkpoints and verdicts; and the one line
of a run's figures that ``train`` and ``resume`` end with and ``show ID`` opens with (``headline``). Torch-free."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal, TypedDict, cast

from octlm.config import exact_world_sizes, flatten, moves_between
from octlm.core.errors import BadInput
from octlm.core.home import Home, validate_id
from octlm.core.records import NUMBER_FIELDS, TOTALS, Figures, RunRecord, RunTotals, ShownFingerprints
from octlm.core.records.freeform import ConfigTree
from octlm.store import experiments
from octlm.store.registry import (
    TRAINING_KINDS,
    CheckpointRow,
    ExperimentRow,
    NoteRow,
    Registry,
    RunRow,
    VerificationRow,
)
from octlm.store.runs import runfile

SCHEMA_VERSION = 1  # of every ``octlm show --json`` document
NUMBERS = NUMBER_FIELDS  # the fields of a run-file record the views compute with


class Lifecycle(TypedDict):
    tags: list[str]
    notes: list[Any]  # the registry's note rows (or whatever an older registry holds)
    archived: bool
    parent: str | None  # the checkpoint a fork started from (``init.parent``)


class Detail(Lifecycle, Figures):
    """The ``octlm show ID --json`` document: its headline (status, step, train loss and the newest evaluation's
    figures, named as ``train --json`` and ``eval --json`` name them), fingerprints, lifecycle, config, runs,
    checkpoints and verdicts."""

    schema_version: int
    id: str
    uuid: str | None  # kept across homes (pack, registry export); None: only a YAML file
    description: Any  # the config's (a string, unless a registry copy says otherwise)
    status: str
    step: int | None
    train_loss: float | None
    fingerprints: ShownFingerprints
    world_sizes: list[int] | None  # those its checkpoints continue on exactly (canonical pieces); None: its own only
    moves: str  # the same in words: ``continues exactly on 1, 2 or 4 ranks (training.micro_batches 4)``
    config: ConfigTree  # resolved
    runs: list[RunRow]
    checkpoints: list[CheckpointRow]
    verifications: list[VerificationRow]  # each with ``details`` a mapping


def detail(home: Home, experiment_id: str) -> Detail:
    """The ``octlm show ID --json`` document; BadInput for a malformed or unknown ID."""
    validate_id(experiment_id)
    path = home.config_path(experiment_id)
    with Registry(home.registry, create=False) as registry:
        row = registry.experiment(experiment_id)
        if row is None and not path.exists():
            raise BadInput(f"unknown experiment {experiment_id}: not in {home.registry.name} and no {path}")
        fingerprint: str | None
        if path.exists():
            config = experiments.load(home, experiment_id)
            resolved, fingerprint = config.to_dict(), config.fingerprint
        else:
            resolved, fingerprint = registry.configs().get(experiment_id, {}), row["config_hash"] if row else None
        runs = registry.runs(experiment_id)
        checkpoints = registry.checkpoints(experiment_id)
        verdicts = registry.verifications(experiment_id)
        notes = _notes(registry, experiment_id)
    training = [run for run in runs if run["kind"] in TRAINING_KINDS]
    last = training[-1] if training else None
    latest = last["latest_metrics"] if last else None
    figures = latest if isinstance(latest, dict) else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "id": experiment_id,
        "uuid": row["uuid"] if row else None,
        "description": resolved.get("description", ""),
        "status": last["status"] if last else "new",
        "step": last["end_step"] if last else None,
        "train_loss": _finite_or_none(figures.get("train_loss")),
        "eval_loss": _finite_or_none(figures.get("eval_loss")),
        "perplexity": _finite_or_none(figures.get("perplexity")),
        "bits_per_byte": _finite_or_none(figures.get("bits_per_byte")),
        "eval_loss_se": _finite_or_none(figures.get("eval_loss_se")),
        "perplexity_se": _finite_or_none(figures.get("perplexity_se")),
        "bits_per_byte_se": _finite_or_none(figures.get("bits_per_byte_se")),
        "eval_tokens": _finite_or_none(figures.get("eval_tokens")),
        "eval_clusters": _finite_or_none(figures.get("eval_clusters")),
        "eval_cluster_unit": _text_or_none(figures.get("eval_cluster_unit")),
        "fingerprints": {
            "config": fingerprint,
            "data": _newest(runs, "data_hash"),
            "tokenizer": _newest(runs, "tokenizer_hash"),
        },
        **lifecycle(row, resolved, notes),
        **_moves(resolved),
        "config": resolved,
        "runs": runs,
        "checkpoints": checkpoints,
        "verifications": verdicts,
    }


class Moves(TypedDict):
    world_sizes: list[int] | None
    moves: str


def _moves(resolved: dict[str, Any]) -> Moves:
    """The world sizes the experiment continues on exactly, from its canonical pieces (none in a config that lacks
    them, or holds something else there)."""
    training = resolved.get("training")
    pieces = training.get("micro_batches") if isinstance(training, dict) else 0
    pieces = pieces if isinstance(pieces, int) and not isinstance(pieces, bool) and pieces > 0 else 0
    return {"world_sizes": exact_world_sizes(pieces) or None, "moves": moves_between(pieces)}


class Headline(TypedDict):
    """What an experiment's one-line headline is made of: how its newest training run ended (or how it stands) and its
    figures. ``train`` and ``resume`` make it from their run, ``show ID`` from the registry's row of that run, and
    both write it with ``headline``, so the line ``show`` opens with is the one the run ended with."""

    id: str
    status: str
    step: int | None
    steps: int | None  # training.steps
    figures: RunRecord  # the newest value of each field of the run file
    totals: RunTotals | None  # the run's own time, rate and evaluation cost (None: not recorded, or not over)


def headline(item: Headline) -> str:
    """``EXP-008: completed at step 200/200; train loss 5.1344, eval loss 5.2548 ± 0.0854, perplexity 191.48, 2.6727
    bits per byte; 1.56 epochs; 368 tokens/s; evaluation 9.2 s (12%)``: each part only when it is known."""
    figures, totals = item["figures"], item["totals"]
    at = f" at step {item['step']}/{item['steps']}" if item["step"] is not None else ""
    parts = [f"{item['id']}: {item['status']}{at}", *_losses(figures, totals)]
    if figures.get("data_blocks") and _finite(figures.get("epochs")):
        parts.append(f"{figures['epochs']:.2f} epochs")
    return "; ".join(parts + _cost(totals))


def _losses(figures: RunRecord, totals: RunTotals | None) -> list[str]:
    """``train loss 5.1344, eval loss 5.2548 ± 0.0854, perplexity 191.48, 2.6727 bits per byte`` (what is known)."""
    losses = [f"train loss {figures['train_loss']:.4f}"] if _finite(figures.get("train_loss")) else []
    if _finite(figures.get("eval_loss")):
        error = figures.get("eval_loss_se")
        on = " (on training blocks: no validation documents, data.validation_fraction)"
        perplexity, bits = figures.get("perplexity", math.nan), figures.get("bits_per_byte", math.nan)
        losses.append(
            f"eval loss {figures['eval_loss']:.4f}"
            + (f" ± {error:.4f}" if _finite(error) else "")
            + (on if totals is not None and totals["eval_split"] == "training" else "")
            + f", perplexity {perplexity:.2f}, {bits:.4f} bits per byte"
        )
    return [", ".join(losses)] if losses else []


def _cost(totals: RunTotals | None) -> list[str]:
    """The run's rate and what its evaluations cost, when it recorded them."""
    if totals is None:
        return []
    rate, seconds, spent = totals["tokens_per_second"], totals["seconds"], totals["eval_seconds"]
    parts = [f"{rate:,.0f} tokens/s"] if rate else []
    if spent and seconds:
        parts.append(f"evaluation {spent:.1f} s ({spent / seconds:.0%})")
    return parts


def detail_headline(item: Detail) -> Headline:
    """The headline of ``show ID``: its newest training run's figures and totals, as the run ended with them (a run
    still going, or that failed, has no totals yet)."""
    training = [run for run in item["runs"] if run["kind"] in TRAINING_KINDS]
    latest = training[-1]["latest_metrics"] if training else None
    final = training[-1]["final_metrics"] if training else None
    totals = final.get(TOTALS) if isinstance(final, dict) else None
    return {
        "id": item["id"],
        "status": item["status"],
        "step": item["step"],
        "steps": (item.get("config") or {}).get("training", {}).get("steps"),
        "figures": _record(latest) if isinstance(latest, dict) else {},
        "totals": totals if _totals(totals) else None,
    }


def _totals(value: Any) -> bool:
    """A ``RunTotals`` as the session writes it (anything else, edited or damaged, reads as none)."""
    if not isinstance(value, dict) or not isinstance(value.get("eval_split"), str):
        return False
    numbers = (value.get("seconds"), value.get("eval_seconds"))
    rate = value.get("tokens_per_second")
    return all(_finite(number) for number in numbers) and (rate is None or _finite(rate))


def lifecycle(row: ExperimentRow | None, config: ConfigTree, notes: list[NoteRow]) -> Lifecycle:
    """Tags, notes, archived and the parent checkpoint of a fork (``init.parent``), whichever the registry
    row and config hold (a registry without them reads as none)."""
    init = config.get("init") if isinstance(config.get("init"), dict) else {}
    tags = row["tags"] if row else None
    return {
        "tags": [str(t) for t in tags] if isinstance(tags, list) else [],
        "notes": notes,
        "archived": bool(row["archived"]) if row else False,
        "parent": (init or {}).get("parent") or None,
    }


def _notes(registry: Registry, experiment_id: str) -> list[Any]:
    """The experiment's notes, when this registry keeps them (``Registry.notes``)."""
    read = getattr(registry, "notes", None)
    try:
        found = read(experiment_id) if callable(read) else []
    except sqlite3.OperationalError:  # a registry from before notes, opened read-only
        return []
    return list(found) if isinstance(found, (list, tuple)) else []


def run_records(home: Home, experiment_id: str, track: str = "train") -> Sequence[RunRecord]:
    """The records of an experiment's run file (of ``track``: train, or overfit) as the views use them: mappings
    only, with each of ``NUMBERS`` a finite number or None, whatever a hand-edited or diverged run left there
    (a list; read-only to the views, which never change a record)."""
    suffix = "" if track == "train" else f"-{track}"
    return [
        _record({key: value if key not in NUMBERS or _finite(value) else None for key, value in record.items()})
        for record in runfile.read(home.run_file(experiment_id, suffix))
        if isinstance(record, dict)
    ]


def _record(fields: dict[str, Any]) -> RunRecord:
    """A run file's line as a ``RunRecord``: its fields (``NUMBERS``) checked above, any other key kept as it is."""
    return cast(RunRecord, fields)


def _finite_or_none(value: Any) -> Any:
    return value if _finite(value) else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _newest(runs: list[RunRow], key: Literal["data_hash", "tokenizer_hash"]) -> str | None:
    return next((run[key] for run in reversed(runs) if run[key]), None)


def flat(item: Detail) -> ConfigTree:
    """A detail document as ``key: value`` pairs (``octlm show ID --csv``): flattened, as a config is."""
    pairs: ConfigTree = {"id": item["id"], "status": item["status"], "step": item["step"]}
    pairs.update({f"fingerprint.{k}": v for k, v in item["fingerprints"].items()})
    pairs.update(flatten({"config": item["config"]}))
    return pairs
