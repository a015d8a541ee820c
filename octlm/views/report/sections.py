"""The sections of ``octlm report``'s page as data for its templates (``templates/sections.html.j2``): facts,
fingerprints, runs with provenance, checkpoints, verdicts (verify-resume's checks; overfit beside the seed
notebook's figures) and the side-by-side comparison. Torch-free; the templates lay them out and escape every value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from octlm.core.home import Home
from octlm.core.reporting import counted
from octlm.store.registry import CheckpointRow, RunRow
from octlm.views import side_by_side
from octlm.views.curves import charts
from octlm.views.curves.charts import Drawing, number
from octlm.views.details import Detail, run_records

Cells = tuple[Any, ...]  # a table's row: one value a column, written as ``charts.number`` writes it

# The seed notebook's overfit figures (day1, EXP-008, on its first block), shown beside octlm's.
SEED_OVERFIT = {
    "first": "5.5891 (step 20)",
    "last": "0.9121 (step 200)",
    "evaluated": "\u2013",
    "perplexity": "2.4830",
    "bits_per_byte": "0.6338",
    "decode": "the block's opening",
}
FIGURES = {  # the rows of overfit's figures
    "first": "training loss early (the first log)",
    "last": "training loss at the last log",
    "evaluated": "loss evaluated on the block after the last step",
    "perplexity": "perplexity",
    "bits_per_byte": "bits per byte",
    "decode": "greedy decode reproduces",
}


def _dict(value: Any) -> dict[str, Any]:
    """A registry cell that should be a mapping: as it is, or empty when damaged."""
    return value if isinstance(value, dict) else {}


def numeric(value: object) -> bool:
    """A number (not a boolean): a table's cell of it is right-aligned (the templates' test ``numeric``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cut(value: Any, length: int) -> str | None:
    return None if value is None else str(value)[:length]


def _when(value: Any, length: int = 19) -> str | None:
    """A registry timestamp (UTC) to the second (or ``length`` characters), date and time apart."""
    return None if value is None else str(value)[:length].replace("T", " ")


def facts(item: Detail) -> list[Cells]:
    """Status, step, tags, archived, parent and notes, as the rows of a two-column table."""
    steps = _dict(_dict(item["config"]).get("training")).get("steps")
    rows: list[Cells] = [("status", item["status"]), ("step", f"{number(item['step'])} of {number(steps)}")]
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
    return rows


def fingerprints(item: Detail) -> list[Cells]:
    return list(item["fingerprints"].items())


def _ranks(run: RunRow) -> str:
    size = run["world_size"] if isinstance(run.get("world_size"), int) else 1
    text = str(size) + (f" {run['backend']}" if size > 1 and run.get("backend") else "")
    nodes = run.get("nnodes")
    return text + (f", {nodes} nodes" if isinstance(nodes, int) and nodes > 1 else "")


def _run(r: RunRow) -> Cells:
    metrics = _dict(r.get("latest_metrics"))
    steps = f"{r['start_step']}\u00a0\u2192\u00a0{r['end_step']}"
    when = (_when(r["started"]), _when(r["ended"]))
    machine = (r["host"], r["device"], r["dtype"], r["threads"], _ranks(r))
    return (
        r["id"],
        r["kind"],
        r["status"],
        steps,
        *when,
        *machine,
        metrics.get("train_loss"),
        metrics.get("eval_loss"),
    )


def _provenance(r: RunRow) -> Cells:
    argv = " ".join(map(str, r["argv"])) if isinstance(r.get("argv"), list) else r.get("argv")
    dirty = {1: "yes", 0: "no"}.get(r.get("git_dirty"))  # type: ignore[arg-type]
    versions = f"{r.get('octlm_version')} / {r.get('python_version')} / {r.get('torch_version')}"
    return (r["id"], argv, _cut(r.get("git_commit"), 12), dirty, versions, r.get("resumed_from"))


def runs(rows: list[RunRow]) -> tuple[list[Cells], list[Cells]]:
    """Each run (how it went) and its provenance (what ran it)."""
    return [_run(r) for r in rows], [_provenance(r) for r in rows]


def checkpoints(rows: list[CheckpointRow]) -> list[Cells]:
    return [
        (c["step"], c.get("tokens"), c["path"], c.get("size"), _cut(c.get("sha256"), 16), _when(c.get("created")))
        for c in rows
    ]


def counted_words(value: Any, noun: str, plural: str | None = None) -> str:
    """The templates' ``counted`` filter: ``1 process``, ``4 processes``; what is no whole number (several sizes, a
    damaged record) is written as it is, before the plural: ``4, 2 processes``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return counted(value, noun, plural)
    shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{shown} {plural or noun + 's'}"


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Resume:
    """verify-resume's verdict: how it ran, its checks and the next batch's loss."""

    split: Any
    until: Any
    nproc: Any
    seconds_a: Any
    seconds_b: Any
    checks: list[Cells]
    next_loss: Any
    first_differing: Any  # the step the run files first differ at, or None
    summary: Any


@dataclass(frozen=True)
class Overfit:
    """overfit's verdict: octlm's figures beside the seed notebook's, the block and its decode, the curve."""

    steps: Any
    max_loss: Any
    figures: list[Cells]
    texts: list[tuple[str, str]]  # (what it is, the text)
    chart: Drawing | None


