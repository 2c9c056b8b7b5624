"""The torch.export backends end to end, through pytester subprocesses: the option on
the marker, the fixture, the ini file and the command line; one record per model per
backend (JSON, junit, the summary's backend column); xfail= by category; golden files
beside FX's; the baseline per backend; the hooks; torch's own output kept out."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_fxtrace import _compat

EXPORT_PROBLEM = _compat.export_problem()
needs_export = pytest.mark.skipif(EXPORT_PROBLEM is not None, reason=str(EXPORT_PROBLEM))
MODELS = Path(__file__).parent / "export_models.py"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding tests/export_models.py as the user's own module."""
    pytester.makepyfile(export_models=MODELS.read_text())
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def records(pytester: pytest.Pytester, name: str = "fx.json") -> list[dict]:
    return json.loads((pytester.path / name).read_text())["results"]


@needs_export
def test_the_marker_s_export_backend_checks_and_records_the_backend(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend="export")
        def test_len_model():
            m.UsesLen()(torch.randn(2, 3))

        @pytest.mark.traceable(backend="export-strict")
        def test_branch():
            m.Branch()(torch.randn(4, 4))
        """
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = run(project, "--fx-report=fx.json", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["::error file=export_models.py,line=*,title=pytest-fxtrace%3A Branch untraceable (control-flow) [[]export-strict[]]::*"]
    )
    found = {(r["nodeid"].split("::")[1], r["backend"], r["status"], r["category"]) for r in records(project)}
    assert found == {
        ("test_len_model", "export", "passed", None),
        ("test_branch", "export-strict", "untraceable", "control-flow"),
    }
    result.stdout.fnmatch_lines(
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
def test_two_backends_give_two_records_and_the_summary_a_backend_column(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend=("fx", "export"))
        def test_len_model():
            m.UsesLen()(torch.randn(2, 3))
        """
    )
    result = run(project, "--fx-report=fx.json", "-v")
    result.assert_outcomes(failed=1)
    found = [(r["backend"], r["status"], r["category"]) for r in records(project)]
    assert found == [("fx", "untraceable", "len"), ("export", "passed", None)]
    result.stdout.fnmatch_lines(["*2 checks: 1 passed, 1 untraceable*", "*test*model*backend*status*category*"])
    result.stdout.fnmatch_lines(["*test_len_model*UsesLen*fx*untraceable*len*export_models.py:*"])


@needs_export
def test_ini_and_command_line_choose_the_backend(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nfxtrace_backend = export\n")
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable
        def test_len_model():
            m.UsesLen()(torch.randn(2, 3))
        """
    )
    run(project, "--fx-report=fx.json").assert_outcomes(passed=1)
    assert [r["backend"] for r in records(project)] == ["export"]
    run(project, "--fx-report=fx.json", "--fx-backend=fx,export").assert_outcomes(failed=1)
    assert [r["backend"] for r in records(project)] == ["fx", "export"]
    result = run(project, "--fx-backend=onnx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*backend*'onnx' is not a backend; use one of 'fx', 'export', 'export-strict'*"])


@needs_export
def test_ini_and_command_line_choose_which_dimensions_are_dynamic(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend="export")
        def test_two_batch_sizes():
            model = m.BatchOfFour()
            model(torch.randn(4, 2))
            model(torch.randn(6, 2))
        """
    )
    run(project, "--fx-report=fx.json").assert_outcomes(failed=1)  # default: batch dynamic, specialized
    assert [r["category"] for r in records(project)] == ["specialization"]
    project.makeini("[pytest]\nfxtrace_dynamic = false\n")
    run(project, "--fx-report=fx.json").assert_outcomes(passed=1)  # a program per batch size
    run(project, "--fx-dynamic=auto").assert_outcomes(failed=1)  # the command line wins over the ini
    result = run(project, "--fx-dynamic=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*command line*dynamic*expected True*'sometimes'*"])
    project.makeini("[pytest]\nfxtrace_dynamic = maybe\n")
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini fxtrace_dynamic*expected True*'maybe'*"])


@needs_export
def test_xfail_takes_the_export_categories(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend="export", xfail="data-dependent")
        def test_counted():
            m.CountedView()(torch.ones(4, 4))

        @pytest.mark.traceable(backend="export", xfail="unsupported")
        def test_wrong_reason():
            m.Branch()(torch.randn(4, 4))
        """
    )
    result = run(project, "--fx-report=fx.json")
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*expected a traceability failure of category unsupported, but got control-flow*"])


@needs_export
def test_the_fixture_checks_with_each_backend(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import torch
        import export_models as m

        def test_both(fxtrace):
            fx, export = fxtrace.check(m.Block(), (torch.randn(2, 4),), backend=("fx", "export"))
            assert (fx.backend, export.backend) == ("fx", "export")
            assert fx.ok and export.ok and "aten.linear" in export.code

        def test_one(fxtrace):
            report = fxtrace.check(m.Block(), (torch.randn(2, 4),), backend="export")
            assert report.backend == "export" and report.ok
        """
    )
    run(project, "--fx-report=fx.json").assert_outcomes(passed=2)
    assert [r["backend"] for r in records(project)] == ["fx", "export", "export"]


