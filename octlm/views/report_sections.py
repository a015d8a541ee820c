"""The sections of ``octlm report``'s page as HTML lines: facts, fingerprints, runs with provenance,
checkpoints, verdicts (verify-resume's checks; overfit beside the seed notebook's figures) and the
side-by-side comparison. Torch-free; every value goes through ``charts.esc``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from octlm.core.home import Home
from octlm.store import runfile
from octlm.views import charts, compare
from octlm.views.charts import esc, number
from octlm.views.details import NUMBERS

# The seed notebook's overfit figures (day1, EXP-008, on its first block), shown beside octlm's.
SEED_OVERFIT = {
    "first": "5.5891 (step 20)",
    "last": "0.9121 (step 200)",
    "evaluated": "\u2013",
    "perplexity": "2.4830",
    "bits_per_byte": "0.6338",
    "decode": "the block's opening",
}
NO_VERDICTS = (
    "No verdicts yet: <code>octlm verify-resume ID --split-at N</code> and <code>octlm overfit ID</code> add them."
)


def _dict(value: Any) -> dict[str, Any]:
    """A registry cell that should be a mapping: as it is, or empty when damaged."""
    return value if isinstance(value, dict) else {}


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(header: Iterable[str] | None, rows: Iterable[Iterable[Any]], hashes: Iterable[int] = ()) -> list[str]:
    """An HTML table (no header row for None); numbers right-aligned, the columns in ``hashes`` monospaced."""
    mono = set(hashes)
    out = ["<table>"] + (["<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"] if header else [])
    for row in rows:
        cells = []
        for index, value in enumerate(row):
            kind = ' class="n"' if _numeric(value) else ' class="h"' if index in mono else ""
            cells.append(f"<td{kind}>{esc(value)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return [*out, "</table>"]


def _cut(value: Any, length: int) -> str | None:
    return None if value is None else str(value)[:length]


def _when(value: Any, length: int = 19) -> str | None:
    """A registry timestamp (UTC) to the second (or ``length`` characters), date and time apart."""
    return None if value is None else str(value)[:length].replace("T", " ")


def facts(item: dict[str, Any]) -> list[str]:
    """Status, step, tags, archived, parent and notes, as a two-column table."""
    steps = _dict(_dict(item["config"]).get("training")).get("steps")
    rows: list[tuple[str, Any]] = [("status", item["status"]), ("step", f"{number(item['step'])} of {number(steps)}")]
    if item.get("tags"):
        rows.append(("tags", " ".join(map(str, item["tags"]))))
    if item.get("archived"):
        rows.append(("archived", True))
    if item.get("parent"):
        rows.append(("forked from", item["parent"]))
    for note in item.get("notes") or []:
        text = note.get("text") if isinstance(note, dict) else note
        when = _when(note.get("created"), 16) if isinstance(note, dict) else None
        rows.append(("note", f"{when}  {text}" if when else text))
    return table(None, rows)


def fingerprints(item: dict[str, Any]) -> list[str]:
    rows = [(name, value) for name, value in item["fingerprints"].items()]
    return table(("fingerprint", "sha256"), rows, hashes=(1,))


def _ranks(run: dict[str, Any]) -> str:
    size = run["world_size"] if isinstance(run.get("world_size"), int) else 1
    text = str(size) + (f" {run['backend']}" if size > 1 and run.get("backend") else "")
    nodes = run.get("nnodes")
    return text + (f", {nodes} nodes" if isinstance(nodes, int) and nodes > 1 else "")


def runs(rows: list[dict[str, Any]]) -> list[str]:
    """Each run (how it went) and its provenance (what ran it)."""
    if not rows:
        return ['<p class="empty">No runs yet.</p>']
    runs_rows, provenance = [], []
    for r in rows:
        metrics = _dict(r.get("latest_metrics"))
        runs_rows.append(
            (
                r["id"],
                r["kind"],
                r["status"],
                f"{r['start_step']}\u00a0\u2192\u00a0{r['end_step']}",
                _when(r["started"]),
                _when(r["ended"]),
                r["host"],
                r["device"],
                r["dtype"],
                r["threads"],
                _ranks(r),
                metrics.get("train_loss"),
                metrics.get("eval_loss"),
            )
        )
        argv = " ".join(map(str, r["argv"])) if isinstance(r.get("argv"), list) else r.get("argv")
        dirty = {1: "yes", 0: "no"}.get(r.get("git_dirty"))  # type: ignore[arg-type]
        versions = f"{r.get('octlm_version')} / {r.get('python_version')} / {r.get('torch_version')}"
        provenance.append((r["id"], argv, _cut(r.get("git_commit"), 12), dirty, versions, r.get("resumed_from")))
    header = (
        "#",
        "kind",
        "status",
        "steps",
        "started (UTC)",
        "ended (UTC)",
        "host",
        "device",
        "dtype",
        "threads",
        "ranks",
        "train loss",
        "eval loss",
    )
    return [
        *table(header, runs_rows),
        "<h3>Provenance</h3>",
        *table(("#", "command", "git commit", "dirty", "octlm / python / torch", "resumed from"), provenance, (1, 2)),
    ]


def checkpoints(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ['<p class="empty">No checkpoints.</p>']
    found = [
        (c["step"], c.get("tokens"), c["path"], c.get("size"), _cut(c.get("sha256"), 16), _when(c.get("created")))
        for c in rows
    ]
    return table(("step", "tokens", "path", "bytes", "sha256", "created (UTC)"), found, hashes=(2, 4))


# ---------------------------------------------------------------- verdicts


def verdicts(home: Home, item: dict[str, Any], charts_too: bool = True) -> list[str]:
    """Every verdict, oldest first; the newest overfit with its curves (``charts_too``)."""
    found = [v for v in item["verifications"] if isinstance(v, dict)]
    if not found:
        return [f'<p class="empty">{NO_VERDICTS}</p>']
    newest_overfit = next((v for v in reversed(found) if v.get("kind") == "overfit"), None)
    out = []
    for verification in found:
        details = _dict(verification.get("details"))
        verdict = str(verification.get("verdict") or "")
        css = "pass" if verdict == "pass" else "fail"
        when = _when(verification.get("created"))
        out.append(
            f'<h3>{esc(verification.get("kind"))}: <span class="{css}">{esc(verdict.upper())}</span> '
            f'<span class="meta">{esc(when)} UTC</span></h3>'
        )
        if verification.get("kind") == "verify-resume":
            out += verify_resume(details)
        elif verification.get("kind") == "overfit":
            records = overfit_records(home, item["id"]) if verification is newest_overfit else []
            out += overfit(details, records, charts_too)
        elif details.get("summary"):
            out.append(f"<p>{esc(details['summary'])}</p>")
    return out


def verify_resume(details: dict[str, Any]) -> list[str]:
    splits = details.get("split_at")
    split = ", ".join(map(str, splits)) if isinstance(splits, list) else splits
    seconds = _dict(details.get("seconds"))
    out = [
        f'<p class="meta">split at {esc(split)}, until {esc(details.get("until"))}, '
        f"{esc(details.get('nproc') or 1)} process(es) a segment; (a) one process {esc(seconds.get('a'))} s, "
        f"(b) resumed {esc(seconds.get('b'))} s</p>"
    ]
    rows = []
    for check in details.get("checks") or []:
        if isinstance(check, dict):
            differing = check["differing"] if isinstance(check.get("differing"), list) else []
            compared = check.get("compared")
            same = compared - len(differing) if isinstance(compared, int) else None
            rows.append((check.get("check"), compared, same, "identical" if not differing else "differs"))
    out += table(("check", "compared", "identical", "verdict"), rows)
    differing = details.get("first_differing_step")
    where = f"; the run files first differ at step {esc(differing)}" if differing is not None else ""
    out.append(f"<p>next-batch loss {esc(details.get('next_loss'))}{where}; {esc(details.get('summary'))}</p>")
    return out


def overfit_records(home: Home, experiment_id: str) -> list[dict[str, Any]]:
    """The overfit run file's records, with each of ``NUMBERS`` a finite number or None."""

    def usable(value: Any) -> bool:
        return _numeric(value) and math.isfinite(value)

    return [
        {k: v if k not in NUMBERS or usable(v) else None for k, v in record.items()}
        for record in runfile.read(home.run_file(experiment_id, "-overfit"))
        if isinstance(record, dict)
    ]


