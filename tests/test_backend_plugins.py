"""A backend is one folder: a third party's backend, installed as a distribution that
declares it in the entry-point group ``pytest_fxtrace.backends``, checks models with no
edit to pytest-fxtrace -- its name is a ``backend=`` value, its options are marker, ini and
CLI options, its words are in the messages and its title in its snapshot files. And the
core asks each backend its words rather than assuming torch.fx's or torch.export's."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from pytest_fxtrace.backends.spec import backend_names, get_spec
from pytest_fxtrace.tracereport import TraceReport
from pytest_fxtrace.types import Status

DUMMY_INIT = '''
from pytest_fxtrace.backends.spec import BackendOption, BackendSpec, Words
from pytest_fxtrace.importing import OptionError


def level(value, what):
    if str(value).strip() not in ("1", "2", "3"):
        raise OptionError(f"{what}: expected 1, 2 or 3, got {value!r}")
    return int(str(value).strip())


SPECS = (
    BackendSpec(
        "dummy",
        "dummy_backend.backend:DummyBackend",
        help="dummy (a third party's)",
        words=Words(able="dummy-able", past="dummied", graph="the dummy graph", doing="dummying", running="running the dummy"),
        options=(BackendOption("dummy_level", 1, level, "how hard the dummy tries", metavar="N"),),
        title="the dummy backend's traced code",
    ),
)
'''

DUMMY_BACKEND = '''
import functools
import os

import torch

from pytest_fxtrace.backends.base import Backend, CaptureFailed, Captured, Explanation, Replay
from pytest_fxtrace.types import Category, Diagnosis, Suggestion


class DummyBackend(Backend[Captured]):
    name = "dummy"

    def capture(self, context):
        with open(os.environ["DUMMY_LOG"], "a") as log:  # what the plugin asked of it
            log.write(f"capture {type(context.call.module).__name__} level={context.options.value('dummy_level')}\\n")
        try:
            gm = torch.fx.symbolic_trace(context.call.module)
        except Exception as exc:
            raise CaptureFailed(exc, functools.partial(Diagnosis, Category.CONTROL_FLOW, "the dummy cannot follow it")) from exc
        return Captured(gm, training=context.call.training)

    def replay(self, captured, context):
        return Replay(context.bound.call(captured.graph_module))

    def explain_capture_failure(self, failure, context, recheck):
        return Explanation(None, Suggestion("none found", False))
'''

ENTRY_POINTS = """
[pytest_fxtrace.backends]
dummy = dummy_backend:SPECS
"""

TESTS = """
import pytest, torch


class Net(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


@pytest.mark.traceable(backend="dummy", dummy_level=2, snapshot=True)
def test_net():
    Net()(torch.randn(2, 3))


@pytest.mark.traceable(backend="dummy")
def test_branchy():
    Branchy()(torch.randn(2, 3))
"""


@pytest.fixture
def installed(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The dummy backend as an installed distribution: its package and a ``.dist-info``
    with ``entry_points.txt`` in a folder on ``PYTHONPATH`` (importlib.metadata finds a
    distribution there as pip would leave it); returns the file its capture logs to."""
    site = pytester.path / "site"
    package = site / "dummy_backend"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(DUMMY_INIT))
    (package / "backend.py").write_text(textwrap.dedent(DUMMY_BACKEND))
    info = site / "dummy_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dummy-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    log = pytester.path / "dummy.log"
    monkeypatch.setenv("DUMMY_LOG", str(log))
    return log


