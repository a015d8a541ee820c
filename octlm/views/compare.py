"""Side-by-side comparison of experiments (``octlm show ID ID ...``). Torch-free.

Run files are the source of the "final", "best" and "at equal tokens" figures; the
registry supplies verdicts; configs supply the keys that differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, get_args

from octlm.config import flatten
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.views.details import SCHEMA_VERSION, Detail, RegistryRow, detail, run_records

Metric = Literal["train_loss", "eval_loss", "perplexity", "bits_per_byte"]
Records = Sequence[RunRecord]
Differing = dict[str, dict[str, list[Any]]]  # {section: {dotted key: [value per config]}}


class Metrics(TypedDict):
    train_loss: float | None
    eval_loss: float | None
    perplexity: float | None
    bits_per_byte: float | None


class AtTokens(TypedDict):
    tokens: int | None  # of the newest record at or before the equal tokens
    train_loss: float | None
    eval_loss: float | None
    perplexity: float | None
    bits_per_byte: float | None


class Figures(TypedDict):
    """One experiment's column of a comparison."""

    id: str
    description: Any
    status: str
    step: int | None
    final: Metrics
    best: Metrics
    at_equal_tokens: AtTokens
    tokens: int | None
    tokens_per_second: float | None
    wall_seconds: float | None
    verify_resume: str | None  # the newest verdict of that kind
    overfit: str | None


class Comparison(TypedDict):
    """The ``octlm show ID ID ... --json`` document."""

    schema_version: int
    ids: list[str]
    equal_tokens: int  # the tokens every experiment reached
    experiments: list[Figures]
    config: Differing
    all_keys: bool


METRICS: tuple[Metric, ...] = get_args(Metric)  # Metrics' keys, in their order


def compare(home: Home, ids: list[str], all_keys: bool = False) -> Comparison:
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


def _metrics(value: Callable[[Metric], float | None]) -> Metrics:
    return {
        "train_loss": value("train_loss"),
        "eval_loss": value("eval_loss"),
        "perplexity": value("perplexity"),
        "bits_per_byte": value("bits_per_byte"),
    }


def _figures(item: Detail, records: Records, common: int) -> Figures:
    last: RunRecord = records[-1] if records else {}
    equal = _at_tokens(records, common) if common else None
    return {
        "id": item["id"],
        "description": item["description"],
        "status": item["status"],
        "step": item["step"],
        "final": _metrics(lambda k: _latest(records, k)),
        "best": _metrics(lambda k: min((v for r in records if (v := r.get(k)) is not None), default=None)),
        "at_equal_tokens": {
            "tokens": equal.get("tokens") if equal else None,
            **_metrics(lambda k: _latest(records, k, common) if equal else None),
        },
        "tokens": last.get("tokens"),
        "tokens_per_second": last.get("tokens_per_second"),
        "wall_seconds": last.get("elapsed_seconds"),
        "verify_resume": _verdict(item["verifications"], "verify-resume"),
        "overfit": _verdict(item["verifications"], "overfit"),
    }


def _verdict(verifications: list[RegistryRow], kind: str) -> str | None:
    found = [v for v in verifications if v["kind"] == kind]
    verdict: str | None = found[-1]["verdict"] if found else None  # a registry row's column
    return verdict


def _latest(records: Records, key: Metric, tokens: int | None = None) -> float | None:
    """The newest value of ``key`` (at or before ``tokens``): a run file logs the training loss more
    often than it evaluates, so the last record may not hold every metric."""
    for record in reversed(records):
        value = record.get(key)
        if value is not None and (tokens is None or (record.get("tokens") or 0) <= tokens):
            return value
    return None


def _at_tokens(records: Records, tokens: int) -> RunRecord | None:
    reached = [r for r in records if (r.get("tokens") or 0) <= tokens]
    return reached[-1] if reached else None


def differing_keys(configs: list[dict[str, Any]], all_keys: bool) -> Differing:
    """{section: {dotted key: [value per config]}} for the keys that differ (every key with ``all_keys``)."""
    flat = [flatten(config) for config in configs]
    differing: Differing = {}
    for key in sorted(set().union(*flat)) if flat else []:
        values = [f.get(key) for f in flat]
        if key != "id" and (all_keys or any(v != values[0] for v in values)):
            section = key.split(".", 1)[0] if "." in key else "top"
            differing.setdefault(section, {})[key] = values
    return differing


def table_rows(result: Comparison) -> list[tuple[str, list[Any]]]:
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
