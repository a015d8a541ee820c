"""Side-by-side comparison of experiments (``octlm show ID ID ...``). Torch-free.

Run files are the source of the "final", "best" and "at equal tokens" figures; the
registry supplies verdicts; configs supply the keys that differ. Each experiment after the first is judged against
it (``compare.versus``): as configurations over their seeds where both have seed replicates (the same config but for
``training.seed``: ``sweeps.replicates``), and as two trained models on the same blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, cast

from octlm.config import flatten
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.core.records.freeform import ConfigTree
from octlm.store.registry import Registry, VerificationRow
from octlm.store.runs import evalblocks
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views.compare import noise, seeds, versus
from octlm.views.compare.versus import Versus
from octlm.views.details import SCHEMA_VERSION, Detail, detail, run_records
from octlm.views.paired import Paired, Unused, pair
from octlm.views.sweeps import replicates
from octlm.views.sweeps.replicates import LOSS_METRICS, Group, LossMetric

Records = Sequence[RunRecord]
ConfigDifferences = dict[str, dict[str, list[Any]]]  # {section: {dotted key: [value per config]}}


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


class ComparedFigures(TypedDict):
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
    eval_loss_se: float | None  # of the final eval_loss
    epochs: float | None
    data_blocks: int | None
    data_receipt: str | None


class Comparison(TypedDict):
    """The ``octlm show ID ID ... --json`` document."""

    schema_version: int
    ids: list[str]
    equal_tokens: int  # the tokens every experiment reached
    experiments: list[ComparedFigures]
    config: ConfigDifferences
    all_keys: bool
    versus: list[Versus]  # every experiment after the first, against the first
    replicates: list[Group | None]  # each experiment's replicate group (its configuration's seeds), if any
    min_effect: float  # the smallest difference of interest, in nats: the seeds needed are for 80% power at it


def compare(home: Home, ids: list[str], all_keys: bool = False, min_effect: float = noise.MIN_EFFECT) -> Comparison:
    """The ``octlm show ID ID ... --json`` document; BadInput for an unknown ID."""
    details = [detail(home, experiment_id) for experiment_id in ids]
    records = {d["id"]: run_records(home, d["id"]) for d in details}
    common = min((max((r.get("tokens") or 0 for r in recs), default=0) for recs in records.values()), default=0)
    groups, members = replicate_groups(home, ids)
    kept = {experiment_id: final_blocks(home, experiment_id, records[experiment_id]) for experiment_id in ids}
    sides = [
        versus.Side(d["id"], records[d["id"]], groups[index], members[index], _prints(d), d["config"])
        for index, d in enumerate(details)
    ]
    pending = [versus.measure(sides[0], side, *pairing(kept, ids[0], side.id), min_effect) for side in sides[1:]]
    return {
        "schema_version": SCHEMA_VERSION,
        "ids": ids,
        "equal_tokens": common,
        "experiments": [_figures(item, records[item["id"]], common) for item in details],
        "config": differing_keys([d["config"] for d in details], all_keys),
        "all_keys": all_keys,
        "versus": versus.settle(pending),
        "replicates": groups,
        "min_effect": min_effect,
    }


def replicate_groups(home: Home, ids: list[str]) -> tuple[list[Group | None], list[list[seeds.Member]]]:
    """Each experiment's replicate group among the registered experiments (None: it has no replicate), each
    member's final figures from its run file; and the members each group's mean is over, with their final
    evaluations block by block."""
    with Registry(home.registry, create=False) as registry:
        configs = registry.configs()
    found: list[Group | None] = []
    members: list[list[seeds.Member]] = []
    for experiment_id in ids:
        ids_of = replicates.group_of(experiment_id, configs)
        kept = {member: run_records(home, member) for member in ids_of}
        finals = {member: final_values(kept[member]) for member in ids_of}
        group = replicates.summarize(ids_of, configs, finals) if ids_of else None
        found.append(group)
        members.append(_members(home, group, kept, finals) if group else [])
    return found, members


def _members(home: Home, group: Group, kept: dict[str, Records], finals: dict[str, RunRecord]) -> list[seeds.Member]:
    """The counted members of a group with a final eval loss: its seed, its loss, its own error, its blocks."""
    found = []
    for member in group["counted"]:
        loss, blocks = finals[member].get("eval_loss"), final_blocks(home, member, kept[member])
        if isinstance(loss, (int, float)) and math.isfinite(loss):
            seed = group["seeds"][group["ids"].index(member)]
            error = finals[member].get("eval_loss_se")
            kept_blocks = blocks if isinstance(blocks, BlockEvaluation) else None  # not one a verdict may rest on
            found.append(seeds.Member(member, seed, float(loss), error, kept_blocks))
    return found


def _prints(item: Detail) -> dict[str, str | None]:
    """What an experiment trained on: its data and tokenizer fingerprints (``show ID``'s)."""
    return {"data": item["fingerprints"]["data"], "tokenizer": item["fingerprints"]["tokenizer"]}


def final_values(records: Records) -> RunRecord:
    """The newest value of each field of a run file."""
    merged: RunRecord = {}
    for record in records:
        merged.update(cast(RunRecord, {key: value for key, value in record.items() if value is not None}))
    return merged


def _metrics(value: Callable[[LossMetric], float | None]) -> Metrics:
    return {
        "train_loss": value("train_loss"),
        "eval_loss": value("eval_loss"),
        "perplexity": value("perplexity"),
        "bits_per_byte": value("bits_per_byte"),
    }


def _figures(item: Detail, records: Records, common: int) -> ComparedFigures:
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
        "eval_loss_se": _latest_of(records, "eval_loss_se"),
        "epochs": _latest_of(records, "epochs"),
        "data_blocks": last.get("data_blocks"),
        "data_receipt": last.get("data_receipt"),
    }


