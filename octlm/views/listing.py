"""The experiment list of ``octlm show``: its rows, ``--where`` filters, ``--sort``, ``--limit`` and ``--columns``,
and the seed replicates among them (mean ± sd of each metric).

Torch-free. Filters are Python predicates over the rows, never SQL.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypedDict

from octlm.config import describe_keys, flatten
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import Home, id_sort_key
from octlm.core.records.freeform import TableRow
from octlm.store import experiments
from octlm.store.registry import Registry, SummaryRow, VerificationRow
from octlm.views.sweeps import replicates
from octlm.views.sweeps.replicates import Group


class ListingRow(TypedDict):
    """One experiment in the list (``octlm show``): the listing columns, in their order."""

    id: str
    description: Any  # the YAML's, when it changed after the registry row was written
    status: str  # of its newest training run ("new": none), "running" while one runs
    step: int | None
    steps: int | None  # training.steps
    train_loss: float | None
    eval_loss: float | None
    eval_loss_se: float | None  # its standard error over the evaluation's blocks
    perplexity: float | None
    bits_per_byte: float | None
    tokens: int | None
    last_verdict: str | None  # the newest of each kind: "verify-resume: pass; eval on corpus/*.txt: 6.0436 ± 0.0038"
    updated: str | None  # UTC, ISO 8601
    tags: list[str]
    archived: bool


LIST_COLUMNS: tuple[str, ...] = tuple(ListingRow.__annotations__)


class Listing(TypedDict):
    """The ``octlm show --json`` document."""

    schema_version: int
    home: str
    experiments: list[dict[str, Any]]  # the rows cut to the columns chosen (config keys among them)
    replicates: list[Group]  # the seed replicates among them: mean ± sd of their latest metrics


NUMERIC_COLUMNS = frozenset(
    {"step", "steps", "train_loss", "eval_loss", "eval_loss_se", "perplexity", "bits_per_byte", "tokens"}
)
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "!=": operator.ne,
    "==": operator.eq,
    "=": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
    "~": operator.contains,
}
WHERE = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(==|!=|<=|>=|=|<|>|~)\s*(.*?)\s*")
WHERE_HELP = "KEY OP VALUE, KEY a listing column or a config key, OP one of == (or =), !=, <, <=, >, >=, ~ (contains)"
Cells = Mapping[str, Any]  # a row as a filter reads it


def rows(home: Home, include_archived: bool = True) -> list[ListingRow]:
    """One row per experiment (registered or only a file), by ID, with every listing column; archived
    experiments only with ``include_archived``."""
    with Registry(home.registry, create=False) as registry:
        summaries = registry.summary_rows()
        running = {row["experiment_id"]: row["status"] for row in registry.running_runs()}
        verdicts = verdict_cells(registry.newest_verdicts())
    out = [
        _registered(home, row, running.get(row["id"], row["status"] or "new"), verdicts.get(row["id"]))
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


def _registered(home: Home, summary: SummaryRow, status: str, verdicts: str | None) -> ListingRow:
    """A row of the registry's ``experiment_summary`` view as a listing row, with its verdicts (``verdict_cells``:
    the view's own ``last_verdict`` is the newest of any kind, an evaluation's figure as readily as a proof's)."""
    return {
        "id": summary["id"],
        "description": _description(home, summary),
        "status": status,
        "step": summary.get("step"),
        "steps": summary.get("steps"),
        "train_loss": summary.get("train_loss"),
        "eval_loss": summary.get("eval_loss"),
        "eval_loss_se": summary.get("eval_loss_se"),
        "perplexity": summary.get("perplexity"),
        "bits_per_byte": summary.get("bits_per_byte"),
        "tokens": summary.get("tokens"),
        "last_verdict": verdicts,
        "updated": summary.get("updated"),
        "tags": _tags(summary.get("tags")),
        "archived": bool(summary.get("archived")),
    }


