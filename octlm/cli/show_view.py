"""Writing what ``octlm show`` found: JSON, CSV, or tables (rich on a terminal, plain text otherwise)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from octlm.cli import formats, render
from octlm.config import flatten
from octlm.core.reporting import counted
from octlm.views import details, side_by_side
from octlm.views.listing import columns as listed
from octlm.views.show import Shown, ShowRequest
from octlm.views.sweeps import replicates

if TYPE_CHECKING:
    from octlm.store.registry import RunRow, VerificationRow
    from octlm.views.details import Detail
    from octlm.views.listing import Listing
    from octlm.views.sweeps.status import SweepRanking

RUN_HEADERS = (
    "#",
    "kind",
    "status",
    "steps",
    "started",
    "host",
    "pid",
    "device",
    "dtype",
    "threads",
    "ranks",
    "train loss",
    "eval loss",
)
RUN_DROPPABLE = ("threads", "dtype", "ranks", "host", "device", "started", "train loss")
PROVENANCE_HEADERS = (
    "#",
    "command",
    "git commit",
    "dirty",
    "versions (octlm/python/torch)",
    "duration s",
    "load",
    "peak MB",
    "resumed from",
)
PROVENANCE_DROPPABLE = ("versions (octlm/python/torch)", "dirty", "resumed from", "git commit", "load", "peak MB")
SPREAD = (("eval_loss", "eval loss"), ("train_loss", "train loss"))  # a replicate group's line under the list
LIFECYCLE = ("tags", "notes", "archived", "parent")  # shown in the detail when the document has them


def write(shown: Shown, request: ShowRequest) -> None:
    for warning in shown.warnings:
        render.warn(warning)
    if request.as_json:
        render.emit_json(shown.document)
    elif shown.text is not None:
        sys.stdout.write(render.plain(shown.text, multiline=True))
    elif request.as_csv:
        write_csv(shown.header, shown.rows)
    elif shown.mode == "list":
        _list(shown, request)
    elif shown.mode == "sweep":
        print_sweep(shown)
    elif shown.mode == "compare":
        title = " vs ".join(request.ids) + ("" if request.all_keys else "  (config: only keys that differ)")
        print_compare(list(request.ids), shown.rows, title)
        document = cast(side_by_side.Comparison, shown.document)
        for line in side_by_side.sentences(document):
            render.say(line)
        for experiment in document["experiments"]:  # below the table, so a long one never widens it
            if experiment["description"]:
                print(f"{experiment['id']}: {render.plain(experiment['description'])}")
    else:
        print_detail(cast("Detail", shown.document))


def print_compare(ids: list[str], rows: list[list[Any]], title: str) -> None:
    """Fields down, experiments across; each value formatted by its field's kind. On a terminal too narrow
    for every experiment, several tables of as many experiments as fit, with a note saying so."""
    body = [
        [render.plain(row[0]), *(formats.format_cell(formats.kind_of(str(row[0])), v) for v in row[1:])] for row in rows
    ]
    groups = _groups(["", *ids], body, render.out_console().width) if render.terminal() else [list(range(len(ids)))]
    if len(groups) > 1:
        render.info(f"note: {len(ids)} experiments do not fit side by side: shown in {counted(len(groups), 'table')}")
    for number, group in enumerate(groups, 1):
        header = ["", *(ids[i] for i in group)]
        part = [[row[0], *(row[i + 1] for i in group)] for row in body]
        suffix = f"  ({number}/{len(groups)})" if len(groups) > 1 else ""
        render.print_table(header, part, title=title + suffix, kinds=["raw"] * len(header))


def _groups(header: list[str], body: list[list[str]], width: int) -> list[list[int]]:
    """Experiments (indexes) in groups whose tables, field column included, fit ``width``."""
    widths = [max([len(header[c]), *(len(row[c]) for row in body)]) + 3 for c in range(len(header))]
    groups: list[list[int]] = [[]]
    used = widths[0]
    for index, column in enumerate(widths[1:]):
        if groups[-1] and used + column > width + 1:
            groups.append([])
            used = widths[0]
        groups[-1].append(index)
        used += column
    return groups


def write_csv(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> None:
    """CSV of plain text: control characters out (line breaks and tabs stay, quoted as CSV quotes them)."""
    writer = csv.writer(sys.stdout)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_csv_cell(v) for v in row])


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list):  # tags
        value = " ".join(str(item) for item in value)
    return "" if value is None else render.plain(value, multiline=True) if isinstance(value, str) else value


def _list(shown: Shown, request: ShowRequest) -> None:
    document = cast("Listing", shown.document)  # the list's
    rows = document["experiments"]
    if not rows:
        hint = " match" if request.where else ": create one with `octlm new --preset day1`"
        render.info(f"no experiments in {document['home']}{hint}")
    elif request.columns:  # headed by the keys asked for, each written as the spec says (else as its name suggests)
        kinds = [listed.BY_KEY[key].format if key in listed.BY_KEY else formats.kind_of(key) for key in shown.header]
        render.print_table(shown.header, shown.rows, kinds=kinds)
    else:  # the spec's table: its headers, cells and formats, left out at a narrow terminal in its drop order
        headers = [str(column.header) for column in listed.TABLE]
        kinds = [column.format for column in listed.TABLE]
        cells = (listed.cells(row) for row in rows)
        render.print_table(headers, cells, droppable=listed.DROP_ORDER, kinds=kinds)
        for group in [g for g in document.get("replicates") or [] if len(g["counted"]) > 1 and g["step"]]:
            spread = ", ".join(f"{name} {replicates.shown(group['metrics'][key])}" for key, name in SPREAD)
            at = f" at step {group['step']}" if group["step"] else ""
            print(render.plain(f"replicates {', '.join(group['counted'])}{at}: {spread}"))


def print_sweep(shown: Shown) -> None:
    """A sweep's configurations, ranked, with the seeds' spread; the verdict in words, then the notes on the winner
    (the best so far as the luckiest trial, the configurations within noise of the best, its optimism, the advice)."""
    found = cast("SweepRanking", shown.document)  # a sweep's
    metric = found["metric"]
    rows = [
        (c["rank"], _pairs(c["params"]), len(c["trials"]), c["step"], replicates.shown(c["value"]), c["eval_loss_se"])
        for c in found["configurations"]
    ]
    title = f"sweep {found['name']}: configurations by {metric} (mean ± sd over the seeds), the furthest step first"
    header = ("rank", "params", "trials", "step", metric, "eval loss se")
    render.print_table(header, rows, title=title, droppable=("eval loss se", "trials", "step"))
    render.say(found["verdict"])  # the winner, its margin and its test
    for line in found.get("notes") or []:  # the best so far, who is within noise of the best, its optimism, advice
        render.say(line)


def _pairs(params: dict[str, Any]) -> str:
    return " ".join(f"{key}={formats.shown_value(value)}" for key, value in params.items()) or "-"


def headline(item: Detail) -> str:
    """The line ``train`` ended with (``views.details.headline``, of the newest training run): before the config."""
    return details.headline(details.detail_headline(item))


def print_detail(item: Detail) -> None:
    """One experiment: its summary and config as ``key: value`` lines, then its runs, provenance,
    checkpoints and verdicts as tables (rich on a terminal, plain text otherwise)."""
    fingerprints = item["fingerprints"]
    render.say(headline(item))  # one line in a pipe; on a terminal wrapped at words
    render.print_pairs(
        f"{item['id']}  {item['description']}",
        [
            ("status", item["status"]),
            ("step", item["step"]),
            ("world sizes", item["moves"]),
            *_lifecycle(item),
            ("config fingerprint", fingerprints["config"]),
            ("data hash", fingerprints["data"]),
            ("tokenizer hash", fingerprints["tokenizer"]),
        ],
    )
    _gap()
    render.print_pairs("config", flatten(item["config"]).items())
    if item["runs"]:
        _gap()
        render.print_table(RUN_HEADERS, [_run_row(r) for r in item["runs"]], title="runs", droppable=RUN_DROPPABLE)
        _gap()
        rows = [_provenance_row(r) for r in item["runs"]]
        render.print_table(PROVENANCE_HEADERS, rows, title="provenance", droppable=PROVENANCE_DROPPABLE)
    if item["checkpoints"]:
        _gap()
        rows = [(c["step"], c["path"], c["size"], _cut(c["sha256"], 16)) for c in item["checkpoints"]]
        render.print_table(("step", "path", "size", "sha256"), rows, title="checkpoints", droppable=("sha256",))
    if item["verifications"]:
        _gap()
        rows = [
            (v["kind"], v["verdict"], _cut(v["created"], 19).replace("T", " "), _summary(v))
            for v in item["verifications"]
        ]
        render.print_table(("kind", "verdict", "when", "summary"), rows, title="verdicts", droppable=("when",))


def _lifecycle(item: Detail) -> list[tuple[str, Any]]:
    """Tags, notes, archived and the parent checkpoint of a fork, when the document has them."""
    pairs: list[tuple[str, Any]] = []
    tags = item.get("tags")
    if tags:
        pairs.append(("tags", tags))
    if item.get("archived"):
        pairs.append(("archived", True))
    if item.get("parent"):
        pairs.append(("forked from", item["parent"]))
    notes = item.get("notes") or []
    for note in notes if isinstance(notes, list) else [notes]:
        text = note.get("text") if isinstance(note, dict) else note
        when = _cut(note.get("created"), 16).replace("T", " ") if isinstance(note, dict) else ""
        pairs.append(("note", f"{when}  {text}".strip()))
    return pairs


def _summary(verification: VerificationRow) -> Any:
    details = verification["details"]
    return details.get("summary", "") if isinstance(details, dict) else ""


def _gap() -> None:
    sys.stdout.write("\n")


def _run_row(r: RunRow) -> tuple[Any, ...]:
    metrics = r["latest_metrics"] if isinstance(r["latest_metrics"], dict) else {}
    started = _cut(r["started"], 19).replace("T", " ")
    return (
        r["id"],
        r["kind"],
        r["status"],
        f"{r['start_step']}->{r['end_step']}",
        started,
        r["host"],
        r["pid"],
        r["device"],
        r["dtype"],
        r["threads"],
        ranks(r),
        metrics.get("train_loss"),
        metrics.get("eval_loss"),
    )


def ranks(r: RunRow) -> str:
    """The processes a run trained on: ``1``; ``4 gloo`` (the backend only for several ranks); ``4 nccl,
    2 nodes`` over several nodes; then ``, resharded from 2`` for a run resumed under another world size.
    A row without the columns (or with a damaged cell) reads as one process on one node."""
    size = _count(r.get("world_size"))
    nodes = _count(r.get("nnodes"))
    text = str(size)
    if size > 1 and r.get("backend"):
        text += f" {r['backend']}"
    if nodes > 1:
        text += f", {nodes} nodes"
    resharded = r.get("resharded_from")
    if isinstance(resharded, int) and not isinstance(resharded, bool):  # a damaged cell reads as none
        text += f", resharded from {resharded}"
    return text


def _count(value: Any) -> int:
    """A world size or node count as stored; 1 for none or anything that is not a positive whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _provenance_row(r: RunRow) -> tuple[Any, ...]:
    command = " ".join(map(str, r["argv"])) if isinstance(r["argv"], list) else r["argv"]
    versions = f"{r['octlm_version']}/{r['python_version']}/{r['torch_version']}"
    dirty = {1: "yes", 0: "no"}.get(r["git_dirty"]) if r["git_dirty"] is not None else None
    peak = r.get("peak_rss")
    memory = round(peak / 1e6) if isinstance(peak, int) else None
    return (
        r["id"],
        command,
        _cut(r["git_commit"], 12),
        dirty,
        versions,
        _duration(r),
        r.get("load_average"),
        memory,
        r["resumed_from"],
    )


def _cut(value: Any, length: int) -> str:
    """The first ``length`` characters of a cell as text ("" for none), whatever the registry holds."""
    return "" if value is None else str(value)[:length]


def _duration(run: RunRow) -> float | None:
    try:
        ended, started = datetime.fromisoformat(run["ended"] or ""), datetime.fromisoformat(run["started"] or "")
        return round((ended - started).total_seconds(), 1)
    except (TypeError, ValueError):  # not finished, or a timestamp damaged outside octlm
        return None
