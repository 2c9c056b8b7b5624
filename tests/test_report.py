"""report.py without pytest: records, the JSON document, the summary table, and
GitHub Actions workflow commands checked against the runner's own parsing rules."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import report_models
import torch
from report_models import Block, Branchy
from torch import nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.report.annotations import (
    annotation_lines,
    escape_data,
    escape_property,
    find_repo_root,
    workflow_command,
)
from pytest_fxtrace.report.document import junit_properties, report_json
from pytest_fxtrace.report.records import (
    JSON_FIELDS,
    CheckRecord,
    Unfinished,
    suggestion_json,
    write_atomic,
)
from pytest_fxtrace.report.summary import SHORT_ROWS, plain, summary_lines
from pytest_fxtrace.types import Suggestion, option_json

# -- GitHub's parser, as the Actions runner implements it ---------------------------------
# actions/runner src/Runner.Common/ActionCommand.cs, TryParseV2: the command runs from
# "::" to the next "::"; properties split on "," then on the first "="; property values
# unescape %0D %0A %3A %2C then %25, the message %0D %0A then %25.

_PROPERTY_UNESCAPES = (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%"))
_DATA_UNESCAPES = (("%0D", "\r"), ("%0A", "\n"), ("%25", "%"))


def _unescape(text: str, table: tuple[tuple[str, str], ...]) -> str:
    for escaped, token in table:
        text = text.replace(escaped, token)
    return text


def parse_workflow_command(line: str) -> tuple[str, dict[str, str], str] | None:
    line = line.lstrip()
    if not line.startswith("::"):
        return None
    end = line.find("::", 2)
    if end < 0:
        return None
    info = line[2:end]
    name, _, props_text = info.partition(" ")
    props = {}
    for prop in filter(None, props_text.strip().split(",")):
        key, sep, value = prop.partition("=")
        if sep and key and value:
            props[key] = _unescape(value, _PROPERTY_UNESCAPES)
    return name, props, _unescape(line[end + 2 :], _DATA_UNESCAPES)


AWKWARD = [
    "plain",
    "50% done",
    "%0A is not a newline",
    "%250A",
    "a:b, c::d",
    "line one\nline two\r\nline three",
    "title=with=equals",
    "trailing %",
    "ümlaut ✓",
]


@pytest.mark.parametrize("text", AWKWARD)
def test_properties_and_message_survive_githubs_parser(text):
    line = workflow_command("error", text, file=f"dir/{text}.py", line=7, title=text)
    assert "\n" not in line and "\r" not in line
    parsed = parse_workflow_command(line)
    assert parsed == ("error", {"file": f"dir/{text}.py", "line": "7", "title": text}, text)


def test_escaping_matches_the_actions_toolkit():
    assert escape_data("100%\r\nx: y, z") == "100%25%0D%0Ax: y, z"
    assert escape_property("100%\r\nx: y, z") == "100%25%0D%0Ax%3A y%2C z"
    assert (
        workflow_command("error", "50% done\nnext", file="a,b.py", line=3, title="fx: boom")
        == "::error file=a%2Cb.py,line=3,title=fx%3A boom::50%25 done%0Anext"
    )


def test_workflow_command_leaves_out_missing_properties():
    assert workflow_command("error", "no place", file=None, line=None, title="t") == "::error title=t::no place"
    assert workflow_command("warning", "bare") == "::warning::bare"


# -- records ------------------------------------------------------------------------------


def branch_line() -> int:
    lines = Path(report_models.__file__).read_text().splitlines()
    return next(i for i, src in enumerate(lines, 1) if src.strip().endswith("# BRANCH"))


def record(nodeid="tests/test_m.py::test_x", status="passed", order=(0, 0), **fields) -> CheckRecord:
    return CheckRecord(nodeid=nodeid, model="pkg.models.Net", status=status, order=order, **fields)


def test_record_of_an_untraceable_model_points_at_the_line_relative_to_rootdir():
    report = check_traceable(Branchy(), (torch.randn(2, 4),))
    here = Path(__file__)
    rec = CheckRecord.from_report(
        report, "tests/test_report.py::t", rootdir=here.parent.parent, test_file=here, test_line=3
    )
    assert rec.status == "untraceable"
    assert rec.category == "control-flow"
    assert rec.location == ("tests/report_models.py", branch_line())
    assert Path(rec.file).samefile(report_models.__file__)
    assert rec.module == "block" and rec.module_type == "Block"
    assert rec.model == "report_models.Branchy"
    assert rec.text.startswith("Branchy.block (Block) is not traceable")
    assert rec.to_json()["location"] == {"path": "tests/report_models.py", "line": branch_line()}
    assert rec.to_json()["nodes"] is None


def test_record_json_has_exactly_the_products_fields():
    report = check_traceable(nn.Linear(4, 2), (torch.randn(3, 4),))
    rec = CheckRecord.from_report(report, "t.py::test_lin", rootdir=os.getcwd())
    data = rec.to_json()
    assert tuple(data) == JSON_FIELDS
    assert data["status"] == "passed" and data["location"] is None and data["module"] == ""
    assert data["model"] == "torch.nn.modules.linear.Linear"
    assert data["nodes"] == 5 and data["coverage"] == 1.0  # x, weight, bias, linear, output
    assert data["suggestion"] is None
    assert isinstance(data["trace_seconds"], float) and data["trace_seconds"] >= 0
    json.dumps(data)  # plain JSON


def test_record_survives_the_trip_through_workeroutput():
    rec = record(
        status="untraceable",
        category="control-flow",
        location=("models/block.py", 42),
        module="layer1.0",
        module_type="BasicBlock",
        suggestion={"text": "make it a leaf", "verified": True, "options": {"leaf_modules": ["BasicBlock"]}},
        file="/repo/models/block.py",
        test_file="/repo/tests/test_m.py",
        test_line=10,
        order=(3, 1),
    )
    wire = rec.to_wire()
    assert json.loads(json.dumps(wire)) == wire  # nothing execnet could not send
    assert CheckRecord.from_wire(json.loads(json.dumps(wire))) == rec


def test_suggestion_options_are_written_as_marker_options_in_json_form():
    def helper(x):
        return x

    suggestion = Suggestion(
        text="keep Block whole",
        verified=True,
        options={
            "leaf_modules": (Block, "backbone.body"),
            "autowrap_functions": [helper],
            "concrete_args": {"flag": True, "k": 3},
            "autowrap_modules": (os,),
        },
    )
    assert suggestion_json(suggestion) == {
        "text": "keep Block whole",
        "verified": True,
        "options": {
            "leaf_modules": ["Block", "backbone.body"],
            "autowrap_functions": [f"{__name__}:{helper.__qualname__}"],
            "concrete_args": {"flag": True, "k": 3},
            "autowrap_modules": ["os"],
        },
    }
    assert suggestion_json(None) is None
    assert option_json({"tracer": torch.fx.Tracer}) == {"tracer": "torch.fx._symbolic_trace:Tracer"}


# -- the JSON document ----------------------------------------------------------------------


def test_report_lists_records_in_collection_order_whoever_ran_them():
    late = record("t.py::test_b", order=(1, 0))
    first = record("t.py::test_a", order=(0, 0))
    second_model = record("t.py::test_a", status="mismatch", order=(0, 1))
    document = report_json([late, second_model, first], "2.14.1")
    assert document["version"] == 1 and document["torch"] == "2.14.1"
    assert [(r["nodeid"], r["status"]) for r in document["results"]] == [
        ("t.py::test_a", "passed"),
        ("t.py::test_a", "mismatch"),
        ("t.py::test_b", "passed"),
    ]
    assert "unfinished" not in document


def test_report_gives_the_durations_of_the_checked_tests_only():
    records = [record("t.py::test_b", order=(1, 0)), record("t.py::test_a"), record("t.py::test_a", order=(0, 1))]
    durations = {"t.py::test_a": 1.5, "t.py::test_b": 0.25, "t.py::test_plain": 3.0}
    document = report_json(records, "2.14.1", durations=durations)
    assert document["durations"] == {"t.py::test_a": 1.5, "t.py::test_b": 0.25}
    assert list(document["durations"]) == ["t.py::test_a", "t.py::test_b"]  # collection order, once each
    assert "durations" not in report_json(records, "2.14.1")


def test_report_names_tests_whose_results_were_lost():
    document = report_json([], "2.14.1", [Unfinished("t.py::test_c", "worker gw0 crashed while running it")])
    assert document["unfinished"] == [{"nodeid": "t.py::test_c", "reason": "worker gw0 crashed while running it"}]


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out" / "fx.json"
    write_atomic(target, "old")
    write_atomic(target, '{"new": true}\n')
    assert target.read_text() == '{"new": true}\n'
    assert [p.name for p in target.parent.iterdir()] == ["fx.json"]


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "fx.json"
    target.write_text("old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["fx.json"]


@pytest.fixture
def umask():
    """Sets the process's umask for the test, and restores it."""
    before = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(before)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_write_atomic_gives_the_permissions_the_umask_leaves_not_0600(tmp_path, umask):
    target = tmp_path / "fx.json"
    write_atomic(target, "{}")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # umask 022: a CI step of another user reads it
    umask(0o027)
    write_atomic(target, "{}\n")  # replacing a file gets them too
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["fx.json"]


