"""The documentation site as a reader sees it: built with mkdocs (strict, as CI builds it) and opened in the system's
headless Chromium at 1280 x 800, a laptop's window. Each guide's first screen must show its opening command block
whole, with no line cut behind a horizontal scrollbar, and its table of contents must list the guide's sections
(a section written as a bold paragraph is invisible there).

Skips, saying why, only where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from playwright.sync_api import sync_playwright
from test_report_browser import ARGS, CHROMIUM

GUIDES = sorted(p.stem for p in (REPO / "docs" / "guide").glob("*.md"))
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return folder


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
            sections = page.locator("nav.md-nav--secondary[aria-label='Table of contents'] > ul > li").count()
            seen[guide] = (scroll, client, bottom, sections)
        browser.close()
    assert len(seen) == len(GUIDES) >= 11
    cut = {g: (s, c) for g, (s, c, _, _) in seen.items() if s > c}
    assert not cut, f"opening command blocks wider than the page (scroll width, visible width): {cut}"
    below = {g: b for g, (_, _, b, _) in seen.items() if b > 800}
    assert not below, f"opening command blocks that end below the first screen: {below}"
    lonely = {g: n for g, (_, _, _, n) in seen.items() if n < 2}
    assert not lonely, f"guides whose table of contents has fewer than two sections: {lonely}"
