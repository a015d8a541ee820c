"""``octlm report``: an experiment's lab-notebook page (or several side by side, or a sweep's) as one
self-contained HTML file, built from the registry and run files through the views (``views.details``,
``views.side_by_side``, ``views.curves.charts``; this package's ``sections``, the page's parts as data, and
``sweep``, a sweep's page: its metric against each swept key with the seeds' error bars, and the best so far) and
written by the Jinja2 templates in ``views/templates/``. Torch-free.

The page has no script, no external font, image or link, and works from a file offline. The same
registry and run files give the same bytes (no time but the runs' own). The templates escape every value
they write (autoescape): a value from the registry, a YAML or a run file is text on the page, never markup.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from octlm.config import from_dict, to_yaml
from octlm.core.errors import BadInput, ConfigError
from octlm.core.fsutil import write_output
from octlm.core.home import Home
from octlm.store.registry import Registry
from octlm.views import side_by_side
from octlm.views.curves import charts
from octlm.views.curves.charts import Drawing
from octlm.views.details import Detail, detail, run_records
from octlm.views.report import sections as report_sections
from octlm.views.report import sweep as report_sweep
from octlm.views.report.sections import Cells, ReportedVerdict, SideBySide

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).parents[1] / "templates"


@dataclass(frozen=True)
class Section:
    """One experiment's part of the page."""

    item: Detail
    facts: list[Cells]
    fingerprints: list[Cells]
    runs: list[Cells]
    provenance: list[Cells]
    checkpoints: list[Cells]
    verdicts: list[ReportedVerdict]
    config: str  # the resolved config (YAML)


@dataclass(frozen=True)
class Page:
    """What the templates are given: ``single.html.j2`` one section, ``several.html.j2`` several."""

    title: str
    sections: list[Section]
    charts: list[Drawing] | None  # None: no run file yet
    side_by_side: SideBySide | None = None  # several experiments: ``octlm show A B``


def report(home: Home, ids: list[str]) -> str:
    """The page for ``ids`` (one: its notebook page, or a sweep's when it names one; several: side by side);
    BadInput for an unknown or repeated ID, before anything is written."""
    if not ids:
        raise BadInput("give at least one experiment ID")
    if len(ids) == 1 and is_sweep(home, ids[0]):
        return templates().get_template("sweep.html.j2").render(page=report_sweep.page(home, ids[0]))
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise BadInput(f"{', '.join(repeated)} given more than once: name each experiment once")
    items = [detail(home, experiment_id) for experiment_id in ids]  # unknown IDs: BadInput here
    runs = {item["id"]: run_records(home, item["id"]) for item in items}
    several = len(items) > 1
    sections = [section(home, item, charts_too=not several) for item in items]
    drawn = [charts.draw(chart) for chart in charts.curves(runs, _clip(items))] if any(runs.values()) else None
    if several:
        side = report_sections.comparison(side_by_side.compare(home, ids))
        page = Page(" vs ".join(ids), sections, drawn, side)
    else:
        title = f"{items[0]['id']}: {items[0]['description']}" if items[0]["description"] else items[0]["id"]
        page = Page(title, sections, drawn)
    return templates().get_template("several.html.j2" if several else "single.html.j2").render(page=page)


def is_sweep(home: Home, name: str) -> bool:
    with Registry(home.registry, create=False) as registry:
        return registry.sweep(name) is not None


def section(home: Home, item: Detail, charts_too: bool = True) -> Section:
    runs, provenance = report_sections.runs(item["runs"])
    return Section(
        item=item,
        facts=report_sections.facts(item),
        fingerprints=report_sections.fingerprints(item),
        runs=runs,
        provenance=provenance,
        checkpoints=report_sections.checkpoints(item["checkpoints"]),
        verdicts=report_sections.verdicts(home, item, charts_too),
        config=config_yaml(item["config"]),
    )


def _clip(items: list[Detail]) -> float | None:
    for item in items:
        training = item["config"].get("training") if isinstance(item["config"], dict) else None
        value = training.get("grad_clip") if isinstance(training, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def config_yaml(config: Any) -> str:
    """The resolved config as ``octlm`` writes it; a config octlm cannot read (a registry copy from an older
    version) as its plain YAML; none recorded as a comment."""
    if not isinstance(config, dict) or not config:
        return "# no config recorded\n"
    try:
        return to_yaml(from_dict(config, "registry"))
    except (ConfigError, TypeError, ValueError):
        return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)


def shown(value: object) -> object:
    """Each ``{{ value }}`` of the templates as the page writes it: a number, a boolean or nothing as
    ``charts.number`` writes it; text (and the markup a macro returns) as it is. Autoescape then escapes it."""
    return value if isinstance(value, str) else charts.number(value)


def environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The templates' environment: autoescape on for every template, a missing variable an error
    (StrictUndefined), block tags leaving no blank line (trim_blocks, lstrip_blocks). jinja2 is imported
    here, not with the module: only ``octlm report`` needs it, not every start of the CLI."""
    import jinja2

    env = jinja2.Environment(
        loader=loader or jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=shown,
    )
    env.tests["numeric"] = report_sections.numeric
    env.filters["counted"] = report_sections.counted_words
    return env


@functools.cache
def templates() -> jinja2.Environment:
    return environment()


def save(path: Path, text: str) -> None:
    """Write the page to ``path`` as ``fsutil.output_writer`` writes a file the user named (a regular file
    atomically, a device or a FIFO in place); Refused, in one line, where it cannot be written."""
    write_output(path, text.encode("utf-8"), "the report")