def _unregistered(experiment_id: str, description: Any, steps: int | None) -> ListingRow:
    """An experiment that is only a YAML file so far."""
    return {
        "id": experiment_id,
        "description": description,
        "status": "new",
        "step": None,
        "steps": steps,
        "train_loss": None,
        "eval_loss": None,
        "eval_loss_se": None,
        "perplexity": None,
        "bits_per_byte": None,
        "tokens": None,
        "last_verdict": None,
        "updated": None,
        "tags": [],
        "archived": False,
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
    """The rows ``octlm show`` lists: filtered, sorted, cut to ``limit`` and to ``columns`` (default LIST_COLUMNS);
    archived experiments only with ``include_archived``."""
    tests = [predicate(expression) for expression in where]  # a malformed filter is BadInput before any read
    found: list[TableRow] = [dict(row) for row in rows(home, include_archived)]
    if any("." in text for text in [*where, sort or "", *(columns or [])]):
        found = with_config(home, found)
    found = filter_rows([row for row in found if all(test(row) for test in tests)], [], sort, limit)
    return project(found, columns)


FINALS = {"step", "eval_loss_se", *replicates.METRICS}  # what a replicate group's figures are made of


def replicate_groups(home: Home, found: list[TableRow]) -> list[Group]:
    """The seed replicates among the listed experiments (the same config but for ``training.seed``), each group
    with the mean ± sd of its members' latest metrics."""
    ids = {row["id"] for row in found}
    finals: Mapping[str, Mapping[str, object]] = {row["id"]: row for row in found}  # the listed figures themselves
    with Registry(home.registry, create=False) as registry:
        configs = {i: config for i, config in registry.configs().items() if i in ids}
        if not all(FINALS <= row.keys() for row in found):  # --columns left some out: read them again
            finals = {row["id"]: row for row in registry.summary_rows() if row["id"] in ids}
    return [replicates.summarize(group, configs, finals) for group in replicates.groups(configs)]


def parse_columns(text: str | None) -> list[str] | None:
    """``--columns eval_loss,model.n_layers`` as a list (None: the default columns)."""
    return [column.strip() for column in text.split(",")] if text else None


def header(columns: list[str] | None) -> list[str]:
    """The columns a listing shows: ``id`` first, then the chosen ones (default: LIST_COLUMNS)."""
    if not columns:
        return list(LIST_COLUMNS)
    unknown = [c for c in columns if c not in LIST_COLUMNS and c not in config_keys()]
    if unknown:
        raise BadInput(f"--columns {unknown[0]}: unknown column; choose from {', '.join(LIST_COLUMNS)} or a config key")
    return ["id", *[c for c in columns if c != "id"]]


def project(found: list[TableRow], columns: list[str] | None) -> list[TableRow]:
    chosen = header(columns)
    return [{c: row.get(c) for c in chosen} for row in found]


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


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def config_keys() -> dict[str, str]:
    """{config key: its type} (``training.steps``: ``int``)."""
    return {item["key"]: str(item["type"]) for item in describe_keys()}


def parse_where(expression: str) -> tuple[str, str, str]:
    """``(key, op, value)`` of a ``--where`` expression; BadInput naming what is wrong with it."""
    match = WHERE.fullmatch(expression)
    if not match:
        raise BadInput(f"--where {expression!r}: expected {WHERE_HELP}")
    key, op, raw = match.groups()
    if raw == "" or raw[0] in "<>=!~":
        raise BadInput(f"--where {expression!r}: malformed value {raw!r} after {op!r}; expected {WHERE_HELP}")
    types = config_keys()
    if key not in LIST_COLUMNS and key not in types:
        raise BadInput(f"--where {key}: unknown key; use a listing column ({', '.join(LIST_COLUMNS)}) or a config key")
    numeric = key in NUMERIC_COLUMNS or types.get(key) in ("int", "float")
    if numeric and op not in ("~",) and _number(raw) is None:
        raise BadInput(f"--where {expression!r}: {key} is a number; {raw!r} is not")
    return key, "==" if op == "=" else op, raw


def predicate(expression: str) -> Callable[[Cells], bool]:
    """``eval_loss<2.5``, ``status=completed``, ``model.n_layers==4``, ``description~lr``: a Python predicate,
    never SQL. A number given with decimals matches at that precision (``eval_loss==4.39`` matches 4.3912)."""
    key, op, raw = parse_where(expression)
    wanted = _number(raw)

    def test(row: Cells) -> bool:
        value = row.get(key)
        if value is None:
            return op == "!="
        if isinstance(value, list):
            return _any_item(op, raw, value)
        have = _number(value) if not isinstance(value, bool) else None
        if op == "~":
            return raw.lower() in _text(value).lower()
        if wanted is not None and have is not None:
            return _compare_numbers(op, have, wanted, raw)
        return bool(OPERATORS[op](_text(value), raw))  # text: equal, or in order (an ID, a date)

    return test


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _any_item(op: str, raw: str, items: list[Any]) -> bool:
    """A list (tags): ``==`` one item is ``raw``, ``!=`` none is, ``~`` one contains it."""
    texts = [_text(item) for item in items]
    if op == "~":
        return any(raw.lower() in t.lower() for t in texts)
    return (raw in texts) if op != "!=" else raw not in texts


def _compare_numbers(op: str, have: float, wanted: float, raw: str) -> bool:
    if op in ("==", "!=") and "." in raw and "e" not in raw.lower():
        decimals = len(raw.split(".", 1)[1])
        same = abs(have - wanted) <= 0.5 * 10**-decimals + 1e-12
        return same if op == "==" else not same
    return bool(OPERATORS[op](have, wanted))


def filter_rows(found: list[TableRow], where: list[str], sort: str | None, limit: int | None) -> list[TableRow]:
    tests = [predicate(expression) for expression in where]
    found = [row for row in found if all(test(row) for test in tests)]
    if sort:
        found = sort_rows(found, sort)
    if limit is not None:
        if limit < 0:
            raise BadInput(f"--limit {limit}: must not be negative")
        found = found[:limit]
    return found


def sort_rows(found: list[TableRow], sort: str) -> list[TableRow]:
    """Sort by a column or config key (``-key``: descending); rows without the key go last."""
    key, reverse = (sort[1:], True) if sort.startswith("-") else (sort, False)
    if key not in LIST_COLUMNS and key not in config_keys():
        raise BadInput(
            f"--sort {key}: unknown column; use a listing column or a config key such as training.learning_rate"
        )
    present = [r for r in found if r.get(key) is not None]
    missing = [r for r in found if r.get(key) is None]
    present.sort(key=lambda r: (_number(r[key]) is None, _number(r[key]) or 0.0, str(r[key])), reverse=reverse)
    return present + missing
