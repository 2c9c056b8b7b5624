"""A headless chromium page for the tests that open the HTML report in a real browser
(Debian's ``chromium``, driven by playwright), loaded as a plugin by ``conftest.py`` so that
each test process has one fixture definition and so at most one browser."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


NO_CHROMIUM = "no chromium on PATH (.ci/run installs Debian's chromium; apt-get install chromium)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say, above pytest's last line, how many browser tests a missing chromium skipped:
    "23 skipped" alone does not tell the HTML report's tests from the optional ones."""
    skipped = [
        report for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and NO_CHROMIUM in str(report.longrepr[2])
    ]  # fmt: skip
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} browser tests skipped: {NO_CHROMIUM}", yellow=True, bold=True
        )


@pytest.fixture(scope="session")
def browser():
    """One headless chromium per test process, as pytest-playwright keeps one: a launch costs
    about a second of CPU in the browser's own processes, and each test gets a fresh context."""
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):  # CI must run them, not skip them
            pytest.fail(f"{NO_CHROMIUM}: CI must have it (.ci/run installs it)", pytrace=False)
        pytest.skip(NO_CHROMIUM)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser_page(browser):
    # a fresh context: its own cookies, storage and cache, as a new incognito window
    context = browser.new_context(viewport={"width": 1280, "height": 860}, offline=True)
    try:
        page = context.new_page()
        events: list[str] = []
        page.on("dialog", lambda dialog: (events.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        page.on("pageerror", lambda error: events.append(f"error: {error}"))
        page.on("request", lambda request: None if request.url.startswith("file:") else events.append(request.url))
        page.events = events
        yield page
    finally:
        context.close()
