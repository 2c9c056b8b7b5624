"""The torch.compile backend end to end, through pytester subprocesses: a marked test
failing at the user's line, the budget from the marker, the ini file and the command line,
the JSON record's graph_breaks and recompiles (and the other backends' records without
them), the same records under -n 2, and the torch floor as a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fxtrace import _compat

COMPILE_PROBLEM = _compat.compile_problem()
pytestmark = pytest.mark.skipif(COMPILE_PROBLEM is not None, reason=str(COMPILE_PROBLEM))
MODELS = Path(__file__).parent / "compile_models.py"

import compile_models as m  # noqa: E402  (tests/ is on sys.path: conftest)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding tests/compile_models.py as the user's own module."""
    pytester.makepyfile(compile_models=MODELS.read_text())
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def records(pytester: pytest.Pytester, name: str = "fx.json") -> list[dict]:
    return json.loads((pytester.path / name).read_text())["results"]


TESTS = """
import pytest, torch
import compile_models as m

@pytest.mark.traceable(backend="compile")
def test_several_breaks():
    m.SeveralBreaks()(torch.randn(2, 4))

@pytest.mark.traceable(backend=("fx", "compile"))
def test_sizes():
    model = m.Sizes()
    for n in (2, 4, 6):
        model(torch.ones(n, 3))

@pytest.mark.traceable(backend="compile")
def test_step():
    model = m.StepScaled()
    for step in (1, 2):
        model.step = step
        model(torch.ones(2))
"""


def test_a_marked_test_fails_at_the_user_s_line_and_its_record_lists_every_site_serial_and_n2(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_m=TESTS)
    result = run(project, "--fx-report=fx.json")
    result.assert_outcomes(passed=1, failed=2)
    printed = m.line_of("C-SEVERAL-PRINT")
    result.stdout.fnmatch_lines(
        [
            f"SeveralBreaks is not compilable (torch.compile): `print(\"step\")` at compile_models.py:{printed} "
            "breaks the graph (Failed to trace builtin operator [[]GB0059[]]): *; 3 graph-break sites, max_graph_breaks=0",
            "  graph breaks (deepest first):",
            f"    block (Block): `gain = y.norm().item()` at compile_models.py:{m.line_of('C-SUBMODULE')}: data-dependent, *",
            f"StepScaled is not compilable (torch.compile): `return x * self.step` at compile_models.py:{m.line_of('C-STEP')} "
            "recompiles: `self.step` was 1, now 2; *",
        ]
    )
    assert "torch/_dynamo" not in result.stdout.str()
    found = {(r["nodeid"].partition("::")[2], r["backend"]): r for r in records(project)}
    breaks = found[("test_several_breaks", "compile")]["graph_breaks"]
    assert [(b["path"], b["line"], b["module"], b["id"]) for b in breaks] == [
        ("compile_models.py", printed, "", "GB0059"),
        ("compile_models.py", m.line_of("C-SUBMODULE"), "block", "GB0124"),
        ("compile_models.py", m.line_of("C-SEVERAL-BRANCH"), "", "GB0170"),
    ]
    assert set(breaks[0]) == {"path", "line", "module", "type", "id", "category", "reason", "statement"}
    assert breaks[0]["statement"] == 'print("step")'
    assert found[("test_sizes", "compile")]["status"] == "passed"
    assert found[("test_sizes", "compile")]["recompiles"] == [
        {
            "reason": "`x.shape[0]` went from 2 to 4 (automatic dynamic shapes make it dynamic: not counted)",
            "path": None,
            "line": None,
            "counted": False,
        }
    ]
    assert found[("test_step", "compile")]["recompiles"][0]["line"] == m.line_of("C-STEP")
    fx = found[("test_sizes", "fx")]
    assert "graph_breaks" not in fx and "recompiles" not in fx  # the other backends' records as before

    def stable(name: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "trace_seconds"} for r in records(project, name)]

    run(project, "--fx-report=n2.json", "-n", "2").assert_outcomes(passed=1, failed=2)
    assert stable("n2.json") == stable("fx.json")


def test_the_budget_comes_from_the_ini_file_and_the_command_line_overrides_it(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_m="""
        import pytest, torch
        import compile_models as m

        @pytest.mark.traceable(backend="compile")
        def test_item():
            m.ItemScale()(torch.randn(2, 4))
        """
    )
    project.makeini("[pytest]\nfxtrace_max_graph_breaks = 1\nfxtrace_compile_backend = aot_eager\n")
    run(project).assert_outcomes(passed=1)
    result = run(project, "--fx-max-graph-breaks=0", "--fx-compile-backend=eager")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 graph-break site, max_graph_breaks=0*"])
    bad = run(project, "--fx-max-recompiles=many")
    bad.stderr.fnmatch_lines(["*command line: max_recompiles: expected a whole number of at least 0, got 'many'*"])


def test_naming_the_backend_on_a_torch_below_the_floor_is_a_usage_error(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        conftest="""
        from pytest_fxtrace import _compat
        _compat.compile_problem = lambda version=None: _compat._compile_message("2.12.0")
        _compat.compile_floor_problem = lambda version: _compat._compile_message("2.12.0")
        """,
        test_m="""
        def test_nothing():
            pass
        """,
    )
    result = run(project, "--fx-backend=compile")
    result.stderr.fnmatch_lines(["*backend='compile' needs torch >= 2.13 (*); found torch 2.12.0*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
