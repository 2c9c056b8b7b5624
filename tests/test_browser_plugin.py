"""tests/browser.py without chromium: the browser tests skip with a line in the summary that
says so, and fail where CI is set (CI must run them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).parent

BROWSER_TEST = """
def test_opens_a_page(browser_page):
    browser_page.goto("about:blank")
"""


@pytest.fixture
def without_chromium(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    empty = pytester.mkdir("no-browsers-here")
    monkeypatch.setenv("PATH", str(empty))  # the session is started by absolute path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_page=BROWSER_TEST)
    return pytester


@pytest.mark.fresh_process  # browser.py reads PATH when imported: a process of its own
def test_a_missing_chromium_skips_the_browser_tests_and_says_so_in_the_summary(without_chromium, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = without_chromium.runpytest_subprocess("-p", "browser", "-p", "no:fxtrace", "-rN")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["1 browser tests skipped: no chromium on PATH (*apt-get install chromium)", "*1 skipped*"])


@pytest.mark.fresh_process
def test_a_missing_chromium_fails_the_browser_tests_in_ci(without_chromium, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = without_chromium.runpytest_subprocess("-p", "browser", "-p", "no:fxtrace")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*no chromium on PATH*: CI must have it (.ci/run installs it)*", "*1 error*"])