def overfit(details: dict[str, Any], records: list[dict[str, Any]], charts_too: bool) -> list[str]:
    """octlm's overfit figures beside the seed notebook's, the decode, and the curves of the run file."""
    # the seed logged its first figure at step 20: octlm's at that step when its run file has it
    first = next((r for r in records if r.get("step") == 20 and r.get("train_loss") is not None), None)
    first = first or _dict(details.get("first_logged"))
    last: dict[str, Any] = next((r for r in reversed(records) if r.get("train_loss") is not None), {})
    mine = {
        "first": f"{number(first.get('train_loss'))} (step {number(first.get('step'))})" if first else None,
        "last": f"{number(last.get('train_loss'))} (step {number(last.get('step'))})" if last else None,
        "evaluated": details.get("final_loss"),
        "perplexity": details.get("perplexity"),
        "bits_per_byte": details.get("bits_per_byte"),
        "decode": f"{number(details.get('matched_tokens'))} of {number(details.get('block_tokens'))} tokens",
    }
    names = {
        "first": "training loss early (the first log)",
        "last": "training loss at the last log",
        "evaluated": "loss evaluated on the block after the last step",
        "perplexity": "perplexity",
        "bits_per_byte": "bits per byte",
        "decode": "greedy decode reproduces",
    }
    rows = [(names[key], SEED_OVERFIT[key], mine[key]) for key in names]
    out = [
        f'<p class="meta">{esc(details.get("steps"))} steps on one block; passes at a final loss of at most '
        f"{esc(details.get('max_loss'))}</p>",
        *table(("", "seed notebook (day1)", "octlm"), rows),
    ]
    for key, label in (("block_text", "the block"), ("decoded_text", "greedy decode from its first token")):
        if isinstance(details.get(key), str):
            out += [f"<p>{esc(label)}:</p>", f"<pre>{esc(details[key])}</pre>"]
    if charts_too and records:
        chart = charts.curves({"overfit": records}, None)[0]
        chart = dataclasses.replace(chart, title="Overfit: loss on the block by step", key="overfit-loss-step")
        out += ['<div class="charts">', charts.svg(chart), "</div>"]
    return out


def comparison(result: dict[str, Any]) -> list[str]:
    """``octlm show A B``: metrics (final, best, at equal tokens), verdicts, then the config keys that differ."""
    rows = compare.table_rows(result)
    keys = sum(len(section) for section in result["config"].values())
    metrics, config = rows[: len(rows) - keys], rows[len(rows) - keys :]
    out = table(("", *result["ids"]), ((name, *values) for name, values in metrics))
    out.append("<h3>Config keys that differ</h3>")
    if not config:
        return [*out, '<p class="empty">None: the configs are the same.</p>']
    return out + table(("key", *result["ids"]), ((name, *values) for name, values in config))