def final_blocks(home: Home, experiment_id: str, records: Records) -> evalblocks.BlockEvaluation | Unused | None:
    """The experiment's final evaluation block by block (``store.runs.evalblocks``), None where it was not kept, or
    ``Unused`` with why where it must not carry a verdict: its checksum does not match its arrays, or its sums are
    not the evaluation the run file recorded at that step (``evalblocks.disagreement``)."""
    record = next((r for r in reversed(records) if r.get("eval_loss") is not None), None)
    step = record.get("step") if record is not None else None
    if record is None or step is None:
        return None
    path = evalblocks.path_for(home.run_file(experiment_id))
    found = evalblocks.at_step(path, step)
    why = evalblocks.disagreement(found, record) if found is not None else None
    return found if why is None else Unused(step, why, f"{path.parent.name}/{path.name}")


def pairing(
    kept: dict[str, evalblocks.BlockEvaluation | Unused | None], first: str, other: str
) -> tuple[Paired | None, str]:
    """The paired figures of ``other - first``, or None and why not (the unpaired test's words, one line): a blocks
    file not used is named, with why, before one not kept."""
    for experiment_id in (first, other):
        if isinstance(unused := kept[experiment_id], Unused):
            return None, f"unpaired: {unused.file} is not used, {unused.reason}"
    missing = [experiment_id for experiment_id in (first, other) if kept[experiment_id] is None]
    if missing:
        return None, f"unpaired: {' and '.join(missing)} kept no evaluation block by block"
    a, b = kept[first], kept[other]
    found = (
        pair(a, b) if isinstance(a, evalblocks.BlockEvaluation) and isinstance(b, evalblocks.BlockEvaluation) else None
    )
    return found, "paired" if found is not None else "unpaired: not evaluated on the same blocks"


def sentences(result: Comparison) -> list[str]:
    """What the comparison says in words, below the table (``compare.versus.sentences``)."""
    return versus.sentences(result["ids"][0], result["versus"])


def _latest_of(records: Records, key: str) -> Any:
    """The newest value of any field (``_latest`` for the metrics)."""
    return next((value for record in reversed(records) if (value := record.get(key)) is not None), None)