@pytest.mark.fresh_process  # the entry points are read at startup: a process of its own
def test_a_backend_installed_through_an_entry_point_checks_the_marked_test(pytester: pytest.Pytester, installed: Path) -> None:
    pytester.makepyfile(test_m=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--fx-report=r.json", "--fx-snapshot-update", "-rA"
    )
    result.assert_outcomes(passed=1, failed=1)
    # its words, from its spec: the model is "not dummy-able", not "not traceable"
    result.stdout.fnmatch_lines(["*Branchy is not dummy-able:*the dummy cannot follow it*"])
    assert installed.read_text().splitlines() == ["capture Net level=2", "capture Branchy level=1"]
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((pytester.path / "r.json").read_text())["results"]}
    assert (records["test_net"]["backend"], records["test_net"]["status"]) == ("dummy", "passed")
    assert (records["test_branchy"]["backend"], records["test_branchy"]["status"]) == ("dummy", "untraceable")
    # its snapshot file: named and titled by it
    (snapshot,) = (pytester.path / "fx_snapshots").rglob("*.txt")
    assert snapshot.name == "test_net.Net.dummy.txt"
    assert snapshot.read_text().splitlines()[0] == (
        "# pytest-fxtrace snapshot of the dummy backend's traced code (the lines after the blank line)"
    )


@pytest.mark.fresh_process
def test_a_backend_s_options_are_ini_and_command_line_options(pytester: pytest.Pytester, installed: Path) -> None:
    pytester.makepyfile(test_m=TESTS.replace(", dummy_level=2, snapshot=True", ""))
    pytester.makeini("[pytest]\nfxtrace_dummy_level = 3\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "net").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "net", "--fx-dummy-level=2").assert_outcomes(passed=1)
    assert installed.read_text().splitlines() == ["capture Net level=3", "capture Net level=2"]
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-dummy-level=9")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*command line: dummy_level: expected 1, 2 or 3, got '9'*"])
    assert "--fx-dummy-level=N" in pytester.runpytest_subprocess("--help").stdout.str()


@pytest.mark.fresh_process
def test_an_unknown_backend_is_one_usage_error_naming_the_installed_ones(pytester: pytest.Pytester, installed: Path) -> None:
    pytester.makepyfile(test_m=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-backend=dumy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*'dumy' is not a backend (did you mean 'dummy'?); use one of 'fx', 'export', 'export-strict', 'compile', 'onnx', 'dummy'*"]
    )


def test_the_built_in_backends_are_found_in_their_folders_in_order() -> None:
    assert backend_names()[:5] == ["fx", "export", "export-strict", "compile", "onnx"]
    assert [get_spec(name).words.past for name in backend_names()[:5]] == ["traced", "exported", "exported", "compiled", "exported to ONNX"]


def test_a_compile_check_s_coverage_says_compiled_not_exported() -> None:
    # a report that counted what reached a graph without localizing (no per-module table)
    report = TraceReport(ok=False, status=Status.UNTRACEABLE, model="m.Net", coverage=0.5, backend="compile")
    assert "  coverage: 50% of what the call reached is in compiled graphs" in report.describe().splitlines()
    exported = TraceReport(ok=False, status=Status.UNTRACEABLE, model="m.Net", coverage=0.5, backend="export")
    assert "  coverage: 50% of what the call reached is in exported graphs" in exported.describe().splitlines()


def test_a_backend_whose_entry_point_cannot_load_is_a_usage_error_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_fxtrace.backends import spec
    from pytest_fxtrace.options import OptionError, resolve_options

    monkeypatch.setitem(spec._BROKEN, "broken", "backend 'broken' cannot be loaded: ... ImportError: no torch_broken")
    with pytest.raises(OptionError, match="marker: backend: backend 'broken' cannot be loaded: .*no torch_broken"):
        resolve_options(("marker", {"backend": "broken"}))
    assert resolve_options(("marker", {"backend": "fx"})).backend == ("fx",)  # the others still check


def test_the_onnx_backend_without_its_extra_is_one_usage_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pytest_fxtrace.options import OptionError, resolve_options

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(OptionError) as raised:
        resolve_options(("marker", {"backend": "onnx"}))
    assert "backend='onnx' needs " in str(raised.value) and "onnxruntime (not installed)" in str(raised.value)
    assert "pip install 'pytest-fxtrace[onnx]'" in str(raised.value)
