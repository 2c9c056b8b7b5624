"""The session's outputs as a user and their CI meet them: the terminal summary,
``--fx-report``, junit-xml properties and GitHub Actions annotations.

The user's project lives in ``repo/proj`` (``repo`` being a git checkout), so
annotation paths must come out relative to ``repo``, while report paths and node ids
are relative to pytest's rootdir ``repo/proj``. Each run happens once per module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from forked_pytest import pytest_process, user_env
from test_report import parse_workflow_command

from pytest_fxtrace.options import CATEGORIES
from pytest_fxtrace.report.records import CheckRecord

pytestmark = pytest.mark.xdist_group(__name__)  # its module-scoped sessions run once, in one worker

MODELS = (Path(__file__).parent / "report_models.py").read_text() + '''

class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


class Broken(nn.Module):
    def forward(self, x):
        raise ValueError("weights were never loaded")  # BROKEN
'''

TESTS = '''
import pytest
import torch
from models import Branchy, Broken, Counting, Good


@pytest.mark.traceable
def test_good():
    Good()(torch.randn(2, 4))


@pytest.mark.traceable
def test_branchy():
    Branchy()(torch.randn(2, 4))


@pytest.mark.traceable
def test_counting():
    model = Counting()
    model(torch.randn(2, 4))
    model(torch.randn(2, 4))


def test_broken(fxtrace):
    fxtrace(Broken(), torch.randn(2, 4))


@pytest.mark.traceable(xfail="control-flow")
def test_branchy_expected():
    Branchy()(torch.randn(2, 4))


@pytest.mark.traceable(xfail="control-flow")  # XPASS
def test_good_unexpectedly():
    Good()(torch.randn(2, 4))


@pytest.mark.traceable
def test_two_models():
    Good()(torch.randn(2, 4))
    Branchy()(torch.randn(2, 4))


def test_unmarked():
    Good()(torch.randn(2, 4))
'''

MANY = '''
import pytest
import torch
from models import Branchy


@pytest.mark.traceable
@pytest.mark.parametrize("variant", range(12))
def test_zoo(variant):
    Branchy()(torch.randn(2, 4))
'''


def line_of(source: str, tag: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith(f"# {tag}"))


BRANCH = line_of(MODELS, "BRANCH")
BROKEN = line_of(MODELS, "BROKEN")
XPASS = line_of(TESTS, "XPASS")


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, project: Path) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.output = proc.stdout + proc.stderr
        self.project = project

    def summary(self) -> list[str]:
        """The lines of the fxtrace summary section."""
        match = re.search(r"^=+ fxtrace summary =+\n(.*?)(?=^=+ )", self.stdout, re.M | re.S)
        assert match, f"no fxtrace summary in:\n{self.output}"
        return [line for line in match.group(1).splitlines() if not line.startswith("::")]

    def annotations(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("::")]


def make_project(root: Path) -> Path:
    repo = root / "repo"
    (repo / ".git").mkdir(parents=True)
    project = repo / "proj"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "models.py").write_text(MODELS)
    (project / "test_models.py").write_text(TESTS)
    (project / "test_zoo.py").write_text(MANY)
    return project


def run_pytest(project: Path, *args: str, **env: str) -> Run:
    proc = pytest_process(
        ["-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=project, timeout=600, env=user_env(**env),
    )
    return Run(proc, project)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("report_project"))


@pytest.fixture(scope="module")
def ci_run(project) -> Run:
    """What CI runs: report, junit-xml, on GitHub Actions, output to a log (no terminal)."""
    return run_pytest(
        project, "--fx-report=out/fx.json", "--junitxml=junit.xml", GITHUB_ACTIONS="true"
    )


APPLY = """
import pytest
import torch
from models import Branchy


@pytest.mark.traceable(**{options!r})
def test_apply_suggested_fix():
    Branchy()(torch.randn(2, 4))
