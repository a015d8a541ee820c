"""The experiment list's rows (torch-free): one per experiment, registered or only a file, with the experiment's own
columns (its registry row, its newest training run's status and step, its verdicts, its YAML's description) and,
whole, the newest record of its newest training run (every figure the run file's records carry, as its run row
holds it); then cut to what ``--where``, ``--sort``, ``--limit`` and ``--columns`` ask (``filters``), and the seed
replicates among them (mean ± sd of each metric).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from octlm.config import flatten
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import Home, id_sort_key
from octlm.core.records.freeform import TableRow
from octlm.store import experiments
from octlm.store.registry import Registry, SummaryRow, VerificationRow
from octlm.views.listing import filters
from octlm.views.sweeps import replicates
from octlm.views.sweeps.replicates import Group


class Listing(TypedDict):
    """The ``octlm show --json`` document."""

    schema_version: int
    home: str
    experiments: list[TableRow]  # the rows cut to the columns chosen (config keys and record fields among them)
    replicates: list[Group]  # the seed replicates among them: mean ± sd of their latest metrics


def rows(home: Home, include_archived: bool = True) -> list[TableRow]:
    """One row per experiment (registered or only a file), by ID: its own columns (``columns.OWN``) over every field
    of its newest training run's newest record; archived experiments only with ``include_archived``."""
    with Registry(home.registry, create=False) as registry:
        summaries = registry.summary_rows()
        running = {row["experiment_id"]: row["status"] for row in registry.running_runs()}
        verdicts = verdict_cells(registry.newest_verdicts())
        newest = registry.newest_records()
    out = [
        {
            **newest.get(row["id"], {}),
            **_registered(home, row, running.get(row["id"], row["status"] or "new"), verdicts.get(row["id"])),
        }
        for row in summaries
    ]
    for missing in experiments.unregistered_files(home, {row["id"] for row in summaries}):
        config = _file_config(home, missing) or {}
        out.append(_unregistered(missing, config.get("description"), config.get("training", {}).get("steps")))
    out.sort(key=lambda row: id_sort_key(str(row["id"])))
    return out if include_archived else [row for row in out if not row["archived"]]


EVALUATION = "eval"  # the verdict kind of ``octlm eval``: a figure on a corpus, not a check that passes or fails


def verdict_cells(newest: list[VerificationRow]) -> dict[str, str]:
    """{experiment ID: its verdicts as one cell}: the newest of each kind, the checks (verify-resume, overfit) first,
    newest first, then the newest evaluation, named by what it read, so that an ``eval --on`` after a proof is never
    taken for the experiment's verdict: ``verify-resume: pass; eval on corpus/*.txt: 6.0436 ± 0.0038``."""
    ordered = sorted(newest, key=lambda row: (row["kind"] == EVALUATION, -row["id"]))
    cells: dict[str, list[str]] = {}
    for row in ordered:
        cells.setdefault(row["experiment_id"], []).append(f"{_verdict_kind(row)}: {row['verdict']}")
    return {experiment_id: "; ".join(parts) for experiment_id, parts in cells.items()}


def _verdict_kind(row: VerificationRow) -> str:
    """The kind, an evaluation's with the sources it read (``eval on corpus/*.txt``, ``eval on validation``)."""
    details = row["details"] if isinstance(row["details"], dict) else {}
    on = details.get("on")
    if row["kind"] != EVALUATION or not isinstance(on, list) or not on:
        return row["kind"]
    return f"{row['kind']} on {', '.join(str(source) for source in on)}"


def _registered(home: Home, summary: SummaryRow, status: str, verdicts: str | None) -> TableRow:
    """The experiment's own columns from its row of the registry's ``experiment_summary`` view, with its verdicts
    (``verdict_cells``: the view's own ``last_verdict`` is the newest of any kind, an evaluation's figure as readily
    as a proof's). Its figures are its newest record's, never the view's: the view holds those m010 made it hold."""
    return {
        "id": summary["id"],
        "description": _description(home, summary),
        "tags": _tags(summary.get("tags")),
        "archived": bool(summary.get("archived")),
        "status": status,
        "step": summary.get("step"),
        "steps": summary.get("steps"),
        "last_verdict": verdicts,
        "updated": summary.get("updated"),
    }


def _unregistered(experiment_id: str, description: Any, steps: int | None) -> TableRow:
    """An experiment that is only a YAML file so far: no run, so no figures."""
    return {
        "id": experiment_id,
        "description": description,
        "tags": [],
        "archived": False,
        "status": "new",
        "step": None,
        "steps": steps,
        "last_verdict": None,
        "updated": None,
    }


def _description(home: Home, row: SummaryRow) -> Any:
    """The YAML's description when the file changed after the row was last written (edits show at once)."""
    try:
        changed = home.config_path(row["id"]).stat().st_mtime
        updated = row["updated"]
        written = datetime.fromisoformat(updated).timestamp() if updated else 0.0
    except (OSError, ValueError, BadInput):
        return row.get("description")
    fresh = experiments.description(home, row["id"]) if changed > written else None
    return row.get("description") if fresh is None else fresh


def _tags(value: Any) -> list[str]:
    return [str(tag) for tag in value] if isinstance(value, list) else []


def select(
    home: Home,
    *,
    where: list[str],
    sort: str | None,
    limit: int | None,
    columns: list[str] | None,
    include_archived: bool = False,
) -> list[TableRow]:
    """The rows ``octlm show`` lists: filtered, sorted, cut to ``limit`` and to ``columns`` (default: the spec's);
    archived experiments only with ``include_archived``."""
    tests = [filters.predicate(expression) for expression in where]  # a malformed filter is BadInput before any read
    filters.header(columns)  # so is an unknown column
    found = rows(home, include_archived)
    if any("." in text for text in [*where, sort or "", *(columns or [])]):
        found = with_config(home, found)
    found = filters.filter_rows([row for row in found if all(test(row) for test in tests)], [], sort, limit)
    return filters.project(found, columns)


FINALS = {"step", "eval_loss_se", *replicates.LOSS_METRICS}  # what a replicate group's figures are made of


def replicate_groups(home: Home, found: list[TableRow]) -> list[Group]:
    """The seed replicates among the listed experiments (the same config but for ``training.seed``), each group
    with the mean ± sd of its members' latest metrics."""
    ids = {row["id"] for row in found}
    finals: Mapping[str, Mapping[str, object]] = {row["id"]: row for row in found}  # the listed figures themselves
    with Registry(home.registry, create=False) as registry:
        configs = {i: config for i, config in registry.configs().items() if i in ids}
    if not all(FINALS <= row.keys() for row in found):  # --columns left some out: read them again
        finals = {row["id"]: row for row in rows(home) if row["id"] in ids}
    return [replicates.summarize(group, configs, finals) for group in replicates.groups(configs)]


def with_config(home: Home, found: list[TableRow]) -> list[TableRow]:
    """Add flattened config keys to listing rows (for --where and --columns on config keys)."""
    with Registry(home.registry, create=False) as registry:
        configs = registry.configs()
    for row in found:  # an experiment that is only a file so far: its YAML
        if row["id"] not in configs and (config := _file_config(home, row["id"])) is not None:
            configs[row["id"]] = config
    return [{**row, **{k: v for k, v in flatten(configs.get(row["id"], {})).items() if "." in k}} for row in found]


def _file_config(home: Home, experiment_id: str) -> dict[str, Any] | None:
    try:
        return experiments.load(home, experiment_id).to_dict()
    except OctlmError:
        return None
