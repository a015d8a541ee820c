"""Writing what ``octlm show`` found: JSON, CSV, or tables (rich on a terminal, plain text otherwise)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich.console import Console

from ..config import flatten
from ..show import Request, Shown
from . import render

LIST_HEADERS = (
    "ID", "description", "status", "step", "train loss", "eval loss", "ppl", "bpb", "tokens", "verdict",
    "updated (UTC)",
)  # fmt: skip
LIST_DROPPABLE = ("updated (UTC)", "ppl", "train loss", "tokens", "verdict")
RUN_HEADERS = (
    "#", "kind", "status", "steps", "started", "host", "pid", "device", "dtype", "threads", "train loss", "eval loss",
)  # fmt: skip
PROVENANCE_HEADERS = (
    "#", "command", "git commit", "dirty", "versions (octlm/python/torch)", "duration s", "resumed from",
)  # fmt: skip


def write(shown: Shown, request: Request) -> None:
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
    elif shown.mode == "compare":
        title = " vs ".join(request.ids) + ("" if request.all_keys else "  (config: only keys that differ)")
        render.print_table(("", *request.ids), shown.rows, title=title)
    else:
        print_detail(render.out_console(), shown.document)


def write_csv(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> None:
    """CSV of plain text: control characters out (line breaks and tabs stay, quoted as CSV quotes them)."""
    writer = csv.writer(sys.stdout)
    writer.writerow(header)
    for row in rows:
        writer.writerow(
            ["" if v is None else render.plain(v, multiline=True) if isinstance(v, str) else v for v in row]
        )


def _list(shown: Shown, request: Request) -> None:
    rows = shown.document["experiments"]
    if not rows:
        hint = " match" if request.where else ": create one with `octlm new --preset day1`"
        render.info(f"no experiments in {shown.document['home']}{hint}")
    elif request.columns:
        render.print_table(shown.header, shown.rows)
    else:
        render.print_table(LIST_HEADERS, (_list_row(row) for row in rows), droppable=LIST_DROPPABLE)


def _list_row(r: dict[str, Any]) -> tuple[Any, ...]:
    step = f"{r['step'] or 0}/{r['steps']}" if r["steps"] else "-"
    updated = _cut(r["updated"], 16).replace("T", " ")
    return (r["id"], r["description"], r["status"], step, r["train_loss"], r["eval_loss"], r["perplexity"],
            r["bits_per_byte"], r["tokens"], r["last_verdict"], updated)  # fmt: skip


def print_detail(console: Console, item: dict[str, Any]) -> None:
    fingerprints = item["fingerprints"]
    console.print(render.key_values(f"{item['id']}  {item['description']}", [
        ("status", item["status"]), ("step", item["step"]), ("config fingerprint", fingerprints["config"]),
        ("data hash", fingerprints["data"]), ("tokenizer hash", fingerprints["tokenizer"]),
    ]))  # fmt: skip
    console.print(render.key_values("config", flatten(item["config"]).items()))
    if item["runs"]:
        console.print(render.table("runs", RUN_HEADERS, (_run_row(r) for r in item["runs"])))
        console.print(render.table("provenance", PROVENANCE_HEADERS, (_provenance_row(r) for r in item["runs"])))
    if item["checkpoints"]:
        rows = ((c["step"], c["path"], c["size"], _cut(c["sha256"], 16)) for c in item["checkpoints"])
        console.print(render.table("checkpoints", ("step", "path", "size", "sha256"), rows))
    if item["verifications"]:
        rows = ((v["kind"], v["verdict"], _cut(v["created"], 19), v["details"].get("summary", ""))
                for v in item["verifications"])  # fmt: skip
        console.print(render.table("verdicts", ("kind", "verdict", "when", "summary"), rows))


def _run_row(r: dict[str, Any]) -> tuple[Any, ...]:
    metrics = r["latest_metrics"] if isinstance(r["latest_metrics"], dict) else {}
    return (r["id"], r["kind"], r["status"], f"{r['start_step']}->{r['end_step']}", _cut(r["started"], 19),
            r["host"], r["pid"], r["device"], r["dtype"], r["threads"], metrics.get("train_loss"),
            metrics.get("eval_loss"))  # fmt: skip


def _provenance_row(r: dict[str, Any]) -> tuple[Any, ...]:
    command = " ".join(map(str, r["argv"])) if isinstance(r["argv"], list) else r["argv"]
    versions = f"{r['octlm_version']}/{r['python_version']}/{r['torch_version']}"
    dirty = {1: "yes", 0: "no"}.get(r["git_dirty"])
    return (r["id"], command, _cut(r["git_commit"], 12), dirty, versions, _duration(r), r["resumed_from"])


def _cut(value: Any, length: int) -> str:
    """The first ``length`` characters of a cell as text ("" for none), whatever the registry holds."""
    return "" if value is None else str(value)[:length]


def _duration(run: dict[str, Any]) -> float | None:
    try:
        return round((datetime.fromisoformat(run["ended"]) - datetime.fromisoformat(run["started"])).total_seconds(), 1)
    except (TypeError, ValueError):  # not finished, or a timestamp damaged outside octlm
        return None
