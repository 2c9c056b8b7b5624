"""The dynamic-shape gate end to end (issue 39), through one pytester session: dimensions asked
for on the marker and by preset on the command line; the failure's one line per dimension at
the user's statement; the JSON record's ``dims``; junit's ``fx_dim``; the HTML page's box."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_fxtrace import _compat

pytestmark = pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))
MODELS = Path(__file__).parent / "dim_models.py"

import dim_models as m  # noqa: E402  (tests/ is on sys.path: conftest)

TESTS = """
import pytest, torch
import dim_models as m

@pytest.mark.traceable(backend="export", dynamic={"x": {0: "batch"}})
def test_pinned():
    m.FixedTensor()(torch.randn(8, 16))

@pytest.mark.traceable(backend="export", dynamic={"x": {1: "seq"}})
def test_table():
    m.TableLength()(torch.randn(2, 8, 16))

@pytest.mark.traceable(backend="export")
def test_conv():
    m.CleanConv()(torch.randn(2, 3, 8, 8))
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(dim_models=MODELS.read_text(), test_dims_user=TESTS)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", *args)


def test_requested_dimensions_reach_the_message_json_junit_and_page(project: pytest.Pytester, browser_page) -> None:
    result = run(project, "--fx-report=fx.json", "--junitxml=junit.xml", "--fx-html=fx.html", "--fx-dynamic=batch")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed")) == (1, 2), result.stdout.str()
    out = result.stdout.str()
    pinned = f"`x` dim 0 (batch): specialized to 8 by `return x + torch.ones(8, 16)` at dim_models.py:{m.line_of('FIXED-TENSOR')}"
    assert pinned in out
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((project.path / "fx.json").read_text())["results"]}
    assert records["test_pinned"]["dims"][0] | {"sizes": None} == {
        "input": "x", "dim": 0, "name": "batch", "verdict": "specialized", "value": 8, "range": None,
        "multiple_of": None, "path": "dim_models.py", "line": m.line_of("FIXED-TENSOR"),
        "statement": "return x + torch.ones(8, 16)", "sizes": None,
    }  # fmt: skip
    table = records["test_table"]["dims"][0]  # the marker's request wins over --fx-dynamic=batch
    assert (table["name"], table["verdict"], table["range"]) == ("seq", "constrained", [2, 32])
    conv = records["test_conv"]["dims"]  # the preset from the command line: the batch only
    assert [(d["input"], d["dim"], d["verdict"]) for d in conv] == [("x", 0, "dynamic")]
    assert [s["size"] for s in conv[0]["sizes"]] == [1, 3, 4, 5]
    junit = ET.parse(project.path / "junit.xml")
    dims = [p.get("value") for p in junit.iter("property") if p.get("name") == "fx_dim"]
    assert any(d.startswith("`x` dim 1 (seq): constrained, range 2..32") for d in dims), dims
    page = browser_page
    page.goto((project.path / "fx.html").as_uri())
    row = page.locator("tr.row", has_text="test_pinned")
    row.click()
    box = row.locator("xpath=following-sibling::tr[contains(@class, 'detail')][1]").locator("li.dim")
    assert box.first.inner_text().startswith("x dim 0 (batch) specialized to 8")
    assert page.events == []


def test_a_model_without_the_requested_argument_is_one_usage_error_naming_it(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_bad="""
import pytest, torch
import dim_models as m

@pytest.mark.traceable(backend="export", dynamic={"images": {0: "batch"}})
def test_bad():
    m.CleanConv()(torch.randn(2, 3, 8, 8))
"""
    )
    result = run(project, "test_bad.py")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "pytest-fxtrace: dynamic: forward takes no argument 'images' (its arguments: x)" in out
    assert "Traceback" not in out


BASELINED = """
import pytest, torch
import dim_models as m

@pytest.mark.traceable(backend="export", dynamic={"x": {0: "batch"}})
def test_pinned():
    m.{model}()(torch.randn(8, 16))
"""


def test_the_baseline_keeps_the_failing_dimensions_and_ratchets_on_them(project: pytest.Pytester) -> None:
    project.makepyfile(test_dims_user=BASELINED.replace("{model}", "FixedTensor"))
    assert run(project, "--fx-baseline=base.json", "--fx-baseline-update").ret == pytest.ExitCode.OK
    (entry,) = json.loads((project.path / "base.json").read_text())["entries"]
    assert entry["dims"] == [{"input": "x", "dim": 0, "verdict": "specialized"}]
    assert run(project, "--fx-baseline=base.json").parseoutcomes() == {"xfailed": 1}
    # another way to fail the same dimension, same status and category: a new finding
    project.makepyfile(test_dims_user=BASELINED.replace("{model}", "LiteralView"))
    result = run(project, "--fx-baseline=base.json")
    assert result.parseoutcomes().get("failed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 dimension pinned or broken not in the baseline *base.json*", "*`x` dim 0 unsound*"])
    # fixed: the entry's dimension holds now, and the run names it to delete
    project.makepyfile(test_dims_user=BASELINED.replace("{model}", "CleanSequence").replace(
        "m.CleanSequence()(torch.randn(8, 16))", "m.CleanConv()(torch.randn(8, 3, 8, 8))"
    ))  # fmt: skip
    result = run(project, "--fx-baseline=base.json")
    assert result.parseoutcomes().get("failed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*baselined as failing, but it passes now*"])


