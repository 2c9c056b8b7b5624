"""``--fx-html``, the GitHub step summary and the pytest-html column, as a user meets
them: a small session (a passing model, an untraceable one with a failing submodule,
a mismatch, an expected failure, and a test id and module name that are a
``<script>``), its page opened in a real headless browser (Debian's ``chromium``,
driven by Playwright; skipped where either is missing, installed by ``.ci/run``).

Screenshots: every browser run saves them under the test's tmp_path; with
``FXTRACE_SCREENSHOTS=docs`` they are also copied to that folder (how docs/*.png
are made: ``FXTRACE_SCREENSHOTS=docs pytest tests/test_html_session.py -k browser``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from forked_pytest import run_in_project

from pytest_fxtrace.report.html import tree_rows
from pytest_fxtrace.report.records import CheckRecord

EVIL = "<script>alert(1)</script>"
EVIL_ID = EVIL + "<img src=x onerror=alert(2)>"  # runs if put into the page as HTML
pytestmark = pytest.mark.xdist_group(__name__)  # the session fixture runs once, in one worker

MODELS = '''
import torch
from torch import nn


class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.stem(x))


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:  # BRANCH
            return self.proj(x)
        return x


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.gate = Gate()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.gate(self.encoder(x)))


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) + torch.randn(4)  # NOISE


class Length(nn.Module):
    def forward(self, x):
        return x * len(x)


class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("<script>alert(1)</script>", Classifier())

    def forward(self, x):
        return getattr(self, "<script>alert(1)</script>")(x)
'''

TESTS = '''
import pytest
import torch
from models import Classifier, Evil, Good, Length, Noisy


@pytest.mark.traceable
def test_good():
    Good()(torch.randn(2, 4))


@pytest.mark.traceable
def test_classifier():
    Classifier()(torch.ones(2, 4))


@pytest.mark.traceable
def test_noisy():
    Noisy()(torch.randn(2, 4))


@pytest.mark.traceable(xfail="len")
def test_length():
    Length()(torch.randn(2, 4))


@pytest.mark.traceable
@pytest.mark.parametrize("name", ["<script>alert(1)</script><img src=x onerror=alert(2)>"])
def test_evil(name):
    Evil()(torch.ones(2, 4))
'''

BRANCH = next(i for i, line in enumerate(MODELS.splitlines(), 1) if line.endswith("# BRANCH"))
FIX = "@pytest.mark.traceable(leaf_modules=['Gate'])"


SEEDED = """
import pytest, torch

@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html_project")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "models.py").write_text(MODELS)
    (root / "test_models.py").write_text(TESTS)
    # every run builds the same weights and draws the same inputs: with unseeded ones the
    # pages of two runs differed now and then (Gate's proj is reached only when the encoder's
    # output sums above 0, which random weights miss about one time in 256 per model)
    (root / "conftest.py").write_text(SEEDED)
    return root


@pytest.fixture(scope="module")
def session(project) -> subprocess.CompletedProcess:
    """The session as CI runs it: HTML and JSON reports, a step summary file."""
    summary = project / "step-summary.md"
    summary.write_text("earlier step output\n")
    return run_in_project(
        project, "-p", "no:xdist", "--fx-html=out/fx-report.html", "--fx-report=out/fx.json",
        GITHUB_STEP_SUMMARY=str(summary), GITHUB_SERVER_URL="https://github.com", GITHUB_REPOSITORY="o/r",
        GITHUB_RUN_ID="42",
    )  # fmt: skip


def page_data(path: Path) -> dict:
    page = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="fx-data">(.*?)</script>', page, re.S)
    assert match, page[:500]
    return json.loads(match.group(1))


def test_html_report_is_written_and_its_path_printed(session, project):
    assert session.returncode == 1, session.stdout + session.stderr
    page = project / "out" / "fx-report.html"
    assert f"HTML report: {page}" in session.stdout
    data = page_data(page)
    assert [(c["test"].split("::")[1], c["status"]) for c in data["checks"]] == [
        ("test_good", "passed"),
        ("test_classifier", "untraceable"),
        ("test_noisy", "mismatch"),
        ("test_length", "xfailed"),
        (f"test_evil[{EVIL_ID}]", "untraceable"),
    ]
    classifier = data["checks"][1]
    assert (classifier["where"], classifier["source"], classifier["fix"]) == (
        f"models.py:{BRANCH}", "if x.sum() > 0:", {"text": FIX, "verified": True, "partial": False}
    )
    tree = tree_rows(data, classifier["tree"])
    assert [row[1] for row in tree if row[3] == "f"] == ["gate"]
    assert not list(project.glob("out/.fxtrace-*"))  # written atomically: no temporary left