@dataclass(frozen=True)
class ReportedVerdict:
    """A verdict of the registry as the report shows it: its kind, pass or fail, when, and its kind's own part."""

    kind: Any  # verify-resume, overfit, or another octlm wrote
    verdict: str
    when: str | None
    resume: Resume | None = None
    overfit: Overfit | None = None
    summary: Any = None  # of another kind

    @property
    def css(self) -> str:
        return "pass" if self.verdict == "pass" else "fail"


def verdicts(home: Home, item: Detail, charts_too: bool = True) -> list[ReportedVerdict]:
    """Every verdict, oldest first; the newest overfit with its curves (``charts_too``)."""
    found = [v for v in item["verifications"] if isinstance(v, dict)]
    newest_overfit = next((v for v in reversed(found) if v.get("kind") == "overfit"), None)
    out = []
    for verification in found:
        details, kind = _dict(verification.get("details")), verification.get("kind")
        verdict = ReportedVerdict(kind, str(verification.get("verdict") or ""), _when(verification.get("created")))
        if kind == "verify-resume":
            verdict = dataclasses.replace(verdict, resume=verify_resume(details))
        elif kind == "overfit":
            records = run_records(home, item["id"], "overfit") if verification is newest_overfit else []
            verdict = dataclasses.replace(verdict, overfit=overfit(details, records, charts_too))
        else:
            verdict = dataclasses.replace(verdict, summary=details.get("summary"))
        out.append(verdict)
    return out


def verify_resume(details: Mapping[str, object]) -> Resume:  # as the registry keeps it, any version
    splits = details.get("split_at")
    seconds = _dict(details.get("seconds"))
    rows: list[Cells] = []
    checks = details.get("checks")
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict):
            differing = check["differing"] if isinstance(check.get("differing"), list) else []
            compared = check.get("compared")
            same = compared - len(differing) if isinstance(compared, int) else None
            rows.append((check.get("check"), compared, same, "identical" if not differing else "differs"))
    return Resume(
        split=", ".join(map(str, splits)) if isinstance(splits, list) else splits,
        until=details.get("until"),
        nproc=details.get("nproc") or 1,
        seconds_a=seconds.get("a"),
        seconds_b=seconds.get("b"),
        checks=rows,
        next_loss=details.get("next_loss"),
        first_differing=details.get("first_differing_step"),
        summary=details.get("summary"),
    )


def overfit(details: Mapping[str, object], records: charts.Records, charts_too: bool) -> Overfit:
    """octlm's overfit figures beside the seed notebook's, the decode, and the curves of the run file."""
    # the seed logged its first figure at step 20: octlm's at that step when its run file has it
    first: Mapping[str, Any] = next((r for r in records if r.get("step") == 20 and r.get("train_loss") is not None), {})
    first = first or _dict(details.get("first_logged"))
    last: Mapping[str, Any] = next((r for r in reversed(records) if r.get("train_loss") is not None), {})
    mine = {
        "first": f"{number(first.get('train_loss'))} (step {number(first.get('step'))})" if first else None,
        "last": f"{number(last.get('train_loss'))} (step {number(last.get('step'))})" if last else None,
        "evaluated": details.get("final_loss"),
        "perplexity": details.get("perplexity"),
        "bits_per_byte": details.get("bits_per_byte"),
        "decode": f"{number(details.get('matched_tokens'))} of {number(details.get('block_tokens'))} tokens",
    }
    texts = [
        (label, text)
        for key, label in (("block_text", "the block"), ("decoded_text", "greedy decode from its first token"))
        if isinstance(text := details.get(key), str)
    ]
    chart = None
    if charts_too and records:
        curve = charts.curves({"overfit": records}, None)[0]
        curve = dataclasses.replace(curve, title="Overfit: loss on the block by step", key="overfit-loss-step")
        chart = charts.draw(curve)
    figures = [(name, SEED_OVERFIT[key], mine[key]) for key, name in FIGURES.items()]
    return Overfit(details.get("steps"), details.get("max_loss"), figures, texts, chart)


@dataclass(frozen=True)
class SideBySide:
    """``octlm show A B``: metrics (final, best, at equal tokens), verdicts, then the config keys that differ."""

    ids: list[str]
    metrics: list[Cells]
    config: list[Cells]
    sentences: list[str]  # each experiment against the first, in words: evaluation noise, data order


def comparison(result: side_by_side.Comparison) -> SideBySide:
    metrics, config = side_by_side.figure_rows(result), side_by_side.config_rows(result)
    return SideBySide(
        result["ids"],
        [(name, *values) for name, values in metrics],
        [(name, *values) for name, values in config],
        side_by_side.sentences(result),
    )