def test_a_baselined_dimension_that_holds_now_is_named_to_delete(project: pytest.Pytester) -> None:
    both = BASELINED.replace('{"x": {0: "batch"}}', '{"x": {0: "batch", 1: "seq"}}')
    project.makepyfile(test_dims_user=both.replace("{model}", "FixedTensor"))  # pins both
    assert run(project, "--fx-baseline=base.json", "--fx-baseline-update").ret == pytest.ExitCode.OK
    (entry,) = json.loads((project.path / "base.json").read_text())["entries"]
    assert [(d["dim"], d["verdict"]) for d in entry["dims"]] == [(0, "specialized"), (1, "specialized")]
    project.makepyfile(test_dims_user=both.replace("{model}", "IntOfShape"))  # pins the batch only
    result = run(project, "--fx-baseline=base.json")
    assert result.parseoutcomes().get("failed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*XPASS(strict)] 1 dimension baselined for test_dims_user.py::test_pinned*no longer fails: delete it*",
        "*`x` dim 1 specialized",
    ])  # fmt: skip


REGISTRY = """
import torch
import dim_models as m


class Registry:
    def names(self):
        return ["conv", "encoder"]

    def build(self, name):
        return m.CleanConv() if name == "conv" else m.TableLength()

    def example_inputs(self, name, model):
        return (torch.randn(2, 3, 8, 8),) if name == "conv" else (torch.randn(2, 8, 16),)

    def options(self, name):  # a registry may ask for its own dimensions, model by model
        return {"dynamic": {"x": {1: "seq"}}} if name == "encoder" else {}


REGISTRY = Registry()
"""


def test_a_registry_asks_for_dimensions_model_by_model_over_the_command_line_s_preset(project: pytest.Pytester) -> None:
    project.makepyfile(my_zoo=REGISTRY)
    (project.path / "test_dims_user.py").unlink()  # the zoo's checks only
    result = run(project, "--fx-zoo=my_zoo:REGISTRY", "--fx-backend=export", "--fx-dynamic=batch", "--fx-report=z.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    records = {r["nodeid"]: r for r in json.loads((project.path / "z.json").read_text())["results"]}
    assert [(d["name"], d["verdict"]) for d in records["zoo/my_zoo:REGISTRY::conv"]["dims"]] == [("batch", "dynamic")]
    assert [(d["name"], d["verdict"], d["range"]) for d in records["zoo/my_zoo:REGISTRY::encoder"]["dims"]] == [
        ("seq", "constrained", [2, 32])
    ]


BELOW_THE_FLOOR = """
from pytest_fxtrace import _compat

# a torch below the export backend's floor, as the version string and the full check tell it
_compat.export_problem = lambda version=None: _compat._export_message("2.11.0")
_compat.export_floor_problem = lambda version: _compat._export_message("2.11.0")
"""


@pytest.mark.parametrize(
    "marker, args",
    [
        ("@pytest.mark.traceable", ("--fx-backend=export", "--fx-dynamic=batch")),
        ('@pytest.mark.traceable(backend="export", dynamic={"x": {0: "batch"}})', ()),
    ],
    ids=["command-line", "marker"],
)
def test_a_dimension_request_below_the_export_floor_is_one_usage_error_naming_it(
    pytester: pytest.Pytester, marker: str, args: tuple[str, ...]
) -> None:
    """Issue 39 item 7: below EXPORT_FLOOR (no Dim.AUTO) a dimension request is refused before
    any export, once, naming the floor and the torch found; no traceback, no test run."""
    pytester.makeconftest(BELOW_THE_FLOOR)
    pytester.makepyfile(
        test_m=f"""
        import pytest, torch

        {marker}
        def test_model():
            torch.nn.Linear(2, 2)(torch.randn(3, 2))
        """
    )
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    floor = ".".join(map(str, _compat.EXPORT_FLOOR))
    output = result.stdout.str() + result.stderr.str()
    assert output.count(f"backend='export' needs torch >= {floor} (") == 1, output
    result.stderr.fnmatch_lines([f"*backend='export' needs torch >= {floor} (*); found torch 2.11.0"])
    assert "Traceback" not in output and " passed" not in output and " failed" not in output