def test_json_report_gains_the_module_tree_and_keeps_its_fields(session, project):
    results = json.loads((project / "out" / "fx.json").read_text())["results"]
    assert list(results[0]) == [
        "nodeid", "model", "backend", "status", "category", "location", "module", "nodes", "coverage",
        "suggestion", "trace_seconds", "modules", "grad_mode", "module_type", "statement", "message",
    ]  # fmt: skip
    gate = next(n for n in CheckRecord.from_json(results[1]).modules if n.path == "gate")
    assert gate.to_json() == {
        "path": "gate", "type": "Gate", "status": "failed", "params": 72, "category": "control-flow",
        "location": {"path": "models.py", "line": BRANCH},
    }  # fmt: skip


def test_step_summary_is_appended_with_counts_failing_rows_and_fixes(session, project):
    text = (project / "step-summary.md").read_text()
    assert text.startswith("earlier step output\n### pytest-fxtrace: 5 checks: 1 passed, 2 untraceable, 1 mismatch, 1 xfailed\n")
    assert f"| `test_models.py::test_classifier` | `Classifier.gate` | untraceable (control-flow) | `models.py:{BRANCH}` | `if x.sum() > 0:` | `{FIX}` |" in text
    assert f"| `test_models.py::test_evil[{EVIL_ID}]` |" in text  # shown as code, i.e. as text
    assert "`fx-report.html` in this run's artifacts (https://github.com/o/r/actions/runs/42)" in text
    assert "test_good" not in text


def test_xdist_page_has_the_same_checks_as_a_serial_one(project, session):
    result = run_in_project(project, "-n", "2", "--fx-html=out/n2.html")
    assert result.returncode == 1, result.stdout + result.stderr
    serial, parallel = page_data(project / "out" / "fx-report.html"), page_data(project / "out" / "n2.html")
    serial.pop("created"), parallel.pop("created")
    for check in serial["checks"] + parallel["checks"]:
        check.pop("seconds")
        # the dump folder's path, and the size of the noise (unseeded randn) differ
        check["text"] = re.sub(r"pytest-\d+/\S*|error [-+.\de]+", "", check["text"])
    assert parallel == serial


def test_ini_fxtrace_html_writes_the_report_relative_to_the_ini_file(project, tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nfxtrace_html = reports/fx.html\n")
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "test_models.py").write_text(TESTS)
    (tmp_path / "sub").mkdir()
    result = run_in_project(tmp_path / "sub", "-p", "no:xdist", "-k", "good", "--rootdir", str(tmp_path), str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [c["status"] for c in page_data(tmp_path / "reports" / "fx.html")["checks"]] == ["passed"]


def test_html_report_path_that_is_a_directory_is_a_usage_error(project):
    (project / "adir").mkdir(exist_ok=True)
    result = run_in_project(project, "-p", "no:xdist", "--fx-html=adir")
    assert result.returncode == 4
    assert "--fx-html=adir:" in result.stderr and "is a directory" in result.stderr
    assert f"--fx-html={os.path.join('adir', 'fx-report.html')}" in result.stderr


def test_pytest_html_rows_link_to_each_check(project, session):
    pytest.importorskip("pytest_html", reason="pytest-html is optional (the test extra installs it)")
    result = run_in_project(project, "-p", "no:xdist", "--html=html/results.html", "--self-contained-html", "--fx-html=out/fx-report.html")
    assert result.returncode == 1, result.stdout + result.stderr
    page = (project / "html" / "results.html").read_text()
    assert "fxtrace</th>" in page
    data = page_data(project / "out" / "fx-report.html")
    assert any(c["key"] == "test_models.py::test_classifier" for c in data["checks"])
    # pytest-html keeps its rows as JSON inside an attribute; the cell's link is in there
    assert re.search(r'col-fxtrace.*?\.\./out/fx-report\.html#test_models\.py%3A%3Atest_classifier.*?Classifier: untraceable', page.replace("&#34;", '"').replace("&quot;", '"').replace('\\"', '"'))


# -- in a browser (tests/browser.py: browser_page) ---------------------------------------------


def shoot(page, tmp_path: Path, name: str) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(tmp_path / name), full_page=True)
    folder = os.environ.get("FXTRACE_SCREENSHOTS")
    if folder:
        shutil.copy(tmp_path / name, Path(folder) / name)


