"""A compile check's graph-break sites and recompiles in every report format, and the
baseline's judgement by break identity: unit level, no subprocess (end to end:
tests/test_compile_baseline.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report import parse_workflow_command

from pytest_fxtrace.plugin.baseline import Baseline
from pytest_fxtrace.report.annotations import annotation_lines
from pytest_fxtrace.report.baseline import BaselineFormatError, Entry, Site, parse_entries
from pytest_fxtrace.report.document import junit_properties
from pytest_fxtrace.report.html import page_data, tree_rows
from pytest_fxtrace.report.records import CheckRecord
from pytest_fxtrace.report.sites import break_text, compile_counts, recompile_text, site_key
from pytest_fxtrace.report.stepsummary import step_summary
from pytest_fxtrace.report.summary import plain, summary_lines
from pytest_fxtrace.tracereport import TraceReport
from pytest_fxtrace.types import Category, GraphBreak, Location, ModuleNode, Status


def site(line: int, statement: str | None, module: str = "", **fields) -> dict:
    out = {"path": "models.py" if statement else None, "line": line if statement else None, "module": module,
           "type": "Data-dependent branching", "id": "GB0170", "category": "control-flow",
           "reason": "Detected data-dependent branching", "statement": statement}  # fmt: skip
    out.update(fields)
    return out


BRANCH = site(12, "if x.sum() > 0:")
ITEM = site(30, "gain = y.norm().item()", "block", type="Unsupported Tensor.item() call", id="GB0124",
            category="data-dependent", reason="Dynamo does not support tracing Tensor.item()")  # fmt: skip
STEP = {"reason": "`self.step` was 1, now 2", "path": "models.py", "line": 40, "counted": True}
SIZES = {"reason": "`x.shape[0]` went from 2 to 4 (not counted)", "path": None, "line": None, "counted": False}


def compiled(i: int = 1, status: str = "untraceable", **fields) -> CheckRecord:
    values = dict(
        model="models.Net", status=status, category="data-dependent", backend="compile",
        location=("models.py", 30), module="block", module_type="Block", order=(i, 0),
        graph_breaks=[ITEM, BRANCH], recompiles=[STEP, SIZES],
    )  # fmt: skip
    values.update(fields)
    return CheckRecord(nodeid=f"tests/test_m.py::test_{i}", **values)  # type: ignore[arg-type]


# -- the words ------------------------------------------------------------------------------


def test_a_site_and_a_recompile_read_on_one_line_each():
    assert break_text(ITEM) == (
        "models.py:30 block: `gain = y.norm().item()` (data-dependent, Unsupported Tensor.item() call [GB0124])"
    )
    assert break_text(site(0, None)) == "(no line of yours) forward: (control-flow, Data-dependent branching [GB0170])"
    assert recompile_text(STEP) == "`self.step` was 1, now 2 (guarded at models.py:40)"
    assert recompile_text(SIZES) == "`x.shape[0]` went from 2 to 4 (not counted)"
    assert compile_counts([ITEM, BRANCH], [STEP, SIZES]) == "2 graph-break sites, 1 recompile"


def test_a_site_in_an_installed_library_reads_by_its_import_path_as_the_table_does():
    import json  # a package of a sys.path entry outside the working directory, as site-packages

    library = json.__file__
    assert Path(library).is_absolute() and not library.startswith(str(Path.cwd()))
    text = break_text(site(151, "if boxes.numel() == 0:", "roi_heads", path=library))
    assert text.startswith("json/__init__.py:151 roi_heads: "), text  # was the absolute path
    assert recompile_text({"reason": "r", "path": library, "line": 3}) == "r (guarded at json/__init__.py:3)"


def test_a_site_is_known_by_file_submodule_and_statement_not_by_line_or_torch_s_type(tmp_path, monkeypatch):
    moved = site(14, "if  x.sum()   > 0:", type="Data-dependent branching (renamed)")
    assert site_key(moved, tmp_path) == site_key(BRANCH, tmp_path) == ("models.py", "", "if x.sum() > 0:")
    assert site_key(site(12, "if x.sum() > 0:", "block"), tmp_path) != site_key(BRANCH, tmp_path)
    assert site_key(site(0, None), tmp_path) == (None, "", "<Data-dependent branching>")
    library = tmp_path / "venv" / "site-packages" / "lib" / "m.py"  # a library's file: by its import path
    monkeypatch.syspath_prepend(tmp_path / "venv" / "site-packages")
    assert site_key(site(3, "y = f(x)", path=str(library)), tmp_path / "project")[0] == "lib/m.py"


# -- the formats ----------------------------------------------------------------------------


def test_summary_lists_each_compile_check_s_sites_and_recompiles_under_the_table():
    text = [plain(line) for line in summary_lines([compiled()], width=None)]
    start = text.index("graph breaks and recompiles (torch.compile):")
    assert text[start + 1 :] == [
        "  tests/test_m.py::test_1 (Net): 2 graph-break sites, 1 recompile",
        f"    {break_text(ITEM)}",
        f"    {break_text(BRANCH)}",
        "    recompile: `self.step` was 1, now 2 (guarded at models.py:40)",
        "    recompile: `x.shape[0]` went from 2 to 4 (not counted)",
    ]
    many = compiled(graph_breaks=[site(n, f"y{n} = x.item()") for n in range(8)], recompiles=[])
    short = [plain(line) for line in summary_lines([many], width=60)]
    assert short[-1] == "    ... and 3 more (-v shows them all)" and all(len(line) <= 60 for line in short[-6:])
    assert not any("graph breaks" in plain(line) for line in summary_lines([many], verbosity=-1))
    assert not any("graph breaks" in plain(line) for line in summary_lines([compiled(graph_breaks=None, recompiles=None)]))


def test_junit_has_a_property_per_site_and_per_recompile():
    properties = junit_properties(compiled())
    assert [value for name, value in properties if name == "fx_graph_break"] == [break_text(ITEM), break_text(BRANCH)]
    assert [value for name, value in properties if name == "fx_recompile"] == [recompile_text(STEP), recompile_text(SIZES)]
    assert [name for name, _ in junit_properties(compiled(backend="fx", graph_breaks=None, recompiles=None))] == [
        "fx_model", "fx_backend", "fx_status", "fx_category", "fx_location", "fx_module",
    ]  # fmt: skip


def test_annotations_one_per_site_at_its_line_and_a_baseline_xpass_on_the_test(tmp_path):
    (tmp_path / ".git").mkdir()
    test_file = str(tmp_path / "tests" / "test_m.py")
    lines = annotation_lines([compiled(test_file=test_file, test_line=7)], tmp_path, tmp_path)
    found = [parse_workflow_command(line) for line in lines]
    assert [(props["file"], props["line"]) for _, props, _ in found] == [("models.py", "30"), ("models.py", "12")]
    assert found[0][1]["title"] == "pytest-fxtrace: Net.block graph break (data-dependent) [compile]"
    assert found[1][2].splitlines() == [
        "tests/test_m.py::test_1", "Net breaks the graph here: site 2 of 2", f"  {break_text(BRANCH)}",
        "  Detected data-dependent branching",
    ]  # fmt: skip
    recompiling = compiled(category="specialization", location=("models.py", 40), file=str(tmp_path / "models.py"))
    assert len(annotation_lines([recompiling], tmp_path, tmp_path)) == 1  # the recompile, as before
    xpassed = compiled(status="xpassed", file=str(tmp_path / "models.py"), test_file=test_file, test_line=7,
                       text="1 graph-break site baselined for ... no longer breaks")  # fmt: skip
    [(_, props, message)] = [parse_workflow_command(line) for line in annotation_lines([xpassed], tmp_path, tmp_path)]
    assert (props["file"], props["line"]) == ("tests/test_m.py", "7") and "no longer breaks" in message


def test_step_summary_has_a_row_per_site_and_recompile_of_the_failing_compile_checks():
    text = step_summary([compiled(1), compiled(2, status="xfailed"), compiled(3, status="xpassed")], environ={})
    rows = [line for line in text.splitlines() if line.startswith("| `tests/")]
    site_rows = [row for row in rows if "| graph break |" in row or "| recompile" in row]
    assert site_rows == [
        "| `tests/test_m.py::test_1` | graph break | `models.py:30` | `block` | `gain = y.norm().item()` | "
        "`data-dependent, Unsupported Tensor.item() call [GB0124]: Dynamo does not support tracing Tensor.item()` |",
        "| `tests/test_m.py::test_1` | graph break | `models.py:12` |  | `if x.sum() > 0:` | "
        "`control-flow, Data-dependent branching [GB0170]: Detected data-dependent branching` |",
        "| `tests/test_m.py::test_1` | recompile | `models.py:40` | | | `` `self.step` was 1, now 2 `` |",
        "| `tests/test_m.py::test_1` | recompile (not counted) |  | | | "
        "`` `x.shape[0]` went from 2 to 4 (not counted) `` |",
    ]
    cut = step_summary([compiled(i, graph_breaks=[ITEM] * 40) for i in range(3)], environ={}, limit=4000)
    assert "graph-break sites and recompiles not shown here" in cut and len(cut.encode()) <= 4000


def test_the_page_lists_sites_and_recompiles_and_colours_the_submodules_holding_a_break():
    modules = tuple(map(ModuleNode.from_json, [
        {"path": "", "type": "Net", "status": "traced", "params": 20},
        {"path": "block", "type": "Block", "status": "failed", "params": 20, "category": "data-dependent",
         "location": {"path": "models.py", "line": 30}},
        {"path": "head", "type": "Head", "status": "traced", "params": 0},
        {"path": "head.inner", "type": "Inner", "status": "traced", "params": 0},
    ]))  # fmt: skip
    inner = site(50, "n = int(y)", "head.inner", category="type-conversion")
    data = page_data([compiled(modules=modules, graph_breaks=[ITEM, BRANCH, inner])], "2.14.1")
    check = data["checks"][0]
    assert check["breaks"][0] == {"where": "models.py:30", "module": "block", "statement": "gain = y.norm().item()",
                                  "kind": "data-dependent, Unsupported Tensor.item() call [GB0124]",
                                  "reason": "Dynamo does not support tracing Tensor.item()"}  # fmt: skip
    assert check["recompiles"][1] == {"reason": SIZES["reason"], "where": None, "counted": False}
    statuses = {row[1]: row[3:] for row in tree_rows(data, check["tree"])}
    assert statuses["block"][0] == "f"  # the failing site's, as the check marked it
    assert statuses[""] == ["b", 20, "control-flow", "models.py:12"]  # the root's own forward breaks too
    assert statuses["inner"] == ["b", 0, "type-conversion", "models.py:50"] and statuses["head"][0] == "t"
    fx = page_data([compiled(backend="fx", graph_breaks=None, recompiles=None, modules=modules)], "2.14.1")
    assert "breaks" not in fx["checks"][0]


# -- the baseline ---------------------------------------------------------------------------


def report(*sites: GraphBreak, category: Category = Category.CONTROL_FLOW) -> TraceReport:
    return TraceReport(
        ok=False, status=Status.UNTRACEABLE, model="models.Net", category=category, backend="compile",
        message="Net is not compilable", graph_breaks=sites,
    )  # fmt: skip


def brk(line: int, statement: str, module: str = "", category: str = "control-flow") -> GraphBreak:
    return GraphBreak(Location("models.py", line, statement), module, None, "Data-dependent branching", "GB0170",
                      "Detected data-dependent branching", category)  # fmt: skip


def entry(*sites: Site | None, category: str = "control-flow") -> Entry:
    listed = None if sites == (None,) else tuple(s for s in sites if s is not None)
    return Entry("t.py::test_net", "compile", "models.Net", "untraceable", category, listed)


def known(line: int, statement: str, module: str = "") -> Site:
    return Site("models.py", line, module, "Data-dependent branching", statement)


@pytest.fixture
def in_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # Location paths are relative to the working directory, as a check writes them
    return tmp_path


def judge(baseline_entry: Entry, *found: TraceReport, root: Path):
    baseline = Baseline(root / "b.json", [baseline_entry], update=False, rootdir=root)
    return baseline.judge("t.py::test_net", list(found), 0)


def test_a_moved_or_reformatted_site_is_the_same_site_and_a_duplicate_statement_counts_twice(in_project):
    same = judge(entry(known(12, "if x.sum() > 0:")), report(brk(40, "if x.sum() >  0:")), root=in_project)
    assert same.outcome == "xfail" and same.failed_as == Status.XFAILED
    twice = entry(known(12, "y = y.item()"), known(20, "y = y.item()"))
    assert judge(twice, report(brk(12, "y = y.item()"), brk(22, "y = y.item()")), root=in_project).outcome == "xfail"
    once = judge(twice, report(brk(12, "y = y.item()")), root=in_project)
    assert once.outcome == "fail" and once.settled == {0: (Status.XPASSED, once.settled[0][1])}
    assert "1 graph-break site baselined for t.py::test_net [models.Net, compile] no longer breaks" in once.message
    assert "models.py:20 forward: `y = y.item()`" in once.settled[0][1]


def test_a_new_site_fails_even_at_an_unchanged_count_and_another_category(in_project):
    result = judge(
        entry(known(12, "if x.sum() > 0:"), known(30, "print(x)"), category="control-flow"),
        report(brk(12, "if x.sum() > 0:"), brk(31, "n = int(x)", category="type-conversion")),
        root=in_project,
    )
    assert result.outcome == "fail" and not result.settled
    assert "1 new graph-break site not in the baseline" in result.message
    assert "    models.py:31 forward: `n = int(x)` (type-conversion, Data-dependent branching [GB0170])" in result.message
    assert "    no longer breaks: models.py:30 forward: `print(x)`" in result.message
    # the first site fixed: the category follows the next one, and the check is an xpass, not "changed"
    moved = judge(entry(known(12, "if x.sum() > 0:"), known(30, "n = int(x)"), category="control-flow"),
                  report(brk(30, "n = int(x)", category="type-conversion"), category=Category.TYPE_CONVERSION),
                  root=in_project)  # fmt: skip
    assert moved.outcome == "fail" and moved.settled[0][0] == Status.XPASSED


def test_a_recompile_failure_against_a_break_failure_and_an_entry_without_sites_are_judged_by_category(in_project):
    recompiling = report(brk(12, "if x.sum() > 0:"), category=Category.SPECIALIZATION)
    result = judge(entry(known(12, "if x.sum() > 0:")), recompiling, root=in_project)
    assert result.outcome == "fail" and "expects untraceable (control-flow): the failure changed" in result.message
    assert judge(entry(None), report(brk(99, "anything()")), root=in_project).outcome == "xfail"
    assert judge(entry(None, category="unsupported"), report(brk(12, "x")), root=in_project).outcome == "fail"


def test_sites_in_the_file_are_read_and_a_malformed_one_says_where():
    document = {"entries": [{"nodeid": "n", "status": "untraceable", "backend": "compile", "sites": [
        {"path": "m.py", "line": 3, "module": "", "type": None, "statement": "print(x)"}]}]}  # fmt: skip
    [read] = parse_entries(document)
    assert read.sites == (Site("m.py", 3, "", None, "print(x)"),)
    assert "sites" not in Entry("n", "fx", "m.M", "untraceable", None).to_json()  # another backend's: five keys
    document["entries"][0]["sites"][0]["line"] = "3"
    with pytest.raises(BaselineFormatError, match=r'entries\[0\]\["sites"\]\[0\]\["line"\] is the string "3", not a whole number'):
        parse_entries(document)
    document["entries"][0]["sites"] = {"path": "m.py"}
    with pytest.raises(BaselineFormatError, match=r'entries\[0\]\["sites"\] is an object, not a list'):
        parse_entries(document)


def test_the_page_speaks_of_each_backend_s_capture_in_its_own_verb():
    records = [compiled(1), compiled(2, backend="export"), compiled(3, backend="fx", graph_breaks=None, recompiles=None)]
    data = page_data(records, "2.14.1")
    assert {check["backend"]: check["past"] for check in data["checks"]} == {
        "compile": "compiled", "export": "exported", "fx": "traced"
    }  # fmt: skip


def test_the_page_s_fix_badge_says_the_backend_s_verb_and_a_partial_fix_is_not_called_a_pass(browser_page, tmp_path):
    from pytest_fxtrace.report.html import render_html

    full = {"text": "torch._dynamo.config.capture_scalar_outputs = True; ...", "verified": True, "options": {}}
    partial = {**full, "text": "...; for the rest, in code: ...", "partial": True}
    records = [compiled(1, suggestion=full), compiled(2, suggestion=partial), compiled(3, backend="fx", suggestion=full)]
    (tmp_path / "page.html").write_text(render_html(records, "2.14.1"), encoding="utf-8")
    page = browser_page
    page.goto((tmp_path / "page.html").as_uri())
    badges = {}
    for i in (1, 2, 3):
        row = page.locator("tr.row", has_text=f"test_{i}")
        row.click()
        badges[i] = row.locator("xpath=following-sibling::tr[contains(@class, 'detail')][1]").locator(".badge").inner_text()
    assert badges == {
        1: "verified: compiled and matched eager",  # was "traced" for every backend
        2: "verified in part: compiled and matched eager, but leaves some (applied, the check still fails)",
        3: "verified: traced and matched eager",
    }
    assert page.events == []


def test_the_page_s_module_tree_says_the_backend_s_verb(browser_page, tmp_path):
    from pytest_fxtrace.report.html import render_html

    modules = tuple(map(ModuleNode.from_json, [
        {"path": "", "type": "Net", "status": "traced", "params": 20},
        {"path": "block", "type": "Block", "status": "failed", "params": 20, "category": "data-dependent"},
    ]))  # fmt: skip
    records = [
        compiled(1, modules=modules, coverage=0.5),
        compiled(2, backend="fx", graph_breaks=None, recompiles=None, modules=modules, coverage=0.5),
    ]
    (tmp_path / "page.html").write_text(render_html(records, "2.14.1"), encoding="utf-8")
    page = browser_page
    page.goto((tmp_path / "page.html").as_uri())
    said = {}
    for i in (1, 2):
        row = page.locator("tr.row", has_text=f"test_{i}")
        row.click()
        detail = row.locator("xpath=following-sibling::tr[contains(@class, 'detail')][1]")
        said[i] = (detail.locator(".legend > span").first.inner_text(), detail.get_by_text("module tree").first.inner_text())
    assert said == {
        1: ("compiled", "MODULE TREE \u00b7 50% COMPILED"),  # was "traced" for every backend (CSS capitals)
        2: ("traced", "MODULE TREE \u00b7 50% TRACED"),
    }
    assert page.events == []