def test_junit_properties_for_one_model():
    rec = record(status="untraceable", category="control-flow", location=("m.py", 4), module="block")
    assert junit_properties(rec) == [
        ("fx_model", "pkg.models.Net"),
        ("fx_backend", "fx"),
        ("fx_status", "untraceable"),
        ("fx_category", "control-flow"),
        ("fx_location", "m.py:4"),
        ("fx_module", "block"),
    ]
    assert junit_properties(record())[3:5] == [("fx_category", ""), ("fx_location", "")]


# -- the terminal summary ---------------------------------------------------------------------


def failing(i: int, **fields) -> CheckRecord:
    defaults = dict(
        status="untraceable",
        category="control-flow",
        location=(f"src/very/long/package/path/models/block_{i}.py", 100 + i),
        module=f"backbone.body.layer{i}.0",
        module_type="BasicBlock",
        order=(i, 0),
    )
    defaults.update(fields)
    return record(f"tests/models/test_a_rather_long_module_name.py::test_model[variant-{i}]", **defaults)


def lines_text(lines) -> list[str]:
    return [plain(line) for line in lines]


def test_summary_counts_statuses_in_product_order():
    records = [record(), failing(1), failing(2, status="mismatch", category="numeric"), record(status="xfailed")]
    text = lines_text(summary_lines(records))
    assert text[0] == "4 checks: 1 passed, 1 untraceable, 1 mismatch, 1 xfailed"


