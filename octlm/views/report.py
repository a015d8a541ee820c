"""``octlm report``: an experiment's lab-notebook page (or several side by side) as one self-contained HTML
file, built from the registry and run files through the views (``details``, ``compare``) and ``charts``.
Torch-free.

The page has no script, no external font, image or link, and works from a file offline. The same
registry and run files give the same bytes (no time but the runs' own). Every value that comes from
the registry, a YAML or a run file is HTML-escaped (``charts.esc``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from octlm.config import from_dict, to_yaml
from octlm.core.errors import BadInput, ConfigError, Refused
from octlm.core.fsutil import atomic_write
from octlm.core.home import Home
from octlm.views import charts, compare, report_sections
from octlm.views.charts import esc
from octlm.views.details import detail, run_records

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;background:#fff;
 max-width:980px;margin:0 auto;padding:24px 20px 60px}
h1{font-size:26px;margin:8px 0 2px}h2{font-size:19px;margin:34px 0 8px;border-bottom:1px solid #d9dee3;
 padding-bottom:4px}h3{font-size:16px;margin:22px 0 6px}
p.lede{font-size:17px;margin:4px 0 12px;color:#38424c}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #d9dee3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre,td.h{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f6f8fa;border:1px solid #e3e7eb;padding:10px 12px;overflow-x:auto;white-space:pre-wrap}
.pass{color:#1e7b34;font-weight:600}.fail{color:#b3261e;font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:10px 18px}
figure.chart{margin:0}figcaption{font-weight:600;font-size:14px;margin:4px 0}
svg.chart{width:100%;height:auto;display:block}
svg .area{fill:#fff;stroke:#aab3bc}svg .grid{stroke:#eceff2}svg .tick{font-size:12px;fill:#5b6670;stroke:none}
svg .label{font-size:12.5px;fill:#38424c;stroke:none}
svg .halo{paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .hline{stroke:#b3261e;stroke-dasharray:2 3;stroke-width:1.2}
svg polyline{stroke-width:1.6}svg circle{stroke-width:1.2}svg .eval circle{fill:#fff}svg circle:hover{r:5px}
.legend{font-size:12px;color:#38424c}.key{margin-right:14px;white-space:nowrap}
.swatch{display:inline-block;width:22px;height:0;border-top:2.5px solid;vertical-align:middle;margin-right:5px}
.swatch.clip{border-top:2px dashed #b3261e}
summary{cursor:pointer;color:#38424c}.empty{color:#6b7580;font-style:italic}.meta{color:#5b6670;font-size:13px}
"""


def report(home: Home, ids: list[str]) -> str:
    """The page for ``ids`` (one: its notebook page; several: side by side); BadInput for an unknown or
    repeated ID, before anything is written."""
    if not ids:
        raise BadInput("give at least one experiment ID")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise BadInput(f"{', '.join(repeated)} given more than once: name each experiment once")
    items = [detail(home, experiment_id) for experiment_id in ids]  # unknown IDs: BadInput here
    runs = {item["id"]: run_records(home, item["id"]) for item in items}
    if len(items) == 1:
        title, body = _single(home, items[0], runs)
    else:
        title, body = _several(home, items, runs)
    return page(title, body)


def page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def _clip(items: list[dict[str, Any]]) -> float | None:
    for item in items:
        training = item["config"].get("training") if isinstance(item["config"], dict) else None
        value = training.get("grad_clip") if isinstance(training, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def _charts(runs: dict[str, list[dict[str, Any]]], clip: float | None) -> list[str]:
    if not any(runs.values()):
        return ['<p class="empty">No run file yet: train the experiment to draw its curves.</p>']
    return ['<div class="charts">', *(charts.svg(chart) for chart in charts.curves(runs, clip)), "</div>"]


def _single(home: Home, item: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> tuple[str, list[str]]:
    title = f"{item['id']}: {item['description']}" if item["description"] else item["id"]
    body = [f"<h1>{esc(item['id'])}</h1>"]
    if item["description"]:
        body.append(f'<p class="lede">{esc(item["description"])}</p>')
    body += report_sections.facts(item)
    body += ["<h2>Curves</h2>", *_charts(runs, _clip([item])), "<h2>Verdicts</h2>"]
    body += report_sections.verdicts(home, item)
    body += _records(item, "h2")
    return title, body


def _records(item: dict[str, Any], h: str) -> list[str]:
    """Fingerprints, runs with provenance, checkpoints and the config of one experiment (``h``: heading tag;
    under an ``h3``, in a page of several, the config is folded: a click opens it)."""
    config = f"<pre>{esc(config_yaml(item['config']))}</pre>"
    if h == "h3":
        config = f"<details><summary>the resolved config (YAML)</summary>{config}</details>"
    return [
        f"<{h}>Fingerprints</{h}>",
        *report_sections.fingerprints(item),
        f"<{h}>Runs</{h}>",
        *report_sections.runs(item["runs"]),
        f"<{h}>Checkpoints</{h}>",
        *report_sections.checkpoints(item["checkpoints"]),
        f"<{h}>Config</{h}>",
        config,
    ]


def config_yaml(config: Any) -> str:
    """The resolved config as ``octlm`` writes it; a config octlm cannot read (a registry copy from an older
    version) as its plain YAML; none recorded as a comment."""
    if not isinstance(config, dict) or not config:
        return "# no config recorded\n"
    try:
        return to_yaml(from_dict(config, "registry"))
    except (ConfigError, TypeError, ValueError):
        return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _several(home: Home, items: list[dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> tuple[str, list[str]]:
    ids = [item["id"] for item in items]
    result = compare.compare(home, ids)
    title = " vs ".join(ids)
    body = [f"<h1>{esc(title)}</h1>", "<ul>"]
    body += [f"<li><b>{esc(i['id'])}</b>: {esc(i['description'])} ({esc(i['status'])})</li>" for i in items]
    body += ["</ul>", "<h2>Side by side</h2>", *report_sections.comparison(result)]
    body += ["<h2>Curves</h2>", *_charts(runs, _clip(items))]
    for item in items:
        body += [f'<h2 id="{esc(item["id"])}">{esc(item["id"])}</h2>']
        if item["description"]:
            body.append(f'<p class="lede">{esc(item["description"])}</p>')
        body += report_sections.facts(item)
        body += ["<h3>Verdicts</h3>", *report_sections.verdicts(home, item, charts_too=False)]
        body += _records(item, "h3")
    return title, body


def save(path: Path, text: str) -> None:
    """Write the page to ``path`` atomically (wholly the new page or the old file); Refused, in one line,
    where it cannot be written."""
    try:
        atomic_write(path, text.encode("utf-8"))
    except OSError as error:
        reason = error.strerror or str(error)
        raise Refused(f"cannot write the report to {path}: {reason}; nothing was written") from None