def _verdict(verifications: list[VerificationRow], kind: str) -> str | None:
    found = [v for v in verifications if v["kind"] == kind]
    verdict: str | None = found[-1]["verdict"] if found else None  # a registry row's column
    return verdict


def _latest(records: Records, key: LossMetric, tokens: int | None = None) -> float | None:
    """The newest value of ``key`` (at or before ``tokens``): a run file logs the training loss more
    often than it evaluates, so the last record may not hold every metric."""
    for record in reversed(records):
        value = record.get(key)
        if value is not None and (tokens is None or (record.get("tokens") or 0) <= tokens):
            return value  # one of the metric fields: a number
    return None


def _at_tokens(records: Records, tokens: int) -> RunRecord | None:
    reached = [r for r in records if (r.get("tokens") or 0) <= tokens]
    return reached[-1] if reached else None


def _spread(group: Group | None) -> str | None:
    """A group's eval loss as ``mean ± sd (n seeds)``, for the table."""
    return replicates.shown(group["metrics"]["eval_loss"]) if group is not None else None


def differing_keys(configs: list[ConfigTree], all_keys: bool) -> ConfigDifferences:
    """{section: {dotted key: [value per config]}} for the keys that differ (every key with ``all_keys``)."""
    flat = [flatten(config) for config in configs]
    differing: ConfigDifferences = {}
    for key in sorted(set().union(*flat)) if flat else []:
        values = [f.get(key) for f in flat]
        if key != "id" and (all_keys or any(v != values[0] for v in values)):
            section = key.split(".", 1)[0] if "." in key else "top"
            differing.setdefault(section, {})[key] = values
    return differing


def table_rows(result: Comparison) -> list[tuple[str, list[Any]]]:
    """A comparison as (field, [value per experiment]) rows, for the text table and ``--csv``: its figures, then the
    config keys that differ."""
    return figure_rows(result) + config_rows(result)


def figure_rows(result: Comparison) -> list[tuple[str, list[Any]]]:
    """The figures' rows: metrics (final, best, at equal tokens), the differences, verdicts, the data order."""
    exps, at = result["experiments"], f"at {result['equal_tokens']:,} tokens"
    rows: list[tuple[str, list[Any]]] = [("status", [e["status"] for e in exps]), ("step", [e["step"] for e in exps])]
    for group in ("final", "best"):
        rows += [(f"{group} {metric}", [e[group][metric] for e in exps]) for metric in LOSS_METRICS]
        if group == "final":
            first = result["ids"][0]
            rows.append(("final eval_loss_se", [e["eval_loss_se"] for e in exps]))
            rows.append((f"eval_loss - {first}", [None, *(v["eval_loss_difference"] for v in result["versus"])]))
            rows.append(("combined se", [None, *(v["combined_se"] for v in result["versus"])]))
            if any(v["paired"] for v in result["versus"]):  # the same blocks: the paired error, the one judged by
                rows.append(("paired se", [None, *(_paired_se(v) for v in result["versus"])]))
            if any(group is not None for group in result["replicates"]):  # no empty row when none has replicates
                rows.append(("replicates eval_loss", [_spread(g) for g in result["replicates"]]))
    rows.append((f"{at}: step tokens", [e["at_equal_tokens"]["tokens"] for e in exps]))
    rows += [(f"{at}: {metric}", [e["at_equal_tokens"][metric] for e in exps]) for metric in LOSS_METRICS]
    for key in ("tokens", "tokens_per_second", "wall_seconds", "verify_resume", "overfit"):
        rows.append((key, [e[key] for e in exps]))
    rows.append(("epochs", [e["epochs"] for e in exps]))
    rows.append(("data_receipt", [e["data_receipt"] for e in exps]))
    return rows


def _paired_se(versus: Versus) -> float | None:
    return versus["paired"]["eval_loss_se"] if versus["paired"] is not None else None


def config_rows(result: Comparison) -> list[tuple[str, list[Any]]]:
    """The config keys that differ (every key with ``--all-keys``), one row each; descriptions are said beside."""
    return [(k, values) for keys in result["config"].values() for k, values in keys.items() if k != "description"]