"""


@pytest.fixture(scope="module")
def verbose_run(project, ci_run) -> Run:
    """Also applies the fix the CI run's report suggested for test_branchy, as a user would."""
    [branchy] = [r for r in records(ci_run) if r["nodeid"] == "test_models.py::test_branchy"]
    (project / "test_apply.py").write_text(APPLY.format(options=branchy["suggestion"]["options"]))
    return run_pytest(project, "-v", COLUMNS="80")


@pytest.fixture(scope="module")
def quiet_run(project) -> Run:
    return run_pytest(project, "-q", "--color=yes", "test_models.py", COLUMNS="100")


def records(run: Run) -> list[dict]:
    return json.loads((run.project / "out" / "fx.json").read_text())["results"]


# -- --fx-report ------------------------------------------------------------------------


def test_report_has_one_record_per_checked_model_in_collection_order(ci_run):
    assert ci_run.returncode == 1
    summary = [
        (r["nodeid"], r["model"], r["status"], r["category"], r["location"], r["module"])
        for r in records(ci_run)
        if not r["nodeid"].startswith("test_zoo.py")
    ]
    branch = {"path": "models.py", "line": BRANCH}
    mismatch = summary[2]
    assert summary == [
        ("test_models.py::test_good", "models.Good", "passed", None, None, ""),
        ("test_models.py::test_branchy", "models.Branchy", "untraceable", "control-flow", branch, "block"),
        ("test_models.py::test_counting", "models.Counting", "mismatch", mismatch[3], mismatch[4], ""),
        ("test_models.py::test_broken", "models.Broken", "model-error", None,
         {"path": "models.py", "line": BROKEN}, ""),
        ("test_models.py::test_branchy_expected", "models.Branchy", "xfailed", "control-flow", branch, "block"),
        ("test_models.py::test_good_unexpectedly", "models.Good", "xpassed", None, None, ""),
        ("test_models.py::test_two_models", "models.Good", "passed", None, None, ""),
        ("test_models.py::test_two_models", "models.Branchy", "untraceable", "control-flow", branch, "block"),
    ]  # fmt: skip
    assert mismatch[3] in CATEGORIES
    assert [r["nodeid"] for r in records(ci_run)][8:] == [f"test_zoo.py::test_zoo[{i}]" for i in range(12)]


def test_report_document_and_field_types(ci_run):
    document = json.loads((ci_run.project / "out" / "fx.json").read_text())
    assert document["version"] == 1
    assert document["torch"] == str(torch.__version__)
    assert set(document) == {"version", "torch", "results", "durations"}
    # each checked test's seconds (setup, call and teardown), once per test, for pytest-split
    assert list(document["durations"]) == list(dict.fromkeys(r["nodeid"] for r in document["results"]))
    assert all(isinstance(seconds, float) and seconds > 0 for seconds in document["durations"].values())
    for record in document["results"]:
        assert list(record) == [
            "nodeid", "model", "backend", "status", "category", "location", "module",
            "nodes", "coverage", "suggestion", "trace_seconds", "modules",
            "grad_mode", "module_type", "statement", "message",
        ]  # fmt: skip
        assert record["status"] == "passed" or record["message"]  # what the failure said
        modules = CheckRecord.from_json(record).modules
        assert modules is None or modules[0].path == ""  # the root first
        assert isinstance(record["trace_seconds"], float) and record["trace_seconds"] >= 0
        assert record["grad_mode"] in (None, "grad", "no_grad", "inference_mode")
        assert record["coverage"] is None or 0.0 <= record["coverage"] <= 1.0
        suggestion = record["suggestion"]
        assert suggestion is None or (set(suggestion) == {"text", "verified", "options"})
        if record["status"] == "passed":
            assert record["nodes"] == 4 and record["coverage"] == 1.0  # x, lin, relu, output