@needs_export
def test_export_snapshots_sit_beside_fx_ones(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend=("fx", "export"), snapshot=True)
        def test_block():
            model = m.Block()
            model(torch.randn(2, 4))
            model(torch.randn(3, 4))
        """
    )
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Block exported and matched eager, but has no golden snapshot*test_block.Block.export.txt*"])
    run(project, "--fx-snapshot-update").assert_outcomes(passed=1)
    folder = project.path / "fx_snapshots" / "test_m"
    assert sorted(p.name for p in folder.iterdir()) == ["test_block.Block.export.txt", "test_block.Block.fx.txt"]
    exported = (folder / "test_block.Block.export.txt").read_text()
    assert exported.startswith("# pytest-fxtrace snapshot of an exported program's graph code (")
    assert (folder / "test_block.Block.fx.txt").read_text().startswith("# pytest-fxtrace snapshot of generated torch.fx code (")
    assert "x: user input f32[s" in exported and "torch.ops.aten.linear.default" in exported
    run(project).assert_outcomes(passed=1)
    (folder / "test_block.Block.export.txt").write_text(exported.replace("aten.relu", "aten.gelu"))
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the generated code differs from the golden snapshot*test_block.Block.export.txt*"])


@needs_export
def test_the_baseline_keeps_an_entry_per_backend(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend=("fx", "export"))
        def test_branch():
            m.Branch()(torch.randn(4, 4))
        """
    )
    run(project, "--fx-baseline=base.json", "--fx-baseline-update").assert_outcomes(xfailed=1)
    entries = json.loads((project.path / "base.json").read_text())["entries"]
    assert [(e["backend"], e["status"], e["category"]) for e in entries] == [
        ("export", "untraceable", "control-flow"),
        ("fx", "untraceable", "control-flow"),
    ]
    run(project, "--fx-baseline=base.json").assert_outcomes(xfailed=1)
    (project.path / "base.json").write_text(json.dumps({"version": 1, "entries": [entries[1]]}))
    result = run(project, "--fx-baseline=base.json")  # the export failure is not in it any more
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Branch is not exportable (export)*", "*(not in the baseline*"])


@needs_export
def test_the_hooks_see_export_checks(project: pytest.Pytester) -> None:
    project.makeconftest(
        """
        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            return False

        def pytest_fxtrace_check_finished(item, report):
            print(f"\\nFINISHED {report.backend} {report.status} {report.category}")
        """
    )
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend="export")
        def test_block():
            m.Block()(torch.randn(2, 4))
        """
    )
    result = run(project, "-s")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FINISHED export mismatch numeric*", "*Block exported, but the exported program*s output differs from eager on recorded call 1*"])


@needs_export
def test_torch_s_partial_graph_and_logs_stay_out_of_the_test_output(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend=("export", "export-strict"))
        def test_branch():
            m.Branch()(torch.randn(4, 4))
        """
    )
    result = run(project, "-rA")
    result.assert_outcomes(failed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "def forward(self" not in output  # the partial graph torch prints on failure
    assert "Captured stderr" not in output and "Captured log" not in output
    assert "symbolic_shapes" not in output


@pytest.mark.skipif(EXPORT_PROBLEM is None, reason="this torch has a usable torch.export")
def test_a_torch_without_a_usable_export_is_a_usage_error_naming_the_version(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch

        @pytest.mark.traceable(backend="export")
        def test_model():
            torch.nn.Linear(2, 2)(torch.randn(1, 2))
        """
    )
    result = run(project)
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
def test_export_records_are_the_same_under_xdist(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import export_models as m

        @pytest.mark.traceable(backend=("fx", "export"))
        def test_len_model():
            m.UsesLen()(torch.randn(2, 3))

        @pytest.mark.traceable(backend="export")
        def test_branch():
            m.Branch()(torch.randn(4, 4))

        @pytest.mark.traceable(backend="export")
        def test_block_two_sizes():
            block = m.Block()
            block(torch.randn(2, 4))
            block(torch.randn(5, 4))
        """
    )

    def stable(name: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "trace_seconds"} for r in records(project, name)]

    run(project, "--fx-report=serial.json").assert_outcomes(passed=1, failed=2)
    run(project, "--fx-report=n2.json", "-n", "2").assert_outcomes(passed=1, failed=2)
    assert stable("n2.json") == stable("serial.json")
    assert [(r["backend"], r["status"]) for r in stable("serial.json")] == [
        ("fx", "untraceable"), ("export", "passed"), ("export", "untraceable"), ("export", "passed"),
    ]  # fmt: skip
