"""``octlm report`` in a real browser: the system's headless Chromium driven by playwright. Two tiny
experiments are trained once for the module (one of them overfit as well); each test opens a page with
every request but the file itself blocked, and fails on any console error, failed request or dialog.
A third experiment carries markup in its description, a note and a config value: it must read as text.

Skips, saying why, only where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, write_corpus, write_experiment
from playwright.sync_api import Page, sync_playwright

from octlm.views.curves.charts import LABELS, number

CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
        if p and Path(p).is_file()
    ),
    None,
)
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with EXP-001 (12 steps, overfit for 8) and EXP-002 (a higher learning rate), both trained."""
    home = tmp_path_factory.mktemp("report") / "home"
    write_corpus(home)
    write_experiment(home, "EXP-001", training={"log_interval": 2})
    write_experiment(home, "EXP-002", training={"log_interval": 2, "learning_rate": 6e-3})
    for args in (("train", "EXP-001", "-q"), ("train", "EXP-002", "-q"), ("overfit", "EXP-001", "--steps", "8", "-q")):
        assert cli(home, *args).exit_code in (0, 1), args  # overfit may miss its threshold in 8 steps
    return home


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def open_report(browser: Any, path: Path) -> tuple[Page, list[str]]:
    """The page, with every request other than the file aborted and every problem collected."""
    problems: list[str] = []
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(10_000)
    url = path.as_uri()

    def only_the_file(route: Any) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            problems.append(f"request: {route.request.url}")
            route.abort()

    page.route("**/*", only_the_file)
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))

    def dialog(opened: Any) -> None:  # alert(), confirm(), prompt(): a script ran
        problems.append(f"dialog {opened.type}: {opened.message}")
        opened.dismiss()

    page.on("dialog", dialog)
    page.goto(url)
    return page, problems


def run_file(home: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (home / "runs" / f"{name}.jsonl").read_text().splitlines()]


def check_charts(page: Page, runs: dict[str, list[dict]]) -> None:
    """Each chart is drawn (a non-empty box) with one point per record holding each metric it plots."""
    charts = page.locator("svg.chart")
    assert charts.count() >= 5
    for index in range(charts.count()):
        chart = charts.nth(index)
        box = chart.bounding_box()
        assert box and box["width"] > 200 and box["height"] > 50
        key, metrics, x = (chart.get_attribute(a) or "" for a in ("data-chart", "data-metrics", "data-x"))
        records = runs["overfit"] if key.startswith("overfit") else [r for rs in runs["main"] for r in rs]
        expected = sum(1 for r in records for m in metrics.split() if r.get(m) is not None and r.get(x) is not None)
        assert chart.locator("circle").count() == expected, key


def hover_shows(page: Page, record: dict, metric: str, chart: str, prefix: str = "") -> None:
    """Hovering a record's point enlarges it, and its title names the step and the value."""
    text = f"{prefix}{LABELS[metric]} at step {record['step']},"
    point = page.locator(f'svg[data-chart="{chart}"] circle').filter(has=page.locator("title", has_text=text)).first
    point.hover()
    assert point.evaluate("e => e.matches(':hover') && getComputedStyle(e).r") == "5px"
    assert point.locator("title").text_content().endswith(f"= {number(record[metric])}")