def test_report_suggestion_is_marker_options_that_fix_the_model(ci_run, verbose_run):
    [branchy] = [r for r in records(ci_run) if r["nodeid"] == "test_models.py::test_branchy"]
    assert branchy["suggestion"]["verified"] is True
    assert branchy["suggestion"]["options"] == {"leaf_modules": ["Block"]}
    assert "test_apply.py::test_apply_suggested_fix PASSED" in verbose_run.output


def test_report_is_written_once_atomically(ci_run):
    assert [p.name for p in (ci_run.project / "out").iterdir()] == ["fx.json"]
    assert f"JSON report: {ci_run.project / 'out' / 'fx.json'}" in ci_run.summary()


def test_report_of_a_run_that_checked_nothing_is_empty_and_no_summary_is_printed(project):
    run = run_pytest(project, "-k", "unmarked", "--fx-report=out/empty.json")
    assert run.returncode == 0, run.output
    assert "fxtrace summary" not in run.output
    document = json.loads((project / "out" / "empty.json").read_text())
    assert document["results"] == []


def test_report_path_that_is_a_directory_is_a_usage_error(project):
    (project / "reports").mkdir(exist_ok=True)
    run = run_pytest(project, "--fx-report=reports")
    assert run.returncode == 4
    assert "--fx-report=reports:" in run.output and "is a directory" in run.output
    assert f"--fx-report={os.path.join('reports', 'fx-report.json')}" in run.output


# -- terminal summary --------------------------------------------------------------------


def test_summary_counts_then_tables_non_passing_checks(ci_run):
    lines = ci_run.summary()
    assert lines[0] == "20 checks: 2 passed, 14 untraceable, 1 mismatch, 1 model-error, 1 xfailed, 1 xpassed"
    assert lines[1].split() == ["test", "model", "status", "category", "location", "submodule", "fix"]
    branchy = next(line for line in lines if line.startswith("test_models.py::test_branchy "))
    assert branchy.split() == [
        "test_models.py::test_branchy", "Branchy", "untraceable", "control-flow",
        f"models.py:{BRANCH}", "block", "(Block)", "yes",  # leaf_modules=["Block"] verified
    ]  # fmt: skip
    broken = next(line for line in lines if line.startswith("test_models.py::test_broken "))
    assert broken.split()[1:5] == ["Broken", "model-error", "-", f"models.py:{BROKEN}"]
    assert "test_models.py::test_good " not in "\n".join(lines)  # passing checks are only counted


def test_summary_is_short_by_default(ci_run):
    lines = ci_run.summary()
    rows = [line for line in lines if line.startswith("test_")]
    # failures first, in collection order: the five of test_models.py, then test_zoo.py's
    assert [row.split()[0] for row in rows] == [
        "test_models.py::test_branchy",
        "test_models.py::test_counting",
        "test_models.py::test_broken",
        "test_models.py::test_good_unexpectedly",
        "test_models.py::test_two_models",
        *(f"test_zoo.py::test_zoo[{i}]" for i in range(5)),
    ]
    assert "... and 8 more (-v shows every check)" in lines


def test_summary_in_a_ci_log_keeps_rows_whole(ci_run):
    # no terminal and no COLUMNS: nothing to fit, so nothing is shortened
    lines = ci_run.summary()
    assert "..." not in "\n".join(line for line in lines if line.startswith("test_"))
    assert max(len(line) for line in lines) > 80


def test_summary_fits_the_terminal_width(quiet_run):
    rows = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in quiet_run.stdout.splitlines()]
    table = [row for row in rows if " untraceable " in row or " model-error " in row]
    assert table and all(len(row) <= 100 for row in table)
    assert any(row.startswith("...") for row in table)  # long test ids give way first


def test_summary_is_complete_with_verbose(verbose_run):
    lines = verbose_run.summary()
    rows = [line for line in lines if line.startswith("test_")]
    assert len(rows) == 18
    assert "more (-v shows every check)" not in "\n".join(lines)
    assert any(line.startswith("test_zoo.py::test_zoo[11] ") for line in rows)


