"""The torch.export backends end to end, through pytest subprocesses: the option on
the marker, the fixture, the ini file and the command line; one record per model per
backend (JSON, junit, the summary's backend column); xfail= by category; golden files
beside FX's; the baseline per backend; the hooks; torch's own output kept out.

One project holds every case; its sessions run once for the module (a serial run of
everything, the same under -n 2, then the runs that change an option, the snapshots or
the baseline), and each test reads the behaviour it names from them.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from shared_project import SharedProject, outcomes

from pytest_fxtrace import _compat

EXPORT_PROBLEM = _compat.export_problem()
needs_export = pytest.mark.skipif(EXPORT_PROBLEM is not None, reason=str(EXPORT_PROBLEM))
MODELS = Path(__file__).parent / "export_models.py"
pytestmark = pytest.mark.xdist_group(__name__)

TESTS = """
import pytest, torch
import export_models as m

@pytest.mark.traceable(backend="export")
def test_len_model():
    m.UsesLen()(torch.randn(2, 3))

@pytest.mark.traceable(backend="export-strict")
def test_branch():
    m.Branch()(torch.randn(4, 4))

@pytest.mark.traceable(backend=("fx", "export"))
def test_len_both():
    m.UsesLen()(torch.randn(2, 3))

@pytest.mark.traceable
def test_len_default():
    m.UsesLen()(torch.randn(2, 3))

@pytest.mark.traceable(backend="export")
def test_two_batch_sizes():
    model = m.BatchOfFour()
    model(torch.randn(4, 2))
    model(torch.randn(6, 2))

@pytest.mark.traceable(backend="export", xfail="data-dependent")
def test_counted():
    m.CountedView()(torch.ones(4, 4))

@pytest.mark.traceable(backend="export", xfail="unsupported")
def test_wrong_reason():
    m.Branch()(torch.randn(4, 4))

def test_fixture_both(fxtrace):
    fx, export = fxtrace.check(m.Block(), (torch.randn(2, 4),), backend=("fx", "export"))
    assert (fx.backend, export.backend) == ("fx", "export")
    assert fx.ok and export.ok and "aten.linear" in export.code

def test_fixture_one(fxtrace):
    report = fxtrace.check(m.Block(), (torch.randn(2, 4),), backend="export")
    assert report.backend == "export" and report.ok

@pytest.mark.traceable(backend=("fx", "export"), snapshot=True)
def test_block_snapshot():
    model = m.Block()
    model(torch.randn(2, 4))
    model(torch.randn(3, 4))

@pytest.mark.traceable(backend=("fx", "export"))
def test_branch_baseline():
    m.Branch()(torch.randn(4, 4))

@pytest.mark.traceable(backend=("export", "export-strict"))
def test_branch_both_modes():
    m.Branch()(torch.randn(4, 4))

@pytest.mark.traceable(backend="export")
def test_block_two_sizes():
    block = m.Block()
    block(torch.randn(2, 4))
    block(torch.randn(5, 4))
"""

# the hooks apply to the tests of their folder only
HOOKS_CONFTEST = """
import pathlib

def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
    return False

def pytest_fxtrace_check_finished(item, report):
    with pathlib.Path(__file__).with_name("finished.txt").open("a") as out:
        out.write(f"{report.backend} {report.status} {report.category}\\n")
"""

HOOKS_TEST = """
import pytest, torch
import export_models as m

@pytest.mark.traceable(backend="export")
def test_block():
    m.Block()(torch.randn(2, 4))