def test_one_experiment(trained: Path, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "EXP-001.html"
    assert cli(trained, "report", "EXP-001", "-o", str(out)).exit_code == 0
    page, problems = open_report(browser, out)
    main, overfit = run_file(trained, "EXP-001"), run_file(trained, "EXP-001-overfit")
    check_charts(page, {"main": [main], "overfit": overfit})
    evaluated = [r for r in main if r.get("eval_loss") is not None]
    hover_shows(page, evaluated[-1], "eval_loss", "loss-step")
    hover_shows(page, main[0], "gradient_norm", "gradient-norm")
    checkpoints = page.locator("table", has=page.locator("th", has_text="sha256")).last
    steps = [row.locator("td").first.text_content() for row in checkpoints.locator("tr").all()[1:]]
    assert steps == ["4", "8", "8", "12"]  # keep: 3, and the overfit track's checkpoint at step 8
    figures = page.locator("table", has=page.locator("th", has_text="seed notebook"))
    assert "5.5891 (step 20)" in figures.text_content()
    page.screenshot(path=str(tmp_path / "one.png"), full_page=True)
    assert problems == []


def test_two_experiments_side_by_side(trained: Path, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "both.html"
    assert cli(trained, "report", "EXP-001", "EXP-002", "-o", str(out)).exit_code == 0
    page, problems = open_report(browser, out)
    runs = {i: run_file(trained, i) for i in ("EXP-001", "EXP-002")}
    check_charts(page, {"main": list(runs.values()), "overfit": []})
    assert page.locator("svg.chart").count() == 5  # overlaid: no chart of each experiment's own
    legend = page.locator("figure.chart").first.locator(".legend").text_content()
    assert all(f"{i} {m}" in legend for i in runs for m in ("train loss", "eval loss"))
    side = page.locator("table").first
    row = side.locator("tr", has=page.locator("td", has_text="final eval_loss"))
    finals = [number([r for r in rs if r.get("eval_loss") is not None][-1]["eval_loss"]) for rs in runs.values()]
    assert [row.locator("td").nth(i).text_content() for i in (1, 2)] == finals
    keys = page.locator("table", has=page.locator("th", has_text="key")).first.text_content()
    assert "training.learning_rate" in keys and "0.006" in keys
    logged = [r for r in runs["EXP-002"] if r.get("eval_loss") is None]  # no evaluation point drawn over it
    hover_shows(page, logged[-1], "train_loss", "loss-tokens", prefix="EXP-002 ")
    assert problems == []


SCRIPT, IMAGE = "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>'


def test_markup_in_values_reads_as_text(trained: Path, browser: Any, tmp_path: Path) -> None:
    """A description, a note and a config value holding markup are shown as that text: no script runs, no
    dialog opens, no element but octlm's own is made of them (octlm itself puts no <script> or <img>)."""
    description, note, source = f"{SCRIPT} {IMAGE}", f"{IMAGE} {SCRIPT}", f"corpus/{IMAGE}{SCRIPT}"
    new = ("new", "EXP-003", "--from", "EXP-001", "--description", description)
    (trained / source).mkdir(parents=True)  # a folder so named, holding a document: `new` checks sources exist
    (trained / source / "doc.txt").write_text("a document\n")
    assert cli(trained, *new, "--set", f"data.sources={json.dumps(['corpus/*.txt', source])}").exit_code == 0
    assert cli(trained, "note", "EXP-003", note).exit_code == 0
    assert cli(trained, "tag", "EXP-003", "+x=1/y:z+w").exit_code == 0  # what a tag may hold
    for ids in (["EXP-003"], ["EXP-001", "EXP-003"]):
        out = tmp_path / f"{'-'.join(ids)}.html"
        assert cli(trained, "report", *ids, "-o", str(out)).exit_code == 0
        page, problems = open_report(browser, out)
        assert page.locator("p.lede").last.text_content() == description
        facts = page.locator("table").filter(has=page.locator("td", has_text="note")).last
        cells = [row.locator("td").all_text_contents() for row in facts.locator("tr").all()]
        assert ["tags", "x=1/y:z+w"] in cells
        assert any(name == "note" and value.endswith(f"  {note}") for name, value in cells)
        assert source in page.locator("pre").last.text_content()  # the config, as YAML
        assert description in page.locator("body").text_content()
        if len(ids) == 1:
            assert page.title() == f"EXP-003: {description}"
        else:
            keys = page.locator("table", has=page.locator("th", has_text="key")).first
            assert source in keys.text_content()  # descriptions are said beside the table, not as a key row
        for selector in ("script", "img", "iframe", "object", "embed", "[onerror]", "[onload]", "[src]"):
            assert page.locator(selector).count() == 0, selector
        assert [p for p in problems if p.startswith("dialog")] == [] and problems == []