def test_quiet_summary_is_one_counts_line_and_the_failures_in_colour(quiet_run):
    out = quiet_run.stdout
    assert "fxtrace summary" not in out
    counts = next(line for line in out.splitlines() if "fxtrace: " in line)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", counts)
    assert plain == "fxtrace: 8 checks: 2 passed, 2 untraceable, 1 mismatch, 1 model-error, 1 xfailed, 1 xpassed"
    assert "\x1b[32m2 passed" in counts and "\x1b[31m2 untraceable" in counts
    rows = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    statuses = (" untraceable ", " mismatch ", " model-error ", " xpassed ", " xfailed ")
    tabled = [
        row.split()[0].rpartition("::")[2]
        for row in rows
        if any(s in row for s in statuses) and ("::" in row.split()[0] or row.startswith("..."))
    ]
    # -q: the failing checks only, not the expected failure
    assert tabled == ["test_branchy", "test_counting", "test_broken", "test_good_unexpectedly", "test_two_models"]


def test_no_colour_without_a_terminal(ci_run):
    assert "\x1b[" not in "\n".join(ci_run.summary())


# -- junit-xml ---------------------------------------------------------------------------


def junit_properties(run: Run) -> dict[str, list[tuple[str, str]]]:
    tree = ET.parse(run.project / "junit.xml")
    return {
        case.get("name"): [(p.get("name"), p.get("value")) for p in case.iter("property")]
        for case in tree.iter("testcase")
    }


def test_junit_has_fx_properties_per_checked_model(ci_run):
    props = junit_properties(ci_run)
    assert props["test_branchy"] == [
        ("fx_model", "models.Branchy"),
        ("fx_backend", "fx"),
        ("fx_status", "untraceable"),
        ("fx_category", "control-flow"),
        ("fx_location", f"models.py:{BRANCH}"),
        ("fx_module", "block"),
    ]
    assert props["test_good"] == [
        ("fx_model", "models.Good"),
        ("fx_backend", "fx"),
        ("fx_status", "passed"),
        ("fx_category", ""),
        ("fx_location", ""),
        ("fx_module", ""),
    ]
    assert [v for k, v in props["test_two_models"] if k == "fx_status"] == ["passed", "untraceable"]
    assert dict(props["test_branchy_expected"])["fx_status"] == "xfailed"
    assert props["test_unmarked"] == []


# -- GitHub Actions annotations ----------------------------------------------------------


def test_annotations_are_emitted_at_the_users_lines_relative_to_the_repository(ci_run):
    annotations = [parse_workflow_command(line) for line in ci_run.annotations()]
    assert len(annotations) == 17  # every failing check; none for passed and xfailed
    command, props, message = annotations[0]
    assert command == "error"
    assert props == {
        "file": "proj/models.py",
        "line": str(BRANCH),
        "title": "pytest-fxtrace: Branchy.block (Block) untraceable (control-flow)",
    }
    first, second, *rest = message.splitlines()
    assert first == "test_models.py::test_branchy"
    assert second.startswith("Branchy.block (Block) is not traceable: `if x.sum() > 0:")
    assert f"at models.py:{BRANCH}" in second
    assert any(line.startswith("  fix") for line in rest)
    by_test = {message.splitlines()[0]: props for _, props, message in annotations}
    assert (by_test["test_models.py::test_broken"]["file"], by_test["test_models.py::test_broken"]["line"]) == (
        "proj/models.py",
        str(BROKEN),
    )
    # no failing line to point at: the annotation sits on the test itself
    xpass = by_test["test_models.py::test_good_unexpectedly"]
    assert (xpass["file"], xpass["line"]) == ("proj/test_models.py", str(XPASS))
    assert xpass["title"] == "pytest-fxtrace: Good xpassed"
    [xpass_message] = [m for _, _, m in annotations if m.startswith("test_models.py::test_good_unexpectedly")]
    assert xpass_message.splitlines()[1].startswith("expected a traceability failure (control-flow), but Good traced")