def test_browser_shows_the_failing_model_its_red_submodule_and_the_fix(session, project, browser_page, tmp_path):
    page = browser_page
    page.goto((project / "out" / "fx-report.html").as_uri())
    row = page.locator("tr.row", has_text="test_models.py::test_classifier")
    assert row.is_visible() and "untraceable" in row.inner_text() and "control-flow" in row.inner_text()
    statement = page.locator("tr.subrow", has_text="if x.sum() > 0:").first
    assert FIX in statement.inner_text()
    row.click()
    detail = page.locator("tr.detail")
    gate = detail.locator(".node.f", has_text="gate")
    assert gate.is_visible()
    assert f"control-flow at models.py:{BRANCH}" in gate.inner_text()
    red = gate.evaluate("n => getComputedStyle(n).borderLeftColor")
    assert red == "rgb(207, 34, 46)", red
    assert detail.locator(".node.l", has_text="head").is_visible()  # a leaf
    assert detail.locator("pre.fix").inner_text() == FIX
    shoot(page, tmp_path, "html-report.png")
    assert page.events == []


def test_browser_status_filter_hides_passed_rows(session, project, browser_page, tmp_path):
    page = browser_page
    page.goto((project / "out" / "fx-report.html").as_uri())
    good = page.locator("tr.row", has_text="test_models.py::test_good")
    assert good.is_visible() and page.locator(".shown").inner_text() == "5 of 5 shown"
    page.locator("label.status-filter", has_text="passed").locator("input").uncheck()
    assert not good.is_visible()
    assert page.locator("tr.row:visible").count() == 4
    assert page.locator(".shown").inner_text() == "4 of 5 shown"
    page.locator("button.count", has_text="untraceable").click()  # only that status
    assert [t.split("\n")[0] for t in page.locator("tr.row:visible td.test").all_inner_texts()] == [
        "test_models.py::test_classifier", f"test_models.py::test_evil[{EVIL_ID}]",
    ]  # fmt: skip
    shoot(page, tmp_path, "html-report-filtered.png")
    assert page.events == []


def test_browser_shows_script_in_test_ids_and_module_names_as_text(session, project, browser_page):
    page = browser_page
    page.goto((project / "out" / "fx-report.html").as_uri())
    row = page.locator("tr.row", has_text=f"test_evil[{EVIL_ID}]")
    assert row.is_visible()
    row.click()
    assert page.locator(".node", has_text=EVIL).first.is_visible()
    assert page.locator("script").count() == 2  # the page's data and its own script, nothing added
    page.goto((project / "out" / "fx-report.html").as_uri() + "#" + "test_models.py%3A%3Atest_noisy")
    assert page.locator("tr.detail").first.is_visible()  # a link into the page opens that check
    assert "baked-constant at models.py" in page.locator(".node.f").first.inner_text()
    assert page.events == []  # no alert, no script error, no request off this file


# -- the page's layout in a 1280x1000 window --------------------------------------------------

LONG_ID = (
    "tests/integration/vision/detection/test_two_stage_detectors.py::TestFasterRCNNWithFeaturePyramidNetwork"
    "::test_region_proposal_network_keeps_its_anchors[resnet50_fpn_v2-800x1333]"
)
LONG_WHERE = "src/acme_models/detection/anchor_generator.py:123"  # 369 px: the column has room at 1280 px


def many_checks(
    tmp_path: Path, where: str = "models.py:3", first_id: str = "tests/test_zoo.py::test_model[0]", count: int = 60
) -> str:
    """A page of ``count`` checks drawn from records (every tenth untraceable), as a file URL."""
    from pytest_fxtrace.report.html import render_html
    from pytest_fxtrace.report.records import CheckRecord

    records = [
        CheckRecord(
            nodeid=first_id if i == 0 else f"tests/test_zoo.py::test_model[{i}]", model="zoo.Net", order=(i, 0),
            status="untraceable" if i % 10 == 7 else "passed", text="Net is not traceable\n  category: control-flow",
            **({"category": "control-flow", "location": tuple(where.split(":")), "source": "if x.sum() > 0:",
                "module": "block"} if i % 10 == 7 else {}),
        )  # fmt: skip
        for i in range(count)
    ]
    path = tmp_path / "many.html"
    path.write_text(render_html(records, "2.14.1"), encoding="utf-8")
    return path.as_uri()


