"""Side-by-side comparison of experiments (``octlm show ID ID ...``). Torch-free.

Run files are the source of the "final", "best" and "at equal tokens" figures; the
registry supplies verdicts; configs supply the keys that differ.
"""

from __future__ import annotations

from typing import Any

from octlm.config import flatten
from octlm.core.home import Home
from octlm.views.details import SCHEMA_VERSION, detail, run_records

METRICS = ("train_loss", "eval_loss", "perplexity", "bits_per_byte")
Records = list[dict[str, Any]]


def compare(home: Home, ids: list[str], all_keys: bool = False) -> dict[str, Any]:
    """The ``octlm show ID ID ... --json`` document; BadInput for an unknown ID."""
    details = [detail(home, experiment_id) for experiment_id in ids]
    records = {d["id"]: run_records(home, d["id"]) for d in details}
    common = min((max((r.get("tokens") or 0 for r in recs), default=0) for recs in records.values()), default=0)
    return {
        "schema_version": SCHEMA_VERSION,
        "ids": ids,
        "equal_tokens": common,
        "experiments": [_figures(item, records[item["id"]], common) for item in details],
        "config": differing_keys([d["config"] for d in details], all_keys),
        "all_keys": all_keys,
    }


def _figures(item: dict[str, Any], records: Records, common: int) -> dict[str, Any]:
    last = records[-1] if records else {}
    equal = _at_tokens(records, common) if common else None
    return {
        "id": item["id"],
        "description": item["description"],
        "status": item["status"],
        "step": item["step"],
        "final": {k: _latest(records, k) for k in METRICS},
        "best": {k: min((r[k] for r in records if r.get(k) is not None), default=None) for k in METRICS},
        "at_equal_tokens": {
            "tokens": equal.get("tokens") if equal else None,
            **{k: _latest(records, k, common) if equal else None for k in METRICS},
        },
        "tokens": last.get("tokens"),
        "tokens_per_second": last.get("tokens_per_second"),
        "wall_seconds": last.get("elapsed_seconds"),
        "verify_resume": _verdict(item["verifications"], "verify-resume"),
        "overfit": _verdict(item["verifications"], "overfit"),
    }


def _verdict(verifications: list[dict[str, Any]], kind: str) -> str | None:
    found = [v for v in verifications if v["kind"] == kind]
    return found[-1]["verdict"] if found else None


def _latest(records: Records, key: str, tokens: int | None = None) -> Any:
    """The newest value of ``key`` (at or before ``tokens``): a run file logs the training loss more
    often than it evaluates, so the last record may not hold every metric."""
    for record in reversed(records):
        if record.get(key) is not None and (tokens is None or (record.get("tokens") or 0) <= tokens):
            return record[key]
    return None


def _at_tokens(records: Records, tokens: int) -> dict[str, Any] | None:
    reached = [r for r in records if (r.get("tokens") or 0) <= tokens]
    return reached[-1] if reached else None


def differing_keys(configs: list[dict[str, Any]], all_keys: bool) -> dict[str, dict[str, list[Any]]]:
    """{section: {dotted key: [value per config]}} for the keys that differ (every key with ``all_keys``)."""
    flat = [flatten(config) for config in configs]
    differing: dict[str, dict[str, list[Any]]] = {}
    for key in sorted(set().union(*flat)) if flat else []:
        values = [f.get(key) for f in flat]
        if key != "id" and (all_keys or any(v != values[0] for v in values)):
            section = key.split(".", 1)[0] if "." in key else "top"
            differing.setdefault(section, {})[key] = values
    return differing


def table_rows(result: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """A comparison as (field, [value per experiment]) rows, for the text table and ``--csv``."""
    exps, at = result["experiments"], f"at {result['equal_tokens']:,} tokens"
    rows: list[tuple[str, list[Any]]] = [("status", [e["status"] for e in exps]), ("step", [e["step"] for e in exps])]
    for group in ("final", "best"):
        rows += [(f"{group} {metric}", [e[group][metric] for e in exps]) for metric in METRICS]
    rows.append((f"{at}: step tokens", [e["at_equal_tokens"]["tokens"] for e in exps]))
    rows += [(f"{at}: {metric}", [e["at_equal_tokens"][metric] for e in exps]) for metric in METRICS]
    for key in ("tokens", "tokens_per_second", "wall_seconds", "verify_resume", "overfit"):
        rows.append((key, [e[key] for e in exps]))
    for keys in result["config"].values():
        rows += list(keys.items())
    return rows
