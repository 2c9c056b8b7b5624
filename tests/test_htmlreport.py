"""The HTML page's data, the step summary's Markdown, and the per-module tree the
engine gives a report (``TraceReport.modules``): engine and unit level.

End to end (a session writing --fx-html, the step summary file, pytest-html, a real
browser): tests/test_html_session.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from report_models import Branchy, Good
from torch import nn

from pytest_fxtrace.backends.base import Seams
from pytest_fxtrace.collection import module_tree
from pytest_fxtrace.entry import check_model_backends
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.report.document import dump_json
from pytest_fxtrace.report.html import page_data, render_html, script_json, tree_rows
from pytest_fxtrace.report.records import CheckRecord
from pytest_fxtrace.report.stepsummary import LIMIT, append_step_summary, code, step_summary
from pytest_fxtrace.types import ModuleNode, ModuleStatus, NodeFailure

EVIL = "<script>alert(1)</script>"


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) + torch.randn(4)


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.branchy = Branchy()
        self.spare = nn.Linear(4, 4)  # never called

    def forward(self, x):
        return self.branchy(self.stem(x))


def tree_of(report) -> dict[str, ModuleNode]:
    return {node.path: node for node in report.modules}


# -- the engine's module tree -------------------------------------------------------------


def test_report_has_no_module_tree_unless_asked():
    (report,) = check_model_backends(Good(), (torch.randn(2, 4),), {}, TraceOptions())
    assert report.ok and report.modules is None


def test_traced_model_tree_marks_leaves_and_traced_modules_with_parameter_counts():
    (report,) = check_model_backends(Wrapper(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    tree = tree_of(report)
    assert not report.ok  # Branchy's block branches on a value
    assert list(tree) == [path for path, _ in Wrapper().named_modules()]
    assert tree["stem"].status == ModuleStatus.TRACED and tree["stem.0"].status == ModuleStatus.LEAF
    assert tree["branchy.block"].status == ModuleStatus.FAILED
    assert tree["branchy.block"].failure.category == "control-flow"
    assert tree["branchy.block"].failure.location[0].endswith("report_models.py")
    assert tree["spare"].status in (ModuleStatus.UNUSED, ModuleStatus.UNVISITED)
    assert tree[""].params == 40 and tree["stem"].params == 20 and tree["branchy"].params == 0
    assert tree["stem"].failure is None


def test_passing_model_tree_comes_from_its_graph():
    (report,) = check_model_backends(Good(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    assert report.ok
    assert [node.to_json() for node in report.modules] == [
        {"path": "", "type": "Good", "status": "traced", "params": 20},
        {"path": "lin", "type": "Linear", "status": "leaf", "params": 20},
    ]


def test_mismatching_model_tree_marks_where_it_diverges():
    (report,) = check_model_backends(Noisy(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    assert report.status == "mismatch"
    root = tree_of(report)[""]
    assert root.status == ModuleStatus.FAILED and root.failure.category == report.category == "baked-constant"
    assert root.failure.location == (report.location.path, report.location.line)
    assert tree_of(report)["lin"].status == ModuleStatus.LEAF


def plain(value) -> bool:
    """Whether ``value`` is data execnet sends: exactly str, int, float, bool, None, list or
    dict all the way down (a str enum passes json.dumps, and execnet refuses it)."""
    if isinstance(value, dict):
        return all(type(k) is str and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_module_tree_crosses_to_the_xdist_controller_as_plain_data():
    # execnet (the workers' channel) serializes str, not a str enum: a ModuleStatus on the
    # wire made every -n run's controller fail with "can't serialize <enum 'ModuleStatus'>"
    (failing,) = check_model_backends(Wrapper(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    (passing,) = check_model_backends(Good(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    for report in (failing, passing):
        record = CheckRecord.from_report(report, "t.py::test_m", rootdir=Path.cwd())
        wire = record.to_wire()
        assert wire["modules"] and plain(wire)
        assert CheckRecord.from_wire(json.loads(json.dumps(wire))) == record
        back = CheckRecord.from_json(json.loads(json.dumps(record.to_json())))  # a merged report's
        assert back.modules == record.modules and back.to_json() == record.to_json()
        assert [ModuleNode.from_json(n.to_json()) for n in report.modules] == list(report.modules)
    gate = next(n for n in CheckRecord.from_report(failing, "t", rootdir=Path.cwd()).modules if n.status == "failed")
    assert gate.failure is not None and gate.failure.category == "control-flow"
    assert gate.failure.location is not None and gate.failure.location[0] == "tests/report_models.py"


def test_module_tree_counts_a_shared_parameter_once():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.Sequential(shared))
    tree = {node.path: node for node in module_tree(model)}
    assert tree[""].params == 20
    assert all(node.status == ModuleStatus.UNVISITED for node in tree.values())


# -- the page's data ------------------------------------------------------------------------


def record(nodeid="t.py::test_a", status="passed", **fields) -> CheckRecord:
    return CheckRecord(nodeid=nodeid, model="pkg.Net", status=status, **fields)


def modules(name="block"):
    return tuple(map(ModuleNode.from_json, [
        {"path": "", "type": "Net", "status": "traced", "params": 10},
        {"path": name, "type": "Block", "status": "failed", "params": 10, "category": "control-flow",
         "location": {"path": "m.py", "line": 3}},
        {"path": f"{name}.lin", "type": "Linear", "status": "leaf", "params": 10},
    ]))  # fmt: skip


def test_page_data_stores_each_tree_and_class_name_once():
    records = [record(f"t.py::test_{i}", order=(i, 0), modules=modules()) for i in range(3)]
    data = page_data(records, "2.14.1")
    assert len(data["nodes"]) == 3 and [c["tree"] for c in data["checks"]] == [2, 2, 2]  # one tree, its root last
    assert data["types"] == ["Net", "Block", "Linear"]
    assert tree_rows(data, 2) == [
        [0, "", 0, "t", 10], [1, "block", 1, "f", 10, "control-flow", "m.py:3"], [2, "lin", 2, "l", 10],
    ]  # fmt: skip


def test_page_data_stores_a_repeated_block_once():
    def block(path: str) -> list[ModuleNode]:
        return [ModuleNode(path, "Block", ModuleStatus.TRACED, 20), ModuleNode(f"{path}.lin", "Linear", ModuleStatus.LEAF, 20)]

    tree = (ModuleNode("", "Net", ModuleStatus.TRACED, 60), *block("a"), *block("b"), *block("c"))
    data = page_data([record(modules=tree)], "2.14.1")
    assert len(data["nodes"]) == 3  # Net, one Block, one Linear for seven modules
    rows = tree_rows(data, data["checks"][0]["tree"])
    assert [(depth, name) for depth, name, *_ in rows] == [(0, ""), (1, "a"), (2, "lin"), (1, "b"), (2, "lin"), (1, "c"), (2, "lin")]


def twelve_blocks() -> tuple[ModuleNode, ...]:
    """A ViT-like tree: twelve identical blocks of three modules, one of them failing."""
    blocks = []
    for i in range(12):
        failing = i == 7
        blocks += [
            ModuleNode(f"blocks.{i}", "Block", ModuleStatus.FAILED if failing else ModuleStatus.TRACED, 30,
                       NodeFailure("control-flow", ("m.py", 9)) if failing else None),
            ModuleNode(f"blocks.{i}.attn", "Attention", ModuleStatus.TRACED, 20),
            ModuleNode(f"blocks.{i}.attn.qkv", "Linear", ModuleStatus.LEAF, 20),
            ModuleNode(f"blocks.{i}.mlp", "Linear", ModuleStatus.LEAF, 10),
        ]  # fmt: skip
    return (ModuleNode("", "ViT", ModuleStatus.TRACED, 360), ModuleNode("blocks", "Sequential", ModuleStatus.TRACED, 360), *blocks)


def test_json_report_stores_each_distinct_subtree_once_and_reads_it_back():
    tree = twelve_blocks()
    out = record(modules=tree).to_json()["modules"]
    assert out["types"] == ["ViT", "Sequential", "Block", "Attention", "Linear"]
    assert len(out["nodes"]) == 7  # 50 modules: a Linear of each size, Attention, two Blocks, Sequential, ViT
    assert out["nodes"][-1] == [0, "t", 360, ["blocks", 5]]
    failing = next(node for node in out["nodes"] if node[1] == "f")
    assert failing[4] == {"category": "control-flow", "location": {"path": "m.py", "line": 9}}
    assert CheckRecord.from_json(json.loads(json.dumps(record(modules=tree).to_json()))).modules == tree
    # the report's text keeps the tree on one line
    text = dump_json({"version": 1, "torch": "2.14.1", "results": [record(modules=tree).to_json()]})
    assert sum(line.lstrip().startswith('"modules": {"types":') for line in text.splitlines()) == 1
    assert json.loads(text)["results"][0]["modules"] == out


def test_modules_that_make_no_tree_of_paths_and_earlier_lists_are_kept_as_lists():
    loose = (ModuleNode("", "Net", ModuleStatus.TRACED, 1), ModuleNode("a.b", "Linear", ModuleStatus.LEAF, 1))
    out = record(modules=loose).to_json()["modules"]
    assert out == [node.to_json() for node in loose]  # no parent "a": the shared form would lose it
    assert CheckRecord.from_json(record(modules=loose).to_json()).modules == loose
    earlier = {**record().to_json(), "modules": [node.to_json() for node in twelve_blocks()]}  # a report of 0.1
    assert CheckRecord.from_json(earlier).modules == twelve_blocks()


def test_page_data_anchors_checks_by_test_id_and_treats_a_record_without_backend_as_fx():
    data = page_data([record(order=(0, 0)), record(order=(0, 1))], "2.14.1")
    assert [c["key"] for c in data["checks"]] == ["t.py::test_a", "t.py::test_a@1"]
    assert {c["backend"] for c in data["checks"]} == {"fx"}


def test_embedded_json_cannot_close_its_script_element():
    text = script_json({"test": f"t.py::test[{EVIL}]", "x": "</script><!-- &amp; \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text)["x"] == "</script><!-- &amp; \u2028"


def test_page_has_user_text_only_inside_its_data():
    page = render_html(
        [record(f"t.py::test[{EVIL}]", "untraceable", module=EVIL, source=EVIL, text=EVIL, modules=modules(EVIL))],
        "2.14.1",
    )
    assert page.count("<script") == 2  # the data and the page's own script
    assert "alert(1)" in page and EVIL not in page
    data = json.loads(re.search(r'<script type="application/json" id="fx-data">(.*?)</script>', page, re.S).group(1))
    assert data["checks"][0]["test"] == f"t.py::test[{EVIL}]" and tree_rows(data, data["checks"][0]["tree"])[1][1] == EVIL
    assert "http://" not in page and "https://" not in page  # loads nothing


# -- the step summary ------------------------------------------------------------------------


def failing(i: int, nodeid: str | None = None) -> CheckRecord:
    return CheckRecord(
        nodeid=nodeid or f"tests/test_zoo.py::test_zoo[{i}]", model="zoo.Block", status="untraceable",
        category="control-flow", location=("zoo.py", 3), source="if x.sum() > 0:", module="block", order=(i, 0),
        suggestion={"text": "@pytest.mark.traceable(leaf_modules=['Block'])", "verified": True, "options": {}},
    )  # fmt: skip


def test_step_summary_has_counts_failing_rows_with_fixes_and_the_html_report():
    text = step_summary([record(), failing(1)], html_path="out/fx-report.html", environ={
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "7"})  # fmt: skip
    assert text.startswith("### pytest-fxtrace: 2 checks: 1 passed, 1 untraceable\n")
    row = next(line for line in text.splitlines() if "test_zoo[1]" in line)
    assert row == (
        "| `tests/test_zoo.py::test_zoo[1]` | `Block.block` | untraceable (control-flow) | `zoo.py:3` "
        "| `if x.sum() > 0:` | `@pytest.mark.traceable(leaf_modules=['Block'])` |"
    )
    assert "`fx-report.html`" in text and "https://github.com/o/r/actions/runs/7" in text
    assert "t.py::test_a" not in text  # passing checks are only counted


def test_step_summary_names_the_backend_of_each_failing_row_when_several_ran():
    fx_only = step_summary([failing(1)], environ={})
    assert "backend" not in fx_only and "| `fx` |" not in fx_only  # one backend: no column
    both = [record(), failing(1), dataclasses.replace(failing(1), backend="export", category="data-dependent")]
    text = step_summary(both, environ={})
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| test |"))
    assert header == "| test | model | backend | status | location | statement | verified fix |"
    assert lines[lines.index(header) + 1] == "|---|---|---|---|---|---|---|"
    rows = [line for line in lines if line.startswith("| `tests/test_zoo.py::test_zoo[1]`")]
    assert [row.split(" | ")[2:4] for row in rows] == [
        ["`fx`", "untraceable (control-flow)"], ["`export`", "untraceable (data-dependent)"]]


def test_step_summary_keeps_user_text_in_code_spans():
    assert code(f"a|b {EVIL}") == "`a\\|b <script>alert(1)</script>`"
    assert code("x = `y`\nz") == "``x = `y` z``"
    text = step_summary([failing(1, nodeid=f"t.py::test[{EVIL}|x]")], environ={})
    row = next(line for line in text.splitlines() if "alert" in line)
    assert row.startswith("| `t.py::test[<script>alert(1)</script>\\|x]` |")
    assert re.sub(r"`[^`]*`", "", text).count("<") == 0  # nothing outside a code span is markup


def test_step_summary_is_cut_under_the_limit_and_says_how_many_rows_it_left_out():
    records = [failing(i) for i in range(200)]
    text = step_summary(records, environ={}, limit=4000)
    assert len(text.encode()) <= 4000
    shown = sum(1 for line in text.splitlines() if line.startswith("| `tests/"))
    assert 0 < shown < 200
    assert f"{200 - shown} failing checks not shown here" in text


def test_append_step_summary_leaves_room_for_what_the_file_already_holds(tmp_path):
    path = tmp_path / "summary.md"
    path.write_text("x" * (LIMIT - 3000))
    append_step_summary(path, [failing(i) for i in range(100)], environ={})
    assert path.stat().st_size < LIMIT
    assert path.read_text().startswith("x" * 100) and "failing checks not shown here" in path.read_text()


def test_a_failure_in_our_module_walk_is_an_internal_error_not_the_models(monkeypatch):
    import pytest_fxtrace.check as check

    def broken(*args, **kwargs):
        raise RuntimeError("walk failed")

    monkeypatch.setattr(check, "module_tree", broken)
    (report,) = check_model_backends(Good(), (torch.randn(2, 4),), {}, TraceOptions(), Seams(module_tree=True))
    assert report.status == "internal-error" and "walk failed" in (report.error or report.message)


def test_a_built_wheel_holds_every_module_and_the_page_s_style_and_script(tmp_path):
    """A wheel (not the editable install the suite runs on) has every subpackage and the
    page's assets: a package list or package-data pattern that misses one fails here."""
    pytest.importorskip("setuptools")
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(root)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("pytest_fxtrace-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    package = root / "pytest_fxtrace"
    wanted = {p.relative_to(root).as_posix() for p in package.rglob("*") if p.suffix in (".py", ".css", ".js")}
    assert wanted - shipped == set()
    page = package / "report" / "page"
    html_text = render_html([record()], "2.14.1")
    assert (page / "report.js").read_text() in html_text and (page / "report.css").read_text() in html_text
