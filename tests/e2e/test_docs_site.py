"""The documentation site as a reader sees it: built with Zensical (strict, as CI builds it, from mkdocs.yml) and
opened in the system's headless Chromium at 1280 x 800, a laptop's window. Each guide's first screen must show its
opening command block whole, with no line cut behind a horizontal scrollbar, and its table of contents must list the
guide's sections (a section written as a bold paragraph is invisible there). Every page under docs/ is in the
site's navigation (MkDocs' ``validation.nav.omitted_files`` failed a strict build on one left out; Zensical's strict
build does not check it, so this test does).

The site is built from a copy of docs/ and mkdocs.yml in a temporary folder: Zensical writes its site and its cache
(``.cache/``) beside the config file and has no option to put them elsewhere.

Skips the browser's test, saying why, only where no Chromium is installed (``.ci/run`` installs Debian's
``chromium``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from playwright.sync_api import sync_playwright
from test_report_browser import ARGS, CHROMIUM

GUIDES = sorted(p.stem for p in (REPO / "docs" / "guide").glob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("project")
    shutil.copytree(REPO / "docs", project / "docs")
    shutil.copy(REPO / "mkdocs.yml", project / "mkdocs.yml")
    built = subprocess.run(
        [sys.executable, "-m", "zensical", "build", "--strict"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return project / "site"


def test_the_site_builds_strictly_and_lists_every_page_in_its_navigation(site: Path) -> None:
    """Every page under docs/ is named once in mkdocs.yml's nav, and the strict build made a page of each."""

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        return [page for item in items for page in pages(item)]

    listed = pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    written = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(listed) == written and len(set(listed)) == len(listed)
    for page in written:
        folder = "" if page == "index.md" else page.removesuffix(".md") + "/"
        assert (site / folder / "index.html").is_file(), page


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)")
def test_every_guide_opens_with_its_commands_whole_and_lists_its_sections(site: Path) -> None:
    seen: dict[str, tuple[int, int, float, int]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for guide in GUIDES:
            page.goto((site / "guide" / guide / "index.html").as_uri())
            first = page.locator("article pre > code").first
            scroll, client = first.evaluate("c => [c.scrollWidth, c.clientWidth]")
            bottom = first.evaluate("c => c.getBoundingClientRect().bottom")
            sections = page.locator("nav.md-nav--secondary[aria-label='On this page'] > ul > li").count()
            seen[guide] = (scroll, client, bottom, sections)
        browser.close()
    assert len(seen) == len(GUIDES) >= 11
    cut = {g: (s, c) for g, (s, c, _, _) in seen.items() if s > c}
    assert not cut, f"opening command blocks wider than the page (scroll width, visible width): {cut}"
    below = {g: b for g, (_, _, b, _) in seen.items() if b > 800}
    assert not below, f"opening command blocks that end below the first screen: {below}"
    lonely = {g: n for g, (_, _, _, n) in seen.items() if n < 2}
    assert not lonely, f"guides whose table of contents has fewer than two sections: {lonely}"
