"""Faults of pytest-fxtrace itself, other threads, and a time limit that fires in clean-up.

Whatever goes wrong on our side must be reported as ours (``internal-error``), never
surface from the user's ``model(x)`` line or blame the model; a module called on
another thread is not ours to check; and a time limit never leaves the model, torch.fx's
patches or the signal handler half-restored.
"""

from __future__ import annotations

import json
import signal
import threading

import pytest
import torch
import torch.nn as nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.check import TestChecks
from pytest_fxtrace.options import TraceOptions

# -- an exception of ours is an internal error, not the model's ------------------------------

FAULTY_ENGINE = """
import pytest
import pytest_fxtrace.check


@pytest.fixture(autouse=True)
def broken_engine(monkeypatch):
    def bind_call(*args, **kwargs):
        raise TypeError("injected fault in bind_call")

    monkeypatch.setattr(pytest_fxtrace.check, "bind_call", bind_call)
"""

FAULTY_CAPTURE = """
import pytest
import pytest_fxtrace.capture


@pytest.fixture(autouse=True)
def broken_capture(monkeypatch):
    def capture(*args, **kwargs):
        raise RuntimeError("injected fault in RngState.capture")

    monkeypatch.setattr(pytest_fxtrace.capture.RngState, "capture", capture)
"""

USER_TESTS = """
import pytest, torch, torch.nn as nn

AFTER = []


@pytest.mark.traceable
def test_marked():
    y = nn.Linear(4, 2)(torch.randn(3, 4))
    AFTER.append(y.shape)  # the test body goes on: the fault is not raised from model(x)


def test_fixture(fxtrace):
    fxtrace(nn.Linear(4, 2), torch.randn(3, 4))


def test_body_went_on():
    assert AFTER == [torch.Size([3, 2])]
"""


@pytest.mark.parametrize("conftest", [FAULTY_ENGINE, FAULTY_CAPTURE], ids=["engine", "capture"])
def test_an_exception_inside_pytest_fxtrace_is_reported_as_its_own_bug(pytester: pytest.Pytester, conftest: str):
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(failed=2, passed=1)
    fault = "TypeError: injected fault in bind_call" if conftest is FAULTY_ENGINE else (
        "RuntimeError: injected fault in RngState.capture"
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_marked _*",
            "pytest-fxtrace failed while checking Linear: this is a bug in pytest-fxtrace, not in your "
            f"model or your test (pytest-fxtrace *, torch {torch.__version__}, python *).",
            "*Please report it with the traceback below*",
            "  pytest-fxtrace's traceback:",
            "    Traceback (most recent call last):",
            f"    {fault}",
            "*_ test_fixture _*",
            "pytest-fxtrace failed while checking Linear: this is a bug in pytest-fxtrace*",
            f"    {fault}",
        ]
    )
    out = result.stdout.str()
    assert "Linear raised when run eagerly" not in out and "is not traceable" not in out
    assert "usage" not in out.lower()
    records = json.loads((pytester.path / "report.json").read_text())["results"]
    assert [(r["nodeid"], r["model"], r["status"]) for r in records] == [
        ("test_user.py::test_marked", "torch.nn.modules.linear.Linear", "internal-error"),
        ("test_user.py::test_fixture", "torch.nn.modules.linear.Linear", "internal-error"),
    ]


# -- threads -------------------------------------------------------------------------------

THREADED_TEST = """
import threading

import pytest, torch, torch.nn as nn


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # not traceable: checked, it would fail the test
            return x
        return -x


@pytest.mark.traceable
def test_metrics_thread():
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    expected = torch.randn(2)
    torch.manual_seed(0)
    outputs = []
    worker = threading.Thread(target=lambda: outputs.append(Branchy()(torch.ones(2))))
    worker.start()
    worker.join()
    model(x)
    assert torch.equal(torch.randn(2), expected)  # nothing reset the test's RNG stream
    assert torch.equal(outputs[0], torch.ones(2))
"""


def test_a_module_called_on_another_thread_is_not_checked(pytester: pytest.Pytester):
    pytester.makepyfile(test_threads=THREADED_TEST)
    result = pytester.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    records = json.loads((pytester.path / "report.json").read_text())["results"]
    assert [(r["model"], r["status"]) for r in records] == [("torch.nn.modules.linear.Linear", "passed")]


def test_recording_leaves_a_call_wrapper_installed_after_it_in_place():
    checks = TestChecks(TraceOptions())
    seen = []

    def observer_for(module):
        seen.append(module)
        return checks.observer_for(module)

    with recording(observer_for):
        ours = nn.Module.__call__

        def theirs(module, *args, **kwargs):  # e.g. another library's profiler
            return ours(module, *args, **kwargs)

        nn.Module.__call__ = theirs
        nn.Linear(2, 2)(torch.randn(1, 2))
    try:
        assert nn.Module.__call__ is theirs  # not replaced by what it was before ours
        nn.Linear(2, 2)(torch.randn(1, 2))  # through theirs, then ours: no longer recorded
        assert len(seen) == 1
    finally:
        nn.Module.__call__ = nn.Module._wrapped_call_impl
    (report,) = checks.finish()
    assert report.status == "passed"