def test_summary_table_shows_what_a_reviewer_needs_per_failing_check():
    rec = failing(1, suggestion={"text": "leaf", "verified": True, "options": {}})
    header, row = lines_text(summary_lines([record(), rec], width=400))[1:3]
    assert header.split() == ["test", "model", "status", "category", "location", "submodule", "fix"]
    assert row.split() == [
        rec.nodeid,
        "Net",
        "untraceable",
        "control-flow",
        "src/very/long/package/path/models/block_1.py:101",
        "backbone.body.layer1.0",
        "(BasicBlock)",
        "yes",
    ]
    unverified = failing(1, suggestion={"text": "leaf", "verified": False, "options": {}})
    assert lines_text(summary_lines([unverified], width=400))[2].split()[-1] == "no"
    assert lines_text(summary_lines([failing(1)], width=400))[2].split()[-1] == "no"


def test_summary_lists_passing_checks_only_in_the_counts():
    text = lines_text(summary_lines([record(), record("t.py::test_b")]))
    assert text == ["2 checks: 2 passed"]


def test_summary_is_short_and_fits_the_terminal_by_default():
    records = [failing(i) for i in range(SHORT_ROWS + 3)]
    natural = max(len(line) for line in lines_text(summary_lines(records, verbosity=1)))
    assert natural > 150
    text = lines_text(summary_lines(records, width=120))
    assert all(len(line) <= 120 for line in text), "\n".join(text)
    assert len(text) == 1 + 1 + SHORT_ROWS + 1
    assert text[-1] == "... and 3 more (-v shows every check)"
    assert "test_model[variant-0]" in text[2]  # the test's own name survives shortening
    assert text[2].startswith("...")
    assert "block_0.py:100" in text[2]


