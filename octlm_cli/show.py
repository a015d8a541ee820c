"""What ``octlm show`` reports: the experiment list and one experiment in detail, as plain data.

Torch-free; the CLI renders these dicts as rich tables or JSON.
"""

from __future__ import annotations

import json
from typing import Any

from . import experiments
from .errors import BadInput
from .home import Home, validate_id
from .registry import Registry, effective_status

SCHEMA_VERSION = 1
LIST_COLUMNS = (
    "id", "description", "status", "step", "steps", "train_loss", "eval_loss",
    "perplexity", "bits_per_byte", "tokens", "last_verdict", "updated",
)


def listing(home: Home) -> list[dict[str, Any]]:
    registry = Registry(home.registry, create=False)
    try:
        rows = registry.summaries() if registry.conn is not None else []
        running = {
            row["experiment_id"]: row
            for row in registry.query("select * from runs where status = 'running'")
        }
    finally:
        registry.close()
    out = []
    for row in rows:
        status = row["status"] or "new"
        if row["id"] in running:
            status = effective_status(running[row["id"]])["status"]
        out.append({key: row.get(key) for key in LIST_COLUMNS} | {"status": status})
    for missing in experiments.unregistered_files(home, {row["id"] for row in rows}):
        out.append({key: None for key in LIST_COLUMNS} | {"id": missing, "status": "new"})
    out.sort(key=lambda row: row["id"])
    return out


def detail(home: Home, experiment_id: str) -> dict[str, Any]:
    validate_id(experiment_id)
    registry = Registry(home.registry, create=False)
    try:
        row = registry.experiment(experiment_id)
        if row is None and not home.config_path(experiment_id).exists():
            raise BadInput(f"unknown experiment {experiment_id}: not in {home.registry.name} and no {home.config_path(experiment_id)}")
        if home.config_path(experiment_id).exists():
            config = experiments.load(home, experiment_id)
            resolved, fingerprint = config.to_dict(), config.fingerprint
        else:
            resolved, fingerprint = json.loads(row["config_json"]), row["config_hash"]
        runs = registry.runs(experiment_id) if row else []
        checkpoints = registry.checkpoints(experiment_id) if row else []
        verdicts = registry.verifications(experiment_id) if row else []
    finally:
        registry.close()
    for run in runs:
        for key in ("argv", "latest_metrics", "final_metrics"):
            if run.get(key):
                run[key] = json.loads(run[key])
    for item in checkpoints:
        if item.get("metrics"):
            item["metrics"] = json.loads(item["metrics"])
    for item in verdicts:
        item["details"] = json.loads(item["details"]) if item.get("details") else {}
    training = [run for run in runs if run["kind"] in ("train", "resume")]
    last = training[-1] if training else None
    data_hash = next((run["data_hash"] for run in reversed(runs) if run.get("data_hash")), None)
    tokenizer_hash = next((run["tokenizer_hash"] for run in reversed(runs) if run.get("tokenizer_hash")), None)
    return {
        "schema_version": SCHEMA_VERSION,
        "id": experiment_id,
        "description": resolved.get("description", ""),
        "status": last["status"] if last else "new",
        "step": last["end_step"] if last else None,
        "fingerprints": {"config": fingerprint, "data": data_hash, "tokenizer": tokenizer_hash},
        "config": resolved,
        "runs": runs,
        "checkpoints": checkpoints,
        "verifications": verdicts,
    }
