"""--fx-baseline for compile checks, end to end: the entries hold the graph-break sites; a new
site fails at an unchanged count, a site that no longer breaks is an xpass naming it, a line
inserted above a site leaves it known, an entry without sites (an older file) is judged as
before, a check within its budget passes; the same bytes serial and under -n 2; and the
reports (summary, JSON, junit, annotations, step summary, HTML page) show the sites.

Three inner sessions for everything (module-scoped): the baseline written from the first
version of the models, serial and under -n 2, then a run against the second version.
"""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from forked_pytest import run_in_project

from pytest_fxtrace import _compat
from pytest_fxtrace.report.html import tree_rows

COMPILE_PROBLEM = _compat.compile_problem()
pytestmark = [
    pytest.mark.skipif(COMPILE_PROBLEM is not None, reason=str(COMPILE_PROBLEM)),
    pytest.mark.xdist_group(__name__),  # its module-scoped sessions run once, in one worker
]

# the first version of the user's models; the second (below) changes them
MODELS = textwrap.dedent(
    '''
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            y = self.proj(x)
            gain = y.norm().item()  # S-GAIN
            return y / (1 + gain)


    class Replaced(nn.Module):
        """One site in each version, not the same one."""

        def forward(self, x):
            print("step")  # S-PRINT
            return x * 2


    class PartlyFixed(nn.Module):
        """Two sites, one of them in a submodule; the second version fixes the branch."""

        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            y = self.block(x)
            if y.sum() > 0:  # S-BRANCH
                y = y + 1
            return y


    class Wrapped(nn.Module):
        """One break, in a submodule."""

        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x).relu()


    class Drifted(nn.Module):
        """The same break in both versions, lines below where it was."""

        def forward(self, x):
            y = x.relu()
            scale = y.mean().item()  # S-ITEM
            return y * scale
    '''
)

# the second version: lines inserted at the top (every site moves), Replaced breaks at another
# statement (one site, as before), PartlyFixed's branch is a torch.where
MODELS_2 = '"""Models, second version."""\nimport math  # unused: two lines above every site\n' + (
    MODELS.replace('        print("step")  # S-PRINT\n', "        if x.sum() > 0:  # S-NEWBRANCH\n            x = x + 1\n")
    .replace("        if y.sum() > 0:  # S-BRANCH\n            y = y + 1\n", "        y = torch.where(y.sum() > 0, y + 1, y)\n")
)  # fmt: skip

TESTS = textwrap.dedent(
    """
    import pytest, torch
    import models as m

    @pytest.mark.traceable(backend="compile")
    def test_replaced():
        m.Replaced()(torch.randn(2, 4))

    @pytest.mark.traceable(backend="compile")
    def test_partly_fixed():
        m.PartlyFixed()(torch.randn(2, 4))

    @pytest.mark.traceable(backend="compile")
    def test_drifted():
        m.Drifted()(torch.randn(2, 4))

    @pytest.mark.traceable(backend="compile")
    def test_legacy():
        m.Drifted()(torch.randn(2, 4))

    @pytest.mark.traceable(backend="compile", max_graph_breaks=1)
    def test_within_budget():
        m.Wrapped()(torch.randn(2, 4))
    """
)


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


