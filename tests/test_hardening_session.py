"""Faults over a session: nothing a check captured outlives its test, and a crashed
pytest-xdist worker does not cost the report of what finished."""

from __future__ import annotations

import json

import pytest

WEAKREF_CONFTEST = """
import weakref

REFS = []


def pytest_fxtrace_check_finished(item, report):
    REFS.append((item.name, "graph module", weakref.ref(report.graph_module)))
"""

WEAKREF_TESTS = """
import gc, weakref
import pytest, torch, torch.nn as nn
from conftest import REFS


def keep_refs(name, model, x, out):
    REFS.extend(
        [
            (name, "model", weakref.ref(model)),
            (name, "input", weakref.ref(x)),
            (name, "output", weakref.ref(out)),
            (name, "buffer", weakref.ref(model[1].running_mean)),
        ]
    )


@pytest.mark.traceable
def test_marked():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    x = torch.randn(3, 4)
    out = model(x)
    out.sum().backward()
    keep_refs("test_marked", model, x, out)


def test_fixture(fxtrace):
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()
    x = torch.randn(3, 4)
    fxtrace(model, x)
    keep_refs("test_fixture", model, x, model(x))


def test_nothing_outlives_its_test():
    gc.collect()
    assert len(REFS) == 10, REFS
    alive = [(test, what) for test, what, ref in REFS if ref() is not None]
    assert alive == []
"""


def test_no_model_tensor_or_graph_module_outlives_its_test(pytester: pytest.Pytester):
    pytester.makeconftest(WEAKREF_CONFTEST)
    pytester.makepyfile(test_refs=WEAKREF_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


CRASH_TESTS = """
import os
import pytest, torch, torch.nn as nn


@pytest.mark.traceable
@pytest.mark.parametrize("i", range(4))
def test_ok(i):
    nn.Linear(4, 4)(torch.randn(2, 4))


@pytest.mark.traceable
def test_crash():
    nn.Linear(4, 4)(torch.randn(2, 4))
    os._exit(3)  # the worker dies in the middle of a test
"""


def test_a_crashed_worker_still_gets_a_report_of_what_finished_and_what_did_not(pytester: pytest.Pytester):
    pytester.makepyfile(test_crash=CRASH_TESTS)
    result = pytester.runpytest_subprocess("-n", "2", "--fx-report=report.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_crash*crashed*"])
    report = json.loads((pytester.path / "report.json").read_text())  # whole, valid JSON
    assert [p.name for p in pytester.path.iterdir() if p.name.startswith("report")] == ["report.json"]
    finished = {r["nodeid"] for r in report["results"]}
    unfinished = {u["nodeid"]: u["reason"] for u in report.get("unfinished", [])}
    assert "test_crash.py::test_crash" in unfinished
    assert "crashed while running it" in unfinished["test_crash.py::test_crash"]
    assert all(r["status"] == "passed" for r in report["results"])
    expected = {f"test_crash.py::test_ok[{i}]" for i in range(4)}
    assert expected <= finished  # what finished is reported, also on the worker that crashed
    assert set(unfinished) == {"test_crash.py::test_crash"}
    result.stdout.fnmatch_lines(["*test(s) with no recorded result*"])