def test_summary_on_a_very_narrow_terminal_keeps_cells_legible():
    text = lines_text(summary_lines([failing(1)], width=40))
    test, model, status, category, location = text[2].split()[:5]
    assert (model, status, category) == ("Net", "untraceable", "control-flow")
    assert test.startswith("...") and test.endswith("[variant-1]")
    assert location.startswith("...") and location.endswith("_1.py:101")


def test_summary_is_complete_with_verbose():
    records = [failing(i) for i in range(SHORT_ROWS + 3)]
    text = lines_text(summary_lines(records, verbosity=1, width=80))
    assert len(text) == 1 + 1 + SHORT_ROWS + 3
    for rec, line in zip(records, text[2:], strict=True):
        assert line.startswith(rec.nodeid + " ")
        assert f"{rec.location[0]}:{rec.location[1]}" in line


def test_summary_lists_failures_before_expected_failures():
    records = [record("t.py::test_x", status="xfailed", order=(0, 0)), failing(5)]
    text = lines_text(summary_lines(records, width=300))
    assert "untraceable" in text[2] and "xfailed" in text[3]


def test_quiet_summary_is_counts_and_failing_rows_and_very_quiet_is_one_line():
    records = [record(), failing(1), record("t.py::test_x", status="xfailed")]
    quiet = lines_text(summary_lines(records, verbosity=-1, width=300))
    assert quiet[0] == "fxtrace: 3 checks: 1 passed, 1 untraceable, 1 xfailed"
    assert len(quiet) == 3 and "xfailed" not in quiet[2]
    assert lines_text(summary_lines(records, verbosity=-2)) == [quiet[0]]


def test_summary_colours_statuses():
    lines = summary_lines([record(), failing(1), record("t.py::x", status="xfailed")], width=300)
    styles = {span.text: span.style for span in lines[0]}
    assert styles["1 passed"] == "green"
    assert styles["1 untraceable"] == "red"
    assert styles["1 xfailed"] == "yellow"
    row = lines[2]
    assert [span.style for span in row if span.text.strip() == "untraceable"] == ["red"]


def test_summary_is_empty_when_nothing_was_checked():
    assert summary_lines([]) == []


def test_summary_says_which_tests_have_no_result():
    text = lines_text(summary_lines([], unfinished=[Unfinished("t.py::test_c", "worker gw0 crashed while running it")]))
    assert text == [
        "0 checks: ",
        "1 test(s) with no recorded result:",
        "  t.py::test_c: worker gw0 crashed while running it",
    ]


# -- annotations -----------------------------------------------------------------------------


def test_annotations_point_at_the_failing_line_relative_to_the_repository(tmp_path):
    (tmp_path / ".git").mkdir()
    project = tmp_path / "sub"
    rec = failing(
        1,
        location=("models/block.py", 42),
        file=str(project / "models" / "block.py"),
        test_file=str(project / "tests" / "test_m.py"),
        test_line=7,
        text="Net.block (Block) is not traceable: `if x:` at models/block.py:42\n  fix: use torch.where",
    )
    [line] = annotation_lines([rec, record()], find_repo_root(project))
    name, props, message = parse_workflow_command(line)
    assert name == "error"
    assert props == {
        "file": "sub/models/block.py",
        "line": "42",
        "title": "pytest-fxtrace: Net.backbone.body.layer1.0 (BasicBlock) untraceable (control-flow)",
    }
    assert message.splitlines() == [rec.nodeid, *rec.text.splitlines()]