"""


def run(project: SharedProject, *args: str, env: dict[str, str] | None = None) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args, env=env)


def records(project: SharedProject, name: str = "fx.json") -> list[dict]:
    return json.loads((project.path / name).read_text())["results"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    if EXPORT_PROBLEM is not None:
        pytest.skip(str(EXPORT_PROBLEM))
    project = SharedProject(tmp_path_factory.mktemp("export_plugin"))
    project.makepyfile(export_models=MODELS.read_text(), test_m=TESTS)
    project.makefile("hooks/conftest.py", HOOKS_CONFTEST)
    project.makefile("hooks/test_hooks.py", HOOKS_TEST)
    return project


@pytest.fixture(scope="module")
def serial(project: SharedProject) -> pytest.RunResult:
    """Every case, serially, with the JSON report, junit, annotations and -rA."""
    return run(project, "--fx-report=fx.json", "--junitxml=junit.xml", "-rA", env={"GITHUB_ACTIONS": "true", "COLUMNS": "200"})


@pytest.fixture(scope="module")
def parallel(project: SharedProject, serial: pytest.RunResult) -> pytest.RunResult:
    return run(project, "--fx-report=n2.json", "-n", "2", "-rA")


def mine(project: SharedProject, test: str) -> list[tuple[str, str, str | None]]:
    return [(r["backend"], r["status"], r["category"]) for r in records(project) if r["nodeid"].endswith(f"::{test}")]


@needs_export
def test_the_marker_s_export_backend_checks_and_records_the_backend(project: SharedProject, serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_len_model"] == "PASSED" and outcomes(serial)["test_branch"] == "FAILED"
    serial.stdout.fnmatch_lines(
        ["::error file=export_models.py,line=*,title=pytest-fxtrace%3A Branch untraceable (control-flow) [[]export-strict[]]::*"]
    )
    assert mine(project, "test_len_model") == [("export", "passed", None)]
    assert mine(project, "test_branch") == [("export-strict", "untraceable", "control-flow")]
    serial.stdout.fnmatch_lines(
        [
            "*Branch is not exportable (export-strict): `if x.sum() > 0:` at export_models.py:* branches on a value "
            "computed from tensor data, which TorchDynamo cannot capture [[]GB0170[]]*",
            "*fix (not verified): none found: export fails too; in code: express the branch with torch.cond(*",
        ]
    )
    properties = {
        (case.get("name"), p.get("name")): p.get("value")
        for case in ET.parse(project.path / "junit.xml").getroot().iter("testcase")
        for p in case.iter("property")
    }
    assert properties[("test_len_model", "fx_backend")] == "export"
    assert properties[("test_branch", "fx_backend")] == "export-strict"


@needs_export
def test_two_backends_give_two_records_and_the_summary_a_backend_column(project: SharedProject, serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_len_both"] == "FAILED"
    assert mine(project, "test_len_both") == [("fx", "untraceable", "len"), ("export", "passed", None)]
    serial.stdout.fnmatch_lines(["*test*model*backend*status*category*"])
    serial.stdout.fnmatch_lines(["*test_len_both*UsesLen*fx*untraceable*len*export_models.py:*"])


@pytest.fixture(scope="module")
def backend_runs(project: SharedProject, parallel: pytest.RunResult) -> dict[str, pytest.RunResult]:
    runs = {}
    runs["ini"] = run(project, "-o", "fxtrace_backend=export", "--fx-report=ini.json", "-k", "test_len_default")
    runs["cli"] = run(project, "-o", "fxtrace_backend=export", "--fx-report=cli.json", "--fx-backend=fx,export", "-k", "test_len_default")
    runs["unknown"] = run(project, "--fx-backend=tensorrt")
    return runs


@needs_export
def test_ini_and_command_line_choose_the_backend(project: SharedProject, serial: pytest.RunResult, backend_runs) -> None:
    assert mine(project, "test_len_default") == [("fx", "untraceable", "len")]  # the default backend
    backend_runs["ini"].assert_outcomes(passed=1, deselected=13)
    assert [r["backend"] for r in records(project, "ini.json")] == ["export"]
    backend_runs["cli"].assert_outcomes(failed=1, deselected=13)
    assert [r["backend"] for r in records(project, "cli.json")] == ["fx", "export"]
    assert backend_runs["unknown"].ret == pytest.ExitCode.USAGE_ERROR
    backend_runs["unknown"].stderr.fnmatch_lines(["*backend*'tensorrt' is not a backend; use one of 'fx', 'export', 'export-strict'*"])


@pytest.fixture(scope="module")
def dynamic_runs(project: SharedProject, parallel: pytest.RunResult) -> dict[str, pytest.RunResult]:
    only = ("-k", "test_two_batch_sizes")
    return {
        "ini": run(project, "-o", "fxtrace_dynamic=false", "--fx-report=dyn.json", *only),
        "cli-wins": run(project, "-o", "fxtrace_dynamic=false", "--fx-dynamic=auto", *only),
        "bad-cli": run(project, "--fx-dynamic=sometimes", *only),
        "bad-ini": run(project, "-o", "fxtrace_dynamic=maybe", *only),
    }


@needs_export
def test_ini_and_command_line_choose_which_dimensions_are_dynamic(project: SharedProject, serial: pytest.RunResult, dynamic_runs) -> None:
    # default: the batch dimension dynamic, and the model specialized it
    assert [category for _, _, category in mine(project, "test_two_batch_sizes")] == ["specialization"]
    dynamic_runs["ini"].assert_outcomes(passed=1, deselected=13)  # a program per batch size
    dynamic_runs["cli-wins"].assert_outcomes(failed=1, deselected=13)  # the command line wins over the ini
    assert dynamic_runs["bad-cli"].ret == pytest.ExitCode.USAGE_ERROR
    dynamic_runs["bad-cli"].stderr.fnmatch_lines(["*command line*dynamic*unknown preset 'sometimes'; expected auto, true, false, or presets among batch, seq, spatial*"])
    assert dynamic_runs["bad-ini"].ret == pytest.ExitCode.USAGE_ERROR
    dynamic_runs["bad-ini"].stderr.fnmatch_lines(["*ini fxtrace_dynamic*unknown preset 'maybe'*"])


@needs_export
def test_xfail_takes_the_export_categories(serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_counted"] == "XFAIL"
    assert outcomes(serial)["test_wrong_reason"] == "FAILED"
    serial.stdout.fnmatch_lines(["*expected a traceability failure of category unsupported, but got control-flow*"])


@needs_export
def test_the_fixture_checks_with_each_backend(project: SharedProject, serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_fixture_both"] == outcomes(serial)["test_fixture_one"] == "PASSED"
    assert [b for b, _, _ in mine(project, "test_fixture_both") + mine(project, "test_fixture_one")] == ["fx", "export", "export"]


@pytest.fixture(scope="module")
def snapshot_runs(project: SharedProject, parallel: pytest.RunResult) -> dict[str, pytest.RunResult]:
    only = ("-k", "test_block_snapshot")
    runs = {"update": run(project, "--fx-snapshot-update", *only), "same": run(project, *only)}
    golden = project.path / "fx_snapshots" / "test_m" / "test_block_snapshot.Block.export.txt"
    golden.with_suffix(".as-written").write_text(golden.read_text())
    golden.write_text(golden.read_text().replace("aten.relu", "aten.gelu"))
    runs["changed"] = run(project, *only)
    return runs


@needs_export
def test_export_snapshots_sit_beside_fx_ones(project: SharedProject, serial: pytest.RunResult, snapshot_runs) -> None:
    assert outcomes(serial)["test_block_snapshot"] == "FAILED"
    serial.stdout.fnmatch_lines(["*Block exported and matched eager, but has no golden snapshot*test_block_snapshot.Block.export.txt*"])
    snapshot_runs["update"].assert_outcomes(passed=1, deselected=13)
    folder = project.path / "fx_snapshots" / "test_m"
    written = sorted(p.name for p in folder.iterdir() if p.suffix == ".txt")
    assert written == ["test_block_snapshot.Block.export.txt", "test_block_snapshot.Block.fx.txt"]
    exported = (folder / "test_block_snapshot.Block.export.as-written").read_text()
    assert exported.startswith("# pytest-fxtrace snapshot of an exported program's graph code (")
    fx_text = (folder / "test_block_snapshot.Block.fx.txt").read_text()
    assert fx_text.startswith("# pytest-fxtrace snapshot of generated torch.fx code (")
    assert "x: user input f32[s" in exported and "torch.ops.aten.linear.default" in exported
    snapshot_runs["same"].assert_outcomes(passed=1, deselected=13)
    snapshot_runs["changed"].assert_outcomes(failed=1, deselected=13)
    snapshot_runs["changed"].stdout.fnmatch_lines(
        ["*the generated code differs from the golden snapshot*test_block_snapshot.Block.export.txt*"]
    )


@pytest.fixture(scope="module")
def baseline_runs(project: SharedProject, parallel: pytest.RunResult) -> dict[str, object]:
    only = ("-k", "test_branch_baseline")
    runs: dict[str, object] = {"update": run(project, "--fx-baseline=base.json", "--fx-baseline-update", *only)}
    entries = json.loads((project.path / "base.json").read_text())["entries"]
    runs["entries"] = entries
    runs["known"] = run(project, "--fx-baseline=base.json", *only)
    (project.path / "base.json").write_text(json.dumps({"version": 1, "entries": [entries[1]]}))
    runs["export-missing"] = run(project, "--fx-baseline=base.json", *only)  # the export failure is not in it any more
    return runs


@needs_export
def test_the_baseline_keeps_an_entry_per_backend(baseline_runs) -> None:
    baseline_runs["update"].assert_outcomes(xfailed=1, deselected=13)
    assert [(e["backend"], e["status"], e["category"]) for e in baseline_runs["entries"]] == [
        ("export", "untraceable", "control-flow"),
        ("fx", "untraceable", "control-flow"),
    ]
    baseline_runs["known"].assert_outcomes(xfailed=1, deselected=13)
    baseline_runs["export-missing"].assert_outcomes(failed=1, deselected=13)
    baseline_runs["export-missing"].stdout.fnmatch_lines(["*Branch is not exportable (export)*", "*(not in the baseline*"])


@needs_export
def test_the_hooks_see_export_checks(project: SharedProject, serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_block"] == "FAILED"
    assert (project.path / "hooks" / "finished.txt").read_text().splitlines()[0] == "export mismatch numeric"
    serial.stdout.fnmatch_lines(["*Block exported, but the exported program*s output differs from eager on recorded call 1*"])


@needs_export
def test_torch_s_partial_graph_and_logs_stay_out_of_the_test_output(serial: pytest.RunResult) -> None:
    assert outcomes(serial)["test_branch_both_modes"] == "FAILED"
    output = serial.stdout.str() + serial.stderr.str()
    # the partial graph torch prints on failure; a verified patch's diff shows the user's own
    # `def forward(self, x):` as context, indented under its fix line (and in the annotation)
    stray = [
        line
        for line in output.splitlines()
        if "def forward(self" in line and not re.match(r"^ {4}[ +-] {4}def forward\(self", line) and not line.startswith("::error ")
    ]
    assert not stray, stray
    assert "Captured stderr" not in output and "Captured log" not in output  # -rA shows any
    assert "symbolic_shapes" not in output


@pytest.mark.skipif(EXPORT_PROBLEM is None, reason="this torch has a usable torch.export")
def test_a_torch_without_a_usable_export_is_a_usage_error_naming_the_version(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest, torch

        @pytest.mark.traceable(backend="export")
        def test_model():
            torch.nn.Linear(2, 2)(torch.randn(1, 2))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    floor = ".".join(map(str, _compat.EXPORT_FLOOR))
    result.stderr.fnmatch_lines([f"*backend='export' needs torch >= {floor}*found torch*"])


@pytest.mark.parametrize("version, refused", [("2.1.2", True), ("2.11.0", True), ("2.12.0", False), ("2.14.1", False)])
def test_the_export_floor_is_told_from_the_version(version: str, refused: bool) -> None:
    problem = _compat.export_floor_problem(version)
    assert (problem is not None) is refused
    if refused:
        assert problem.splitlines()[0].endswith(f"found torch {version}")


@needs_export
def test_export_records_are_the_same_under_xdist(project: SharedProject, serial: pytest.RunResult, parallel: pytest.RunResult) -> None:
    def stable(name: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "trace_seconds"} for r in records(project, name)]

    assert outcomes(parallel) == outcomes(serial)
    assert stable("n2.json") == stable("fx.json")
    assert mine(project, "test_block_two_sizes") == [("export", "passed", None)]