def window(page, url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(url)


def test_browser_link_to_a_check_shows_its_row_below_the_sticky_filter_bar(browser_page, tmp_path):
    page = browser_page
    url = many_checks(tmp_path)
    for key in ("tests/test_zoo.py::test_model[30]", "tests/test_zoo.py::test_model[27]"):
        if page.url.startswith(url):  # a link within the page: hashchange
            page.evaluate("key => { location.hash = encodeURIComponent(key); }", key)
        else:
            window(page, url + "#" + quote(key, safe=""))
        row = page.locator(f'tr.row[id="{key}"]')
        assert row.locator("xpath=following-sibling::tr[contains(@class, 'detail')]").first.is_visible()
        bar, box = page.locator(".filters").bounding_box(), row.bounding_box()
        assert bar["y"] + bar["height"] <= box["y"] <= 1000 - box["height"], (key, bar, box)
    assert page.events == []


def test_browser_draws_a_long_table_as_it_scrolls_and_a_link_reaches_any_row(browser_page, tmp_path):
    """Rows are built when they come into view, fifty at a time, so a page of 10,000
    checks opens and filters as fast as one of a few hundred (benchmarks/page_speed.py)."""
    page = browser_page
    window(page, many_checks(tmp_path, count=250))
    assert page.locator(".shown").inner_text() == "250 of 250 shown"
    assert page.locator("tr.row").count() == 50  # the first fifty, failing ones first
    assert page.locator("tr.more").inner_text() == "200 more rows: scroll or click to show them"
    page.locator("tr.more").scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('tr.row').length >= 100")
    page.locator("label.status-filter", has_text="passed").locator("input").uncheck()
    assert page.locator("tr.row").count() == 25 and page.locator("tr.more").count() == 0
    assert page.locator(".shown").inner_text() == "25 of 250 shown"
    # a link to a row the filters hide, not built yet: every row shown again, that one open
    key = "tests/test_zoo.py::test_model[248]"
    page.evaluate("key => { location.hash = encodeURIComponent(key); }", key)
    row = page.locator(f'tr.row[id="{key}"]')
    assert row.locator("xpath=following-sibling::tr[1][contains(@class, 'detail')]").is_visible()
    assert page.locator(".shown").inner_text() == "250 of 250 shown"
    assert page.events == []


def test_browser_lists_failing_checks_first_each_in_collection_order(session, project, browser_page):
    page = browser_page
    window(page, (project / "out" / "fx-report.html").as_uri())
    rows = page.locator("tr.row")
    assert [rows.nth(i).get_attribute("data-status") for i in range(rows.count())] == [
        "untraceable", "mismatch", "untraceable", "passed", "xfailed",
    ]  # fmt: skip
    assert rows.first.locator("td.test").inner_text() == "test_models.py::test_classifier"
    assert page.events == []


# the line breaks inside an element's text: (character before, character after) each
BREAKS = """cell => {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  const chars = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i); range.setEnd(node, i + 1);
      chars.push([node.data[i], range.getBoundingClientRect().top]);
    }
  }
  const breaks = [];
  for (let i = 1; i < chars.length; i++) if (chars[i][1] > chars[i - 1][1] + 2) breaks.push(chars[i - 1][0] + chars[i][0]);
  return breaks;
}"""


def test_browser_breaks_a_long_test_id_only_between_its_parts(browser_page, tmp_path):
    page = browser_page
    window(page, many_checks(tmp_path, first_id=LONG_ID))
    cell = page.locator(f'tr.row[id="{LONG_ID}"] td.test')
    assert cell.inner_text() == LONG_ID  # the text as it was: nothing added between its parts
    breaks = cell.evaluate(BREAKS)
    assert breaks, "the id fits one line: nothing tested"
    assert [pair for pair in breaks if re.fullmatch(r"\w\w", pair)] == [], breaks
    # a part too long for any column (a long parameter id) still wraps, inside the window
    window(page, many_checks(tmp_path, first_id=f"tests/test_zoo.py::test_prompt[{'a_long_prompt_' * 12}]"))
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")


def test_browser_shows_the_whole_location_when_its_column_has_room(browser_page, tmp_path):
    page = browser_page
    window(page, many_checks(tmp_path, where=LONG_WHERE))
    cell = page.locator("tr.row td.loc", has_text="anchor_generator.py").first
    assert cell.inner_text() == LONG_WHERE
    sizes = cell.evaluate("""td => {
      const range = document.createRange(); range.selectNodeContents(td);
      const style = getComputedStyle(td);
      return {scroll: td.scrollWidth, client: td.clientWidth, text: range.getBoundingClientRect().width,
              room: td.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
              lines: range.getClientRects().length};
    }""")
    assert sizes["scroll"] <= sizes["client"] and sizes["text"] <= sizes["room"], sizes
    assert cell.evaluate(BREAKS) == [], sizes  # one line
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")  # and the table fits