def test_annotation_outside_the_repository_falls_back_to_the_test(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    rec = failing(
        2,
        status="mismatch",
        location=("/site-packages/torchvision/models/x.py", 5),
        file="/site-packages/torchvision/models/x.py",
        test_file=str(repo / "tests" / "test_m.py"),
        test_line=12,
        text="Net traced, but differs at /site-packages/torchvision/models/x.py:5",
    )
    [line] = annotation_lines([rec], repo)
    _, props, message = parse_workflow_command(line)
    assert (props["file"], props["line"]) == ("tests/test_m.py", "12")
    assert "/site-packages/torchvision/models/x.py:5" in message


def test_no_annotations_for_passing_or_expected_failures(tmp_path):
    assert annotation_lines([record(), record(status="xfailed")], tmp_path) == []
    assert len(annotation_lines([record(status="xpassed"), record(status="model-error")], tmp_path)) == 2


def test_repository_root_is_the_git_checkout_else_the_workspace(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "b").mkdir(parents=True)
    assert find_repo_root(tmp_path / "repo" / "a" / "b") == (tmp_path / "repo").resolve()
    lone = tmp_path / "lone" / "proj"
    lone.mkdir(parents=True)
    env = {"GITHUB_WORKSPACE": str(tmp_path / "lone")}
    assert find_repo_root(lone, env) == (tmp_path / "lone").resolve()
    assert find_repo_root(lone, {}) == lone.resolve()


def test_shown_path_is_rootdir_relative_then_import_path_then_absolute(tmp_path, monkeypatch):
    from pytest_fxtrace.paths import shown_path

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    nested = site / "timm" / "models"
    nested.mkdir(parents=True)
    repo = tmp_path / "repo"
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(site), ""])
    monkeypatch.chdir(tmp_path)
    assert shown_path(repo / "models" / "block.py", repo) == "models/block.py"
    assert shown_path(nested / "nest.py", repo) == "timm/models/nest.py"
    assert shown_path("/opt/other/x.py", repo) == "/opt/other/x.py"
    assert shown_path(tmp_path / "y.py", repo) == "y.py"  # under "" (the working directory) on sys.path
    monkeypatch.setattr(sys, "path", [str(site), str(nested.parent)])  # the deepest entry wins
    assert shown_path(nested / "nest.py", repo) == "models/nest.py"


def test_the_one_path_function_also_gives_the_form_that_finds_the_file_again(tmp_path, monkeypatch):
    """The JSON report's location and a Location's path: rootdir- (or working-directory-)
    relative, else absolute, never by import path (what every Location holds)."""
    from pytest_fxtrace.paths import shown_path

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    repo = tmp_path / "repo"
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.chdir(repo.parent)
    library = site / "timm" / "models" / "nest.py"
    assert shown_path(repo / "models" / "block.py", repo, imports=False) == "models/block.py"
    assert shown_path(library, repo, imports=False) == library.as_posix()
    assert shown_path(library, repo) == "timm/models/nest.py"
    assert shown_path(tmp_path.parent / "elsewhere.py", repo, imports=False) == (tmp_path.parent / "elsewhere.py").as_posix()
    assert shown_path(str(repo / "models" / "block.py"), imports=False) == "repo/models/block.py"  # the working directory's
    assert shown_path(str(library), imports=False) == "venv/lib/python3.11/site-packages/timm/models/nest.py"


@pytest.mark.parametrize("found", [True, False])
def test_a_fix_the_search_did_not_find_leaves_the_category_s_code_fix_in_the_message(found: bool):
    from pytest_fxtrace.tracereport import TraceReport
    from pytest_fxtrace.types import Category, Status

    # the search's result is read from its typed field, not from the words of its text
    suggestion = Suggestion("tried leaf_modules=['Gate'] (the same failure)", False, found=found)
    report = TraceReport(
        ok=False, status=Status.UNTRACEABLE, model="m.Net", category=Category.CONTROL_FLOW,
        message="Net is not traceable", suggestion=suggestion, code_fix="torch.where(cond, a, b)",
    )  # fmt: skip
    shown = report.describe()
    assert ("fix in code: torch.where(cond, a, b)" in shown) is not found, shown