def test_no_annotations_outside_github_actions(verbose_run):
    assert verbose_run.annotations() == []


# -- a marked test that called no module (issue 16, item 14) -------------------------------------

NOTHING = '''
import pytest
import torch
from models import Good


@pytest.mark.traceable
def test_nothing_called():
    assert torch.ones(2).sum() == 2


@pytest.mark.traceable
def test_good():
    Good()(torch.randn(2, 4))
'''


def test_a_marked_test_that_called_no_module_is_a_nothing_checked_record(tmp_path: Path):
    project = make_project(tmp_path)
    (project / "test_models.py").write_text(NOTHING)
    run = run_pytest(
        project, "test_models.py", "--fx-report=out/fx.json", "--junitxml=junit.xml", GITHUB_ACTIONS="true"
    )
    assert run.returncode == 1, run.output
    assert "nothing to check: this @pytest.mark.traceable test called no nn.Module" in run.stdout
    [nothing, good] = records(run)
    assert nothing == {
        "nodeid": "test_models.py::test_nothing_called",
        "model": None,
        "backend": "fx",
        "status": "nothing-checked",
        "category": None,
        "location": None,
        "module": "",
        "nodes": None,
        "coverage": None,
        "suggestion": None,
        "trace_seconds": 0.0,
        "modules": None,
        "grad_mode": None,
        "module_type": None,
        "statement": None,
        "message": "nothing to check: this @pytest.mark.traceable test called no nn.Module; "
        "call the model in the test, or use the fxtrace fixture",
    }
    assert good["status"] == "passed"
    assert junit_properties(run)["test_nothing_called"] == [
        ("fx_model", ""),
        ("fx_backend", "fx"),
        ("fx_status", "nothing-checked"),
        ("fx_category", ""),
        ("fx_location", ""),
        ("fx_module", ""),
    ]
    summary = run.summary()
    assert summary[0] == "2 checks: 1 passed, 1 nothing-checked"
    assert summary[2].split() == ["test_models.py::test_nothing_called", "-", "nothing-checked", "-", "-", "-", "no"]
    [(command, props, message)] = [parse_workflow_command(line) for line in run.annotations()]
    assert props["title"] == "pytest-fxtrace: nothing-checked"
    assert props["file"] == "proj/test_models.py"


# -- an installed library's file is shown by its import path (issue 16, item 15) ---------------

LIBRARY = '''
import torch.nn as nn


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LIBRARY
            return x
        return -x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return self.gate(x) * 2
'''

USES_LIBRARY = '''
import pytest
import torch
from acme_lib.blocks import Net


@pytest.mark.traceable
def test_library_model():
    Net()(torch.randn(2, 4))
'''


def test_a_library_line_is_shown_by_its_import_path_and_the_json_keeps_the_full_path(tmp_path: Path):
    project = make_project(tmp_path)
    (project / "test_models.py").write_text(USES_LIBRARY)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "acme_lib").mkdir(parents=True)
    (site / "acme_lib" / "__init__.py").write_text("")
    (site / "acme_lib" / "blocks.py").write_text(LIBRARY)
    line = line_of(LIBRARY, "LIBRARY")
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    run = run_pytest(project, "test_models.py", "--fx-report=out/fx.json", PYTHONPATH=pythonpath)
    assert run.returncode == 1, run.output
    shown = f"acme_lib/blocks.py:{line}"
    # the failure message and the summary table
    assert f"Net.gate (Gate) is not traceable: `if x.sum() > 0:` at {shown}" in run.stdout, run.stdout
    [row] = [r for r in run.summary() if r.startswith("test_models.py::")]
    assert row.split()[4] == shown
    assert str(site) not in run.stdout
    # the JSON keeps the full path
    [record] = records(run)
    assert record["location"] == {"path": (site / "acme_lib" / "blocks.py").as_posix(), "line": line}