class Runs:
    def __init__(self, root: Path, serial, n2, second) -> None:
        self.root, self.serial, self.n2, self.second = root, serial, n2, second

    def entries(self, name: str = "baseline.json") -> dict[str, dict]:
        document = json.loads((self.root / name).read_text())
        return {entry["nodeid"].partition("::")[2]: entry for entry in document["entries"]}

    def results(self) -> dict[str, dict]:
        return {r["nodeid"].partition("::")[2]: r for r in json.loads((self.root / "fx.json").read_text())["results"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("compile_baseline")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "models.py").write_text(MODELS)
    (root / "test_models.py").write_text(TESTS)
    serial = run_in_project(root, "-p", "no:xdist", "--fx-baseline=baseline.json", "--fx-baseline-update")
    n2 = run_in_project(root, "-n", "2", "--fx-baseline=n2.json", "--fx-baseline-update")
    # an older file's entry: no sites (judged by status and category)
    document = json.loads((root / "baseline.json").read_text())
    for entry in document["entries"]:
        if entry["nodeid"].endswith("::test_legacy"):
            entry.pop("sites", None)
    (root / "legacy.json").write_text(json.dumps(document))
    (root / "models.py").write_text(MODELS_2)
    (root / "step.md").write_text("")
    second = run_in_project(
        root, "-n", "2", "--fx-baseline=legacy.json", "--fx-report=fx.json", "--fx-html=fx.html",
        "--junitxml=junit.xml", "-rA", GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(root / "step.md"),
    )  # fmt: skip
    return Runs(root, serial, n2, second)


def test_the_update_writes_each_failing_compile_check_s_sites_and_the_same_bytes_under_n2(runs: Runs) -> None:
    assert "(4 entries, 4 added, 0 removed)" in runs.serial.stdout, runs.serial.stdout + runs.serial.stderr
    entries = runs.entries()
    assert set(entries) == {"test_replaced", "test_partly_fixed", "test_drifted", "test_legacy"}  # within budget: none
    assert entries["test_partly_fixed"]["sites"] == [
        {"path": "models.py", "line": line_of(MODELS, "S-GAIN"), "module": "block",
         "type": entries["test_partly_fixed"]["sites"][0]["type"], "statement": "gain = y.norm().item()"},
        {"path": "models.py", "line": line_of(MODELS, "S-BRANCH"), "module": "",
         "type": entries["test_partly_fixed"]["sites"][1]["type"], "statement": "if y.sum() > 0:"},
    ]  # fmt: skip
    assert entries["test_replaced"]["sites"][0]["statement"] == 'print("step")'
    assert (runs.root / "baseline.json").read_bytes() == (runs.root / "n2.json").read_bytes()


def test_a_new_site_fails_at_an_unchanged_count_naming_it(runs: Runs) -> None:
    out = runs.second.stdout
    assert "FAILED test_models.py::test_replaced" in out, out
    new = line_of(MODELS_2, "S-NEWBRANCH")
    assert re.search(
        rf"1 new graph-break site not in the baseline \S+legacy.json \(its entry test_models.py::test_replaced "
        rf"\[models.Replaced, compile\]: untraceable \(unsupported\)\):\n +models.py:{new} forward: "
        rf"`if x.sum\(\) > 0:` \(control-flow, .*\[GB0170\]\)\n +no longer breaks: models.py:\d+ forward: `print\(\"step\"\)`",
        out,
    ), out
    assert runs.results()["test_replaced"]["status"] == "untraceable"


def test_a_site_that_no_longer_breaks_is_an_xpass_naming_it(runs: Runs) -> None:
    out = runs.second.stdout
    branch = line_of(MODELS, "S-BRANCH")
    assert "FAILED test_models.py::test_partly_fixed" in out
    assert (
        "[XPASS(strict)] 1 graph-break site baselined for test_models.py::test_partly_fixed [models.PartlyFixed, "
        f"compile] no longer breaks: delete it from its entry in {runs.root / 'legacy.json'} (or run "
        f"--fx-baseline-update):\n    models.py:{branch} forward: `if y.sum() > 0:`" in out
    ), out
    record = runs.results()["test_partly_fixed"]
    assert record["status"] == "xpassed"
    assert "no longer breaks" in record["message"] and f"models.py:{branch}" in record["message"]


def test_a_moved_site_and_an_entry_without_sites_stay_baselined_and_the_budget_still_passes(runs: Runs) -> None:
    results = runs.results()
    assert results["test_drifted"]["graph_breaks"][0]["line"] == line_of(MODELS_2, "S-ITEM")  # it moved
    assert results["test_drifted"]["status"] == "xfailed"
    assert results["test_legacy"]["status"] == "xfailed"
    assert results["test_within_budget"]["status"] == "passed"
    assert "3 failed" not in runs.second.stdout and "2 failed, 1 passed, 2 xfailed" in runs.second.stdout


def test_the_reports_show_the_sites(runs: Runs) -> None:
    out, new = runs.second.stdout, line_of(MODELS_2, "S-NEWBRANCH")
    # the summary
    assert "graph breaks and recompiles (torch.compile):" in out
    assert "  test_models.py::test_replaced (Replaced): 1 graph-break site, 0 recompiles" in out
    assert f"    models.py:{new} forward: `if x.sum() > 0:` (control-flow, " in out
    # one annotation per site, at its line
    annotations = [line for line in out.splitlines() if line.startswith("::error") and "test_replaced" in line]
    assert len(annotations) == 1 and f"file=models.py,line={new}," in annotations[0]
    assert "graph break (control-flow) [compile]" in annotations[0]
    partly = [line for line in out.splitlines() if line.startswith("::error") and "test_partly_fixed" in line]
    assert len(partly) == 1 and "file=test_models.py" in partly[0] and "no longer breaks" in partly[0]
    # junit
    cases = {case.get("name"): case for case in ET.parse(runs.root / "junit.xml").iter("testcase")}
    properties = [(p.get("name"), p.get("value")) for p in cases["test_partly_fixed"].iter("property")]
    [site] = [value for name, value in properties if name == "fx_graph_break"]
    assert site.startswith(f"models.py:{line_of(MODELS_2, 'S-GAIN')} block: `gain = y.norm().item()` (data-dependent, ")
    assert site.endswith("[GB0124])") and ("fx_status", "xpassed") in properties
    # the step summary
    step = (runs.root / "step.md").read_text()
    assert "#### graph breaks and recompiles (torch.compile)" in step
    assert f"| `test_models.py::test_replaced` | graph break | `models.py:{new}` |  | `if x.sum() > 0:` |" in step
    assert "| `test_models.py::test_partly_fixed` | graph break |" not in step  # xpassed: its sites are baselined
    # the HTML page: the sites, and the submodule holding one coloured
    page = (runs.root / "fx.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="fx-data">(.*?)</script>', page, re.S).group(1))
    check = next(c for c in data["checks"] if c["test"].endswith("::test_partly_fixed"))
    assert [(b["module"], b["statement"]) for b in check["breaks"]] == [("block", "gain = y.norm().item()")]
    assert [row[1] for row in tree_rows(data, check["tree"]) if row[3] == "f"] == ["block"]  # the failing site's
    within = next(c for c in data["checks"] if c["test"].endswith("::test_within_budget"))
    assert [(row[1], row[5]) for row in tree_rows(data, within["tree"]) if row[3] == "b"] == [("block", "data-dependent")]


def test_the_page_draws_the_sites_and_the_submodule_holding_a_break_in_orange(runs: Runs, browser_page) -> None:  # noqa: F811
    page = browser_page
    page.goto((runs.root / "fx.html").as_uri())
    page.locator("tr.row", has_text="test_within_budget").click()
    detail = page.locator("tr.detail")
    block = detail.locator(".node.b", has_text="block")
    assert f"data-dependent at models.py:{line_of(MODELS_2, 'S-GAIN')}" in block.inner_text()
    assert block.evaluate("n => getComputedStyle(n).borderLeftColor") == "rgb(188, 76, 0)"
    sites = detail.locator(".box", has_text="graph breaks: 1 graph-break site, 0 recompiles")
    assert "gain = y.norm().item()" in sites.inner_text() and "[GB0124]" in sites.inner_text()
    assert page.events == []  # no script error, nothing fetched
