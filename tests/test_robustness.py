"""Faults of pytest-fxtrace itself, other threads, and a time limit that fires in clean-up.

Whatever goes wrong on our side must be reported as ours (``internal-error``), never
surface from the user's ``model(x)`` line or blame the model; a module called on
another thread is not ours to check; and a time limit never leaves the model, torch.fx's
patches or the signal handler half-restored.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
import torch
import torch.nn as nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import TraceOptions


def run_marked(model: nn.Module, *inputs: torch.Tensor, **options) -> list:
    """The zero-code path without pytest: record the calls a test body makes, then check."""
    checks = TestChecks(TraceOptions(**options))
    with recording(checks.observer_for):
        model(*inputs)
    return checks.finish()

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
import pytest_fxtrace.rng


@pytest.fixture(autouse=True)
def broken_capture(monkeypatch):
    def capture(*args, **kwargs):
        raise RuntimeError("injected fault in RngState.capture")

    monkeypatch.setattr(pytest_fxtrace.rng.RngState, "capture", capture)
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
    result = pytester.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, passed=1)
    fault = "TypeError: injected fault in bind_call" if conftest is FAULTY_ENGINE else (
        "RuntimeError: injected fault in RngState.capture"
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_marked _*",
            "pytest-fxtrace failed while checking Linear: this is a bug in pytest-fxtrace, not in your "
            f"model or your test (pytest-fxtrace *, torch {torch.__version__}, python *).",
            "  Please report it to pytest-fxtrace with the traceback below.",
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


# -- a time limit that fires inside clean-up ---------------------------------------------------


@pytest.fixture
def alarm_on_entering(monkeypatch):
    """Make SIGALRM arrive on the first instruction of a chosen function, called while a
    time limit is armed (through a profile hook), as if the limit had run out exactly there."""

    def arm(code, skip: int = 0) -> list:
        """On the entry after ``skip`` entries (each while a limit is armed)."""
        entered = []

        def profile(frame, event, arg):
            armed = signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL
            if event == "call" and frame.f_code is code and armed:
                entered.append(code.co_name)
                if len(entered) > skip:
                    sys.setprofile(None)
                    os.kill(os.getpid(), signal.SIGALRM)

        sys.setprofile(profile)
        return entered

    yield arm
    sys.setprofile(None)


class Sized(nn.Module):
    def forward(self, x):
        return x.reshape(len(x), -1)  # len needs autowrap_functions=[len]


def test_a_timeout_in_the_removal_of_an_autowrapped_builtin_still_removes_it(alarm_on_entering):
    from pytest_fxtrace.backends.fx import tracer

    model = Sized()
    entered = alarm_on_entering(tracer._unwrap_builtins.__code__)
    report = check_traceable(model, (torch.randn(2, 3),), timeout=60, autowrap_functions=[len])
    assert entered == ["_unwrap_builtins"]
    assert (report.status, report.category) == ("timeout", None)
    assert "did not finish within timeout=60 s" in report.message
    assert "len" not in globals()  # the wrapper torch.fx would record len() with is gone
    assert nn.Module.__call__ is nn.Module._wrapped_call_impl
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_timeout_in_torch_fx_patcher_exit_leaves_no_patch(alarm_on_entering):
    import torch.fx._symbolic_trace as fx

    getattr_before = nn.Module.__dict__["__getattr__"]
    # the patcher's clean-up: revert_all_patches where torch has it (2.2+), else __exit__ (2.1)
    cleanup = getattr(fx._Patcher, "revert_all_patches", None) or fx._Patcher.__exit__
    entered = alarm_on_entering(cleanup.__code__)
    report = check_traceable(nn.Linear(3, 2), (torch.randn(2, 3),), timeout=60)
    assert entered == [cleanup.__name__]
    assert report.status == "timeout"
    assert nn.Module.__call__ is nn.Module._wrapped_call_impl
    assert nn.Module.__dict__["__getattr__"] is getattr_before
    assert getattr(fx, "CURRENT_PATCHER", None) is None  # torch 2.1 has no such global
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


class Running(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(3))

    def forward(self, x):
        self.mean.lerp_(x.mean(0), 0.1)
        return x - self.mean


def test_a_timeout_while_buffers_are_given_back_leaves_the_users_buffers_in_place(alarm_on_entering):
    from pytest_fxtrace.state import ModelState

    model = Running()
    mean = model.mean
    x = torch.randn(2, 3)
    # the trace borrows the model's buffers, then the replay the GraphModule's: the latter
    entered = alarm_on_entering(ModelState._give_back.__code__, skip=1)
    report = check_traceable(model, (x,), timeout=60)
    assert entered == ["_give_back", "_give_back"]
    assert report.status == "timeout"
    assert model.mean is mean and torch.equal(mean, torch.zeros(3))
    assert report.graph_module.mean is mean  # not the copy lent to the replay
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


def test_a_timeout_while_the_time_limit_itself_is_left_restores_the_handler(monkeypatch):
    from pytest_fxtrace.timelimit import CheckTimeout, time_limit

    real_setitimer = signal.setitimer

    def setitimer(which, seconds, *interval):
        if seconds == 0:  # time_limit disarming: the alarm arrives right then
            os.kill(os.getpid(), signal.SIGALRM)
        return real_setitimer(which, seconds, *interval)

    def outer_handler(*_):
        pass

    previous = signal.signal(signal.SIGALRM, outer_handler)
    try:
        monkeypatch.setattr(signal, "setitimer", setitimer)
        with pytest.raises(CheckTimeout), time_limit(60):
            pass
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGALRM) is outer_handler
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


TIMEOUT_IN_CLEANUP = """
import os, signal, sys

import pytest, torch, torch.nn as nn
from pytest_fxtrace.backends.fx import tracer


class Sized(nn.Module):
    def forward(self, x):
        return x.reshape(len(x), -1)


@pytest.fixture(autouse=True)
def alarm_in_cleanup():
    def profile(frame, event, arg):
        if event == "call" and frame.f_code is tracer._unwrap_builtins.__code__:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGALRM)

    sys.setprofile(profile)
    yield
    sys.setprofile(None)


@pytest.mark.traceable(autowrap_functions=[len], timeout=60)
def test_sized():
    Sized()(torch.randn(2, 3))


def test_nothing_left_behind():
    assert "len" not in globals()
    assert nn.Module.__call__ is nn.Module._wrapped_call_impl
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
"""


def test_a_timeout_in_clean_up_is_reported_as_timeout(pytester: pytest.Pytester):
    pytester.makepyfile(test_cleanup=TIMEOUT_IN_CLEANUP)
    result = pytester.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "Sized: the check did not finish within timeout=60 s; raise the limit*",
            "*1 check: 1 timeout",
            "test_cleanup.py::test_sized  Sized  timeout  - *",
        ]
    )
    records = json.loads((pytester.path / "report.json").read_text())["results"]
    assert [(r["status"], r["category"], r["location"]) for r in records] == [("timeout", None, None)]

