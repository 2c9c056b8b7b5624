"""The pluggy hooks, implemented in a user's conftest.py files, change what a check does.

One user project, run once under ``-n 2`` (hooks run on xdist workers, where the
checks happen): each folder has a conftest.py implementing one hook, and conftest
hooks apply to the tests below their folder only, as pytest's own hooks do.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from forked_pytest import pytest_process, user_env

# the tests read one run: one xdist worker under --dist loadgroup (tox's), so it runs once
pytestmark = pytest.mark.xdist_group(__name__)

MODELS = (Path(__file__).parent / "report_models.py").read_text() + '''

SCALE = [1.0]


class Scaled(nn.Module):
    """Reads a global setting: the trace freezes the value of the first call."""

    def forward(self, x):
        return x * SCALE[0]
'''

ROOT_CONFTEST = '''
import json
import os

SEEN = []


def pytest_fxtrace_check_finished(item, report):
    SEEN.append([item.nodeid, report.model_name, report.status, report.category])


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    (session.config.rootpath / f"observed-{worker}.json").write_text(json.dumps(SEEN))
'''

TESTS_BODY = '''
import pytest
import torch
from models import SCALE, Branchy, Good, Scaled


@pytest.mark.traceable
def test_branchy():
    Branchy()(torch.randn(2, 4))


@pytest.mark.traceable
def test_scaled():
    model = Scaled()
    model(torch.randn(2, 4))
    SCALE[0] = 2.0
    try:
        model(torch.randn(2, 4))
    finally:
        SCALE[0] = 1.0


@pytest.mark.traceable
def test_good():
    Good()(torch.randn(2, 4))


def test_fixture(fxtrace):
    fxtrace(Good(), torch.randn(2, 4))


@pytest.mark.traceable(xfail="control-flow")
def test_branchy_expected():
    Branchy()(torch.randn(2, 4))
'''

CONFTESTS = {
    "plain": "",
    "leafy": '''
        import pytest_fxtrace


        class LeafBlockTracer(pytest_fxtrace.Tracer):
            """The project's tracer: keeps every Block whole."""

            def is_leaf_module(self, m, module_qualified_name):
                return type(m).__name__ == "Block" or super().is_leaf_module(m, module_qualified_name)


        def pytest_fxtrace_make_tracer(options, config):
            return LeafBlockTracer()
    ''',
    "tolerant": '''
        import torch


        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            """Sampling models: only the output's shape is deterministic."""
            if isinstance(expected, torch.Tensor):
                return actual.shape == expected.shape
    ''',
    "reject": '''
        from pytest_fxtrace.compare import Difference


        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            if actual.abs().max() >= 0:
                return Difference("output", "output: house rule says no")
    ''',
    "falsy": '''
        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            return False
    ''',
    "deferring": '''
        CALLS = []


        def pytest_fxtrace_make_tracer(options, config):
            CALLS.append("tracer")  # no opinion: the default tracer is built


        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            CALLS.append("compare")  # no opinion: the default comparison runs
    ''',
    "tracerclass": '''
        import pytest_fxtrace


        def pytest_fxtrace_make_tracer(options, config):
            return pytest_fxtrace.Tracer
    ''',
    "badcompare": '''
        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            return "same"
    ''',
}


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, path: Path) -> None:
        self.returncode = proc.returncode
        self.output = proc.stdout + proc.stderr
        self.path = path
        self.outcomes = {
            nodeid: outcome
            for outcome, nodeid in re.findall(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR) (\S+)", self.output, re.M)
        }
        self.report = json.loads((path / "fx.json").read_text())

    def outcome(self, folder: str, test: str) -> str:
        return self.outcomes[f"{folder}/test_{folder}.py::{test}"]

    def records(self, folder: str, test: str) -> list[dict]:
        nodeid = f"{folder}/test_{folder}.py::{test}"
        return [r for r in self.report["results"] if r["nodeid"] == nodeid]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    path = tmp_path_factory.mktemp("hooks_project")
    (path / "pytest.ini").write_text("[pytest]\n")
    (path / "models.py").write_text(MODELS)
    (path / "conftest.py").write_text(ROOT_CONFTEST)
    for folder, conftest in CONFTESTS.items():
        (path / folder).mkdir()
        (path / folder / "conftest.py").write_text(textwrap.dedent(conftest))
        (path / folder / f"test_{folder}.py").write_text(TESTS_BODY)
    proc = pytest_process(
        ["-p", "no:cacheprovider", "-rA", "-n", "2", "--fx-report=fx.json"],
        cwd=path, timeout=600, env=user_env(COLUMNS="200"),
    )
    return Run(proc, path)


def test_without_hooks_the_defaults_judge(run):
    assert run.outcome("plain", "test_branchy") == "FAILED"
    assert run.outcome("plain", "test_scaled") == "FAILED"
    assert run.outcome("plain", "test_good") == "PASSED"
    assert run.outcome("plain", "test_fixture") == "PASSED"
    assert run.outcome("plain", "test_branchy_expected") == "XFAIL"


def test_tracer_chosen_by_hook_is_used(run):
    # Branchy's Block stays whole with the conftest's tracer, so the model traces
    assert run.outcome("leafy", "test_branchy") == "PASSED"
    [record] = run.records("leafy", "test_branchy")
    assert record["status"] == "passed"
    # the xfail expectation now fails: the hook's tracer made the model traceable
    assert run.outcome("leafy", "test_branchy_expected") == "FAILED"
    assert run.records("leafy", "test_branchy_expected")[0]["status"] == "xpassed"


def test_comparison_hook_can_accept_what_the_default_rejects(run):
    assert run.outcome("tolerant", "test_scaled") == "PASSED"
    assert [r["status"] for r in run.records("tolerant", "test_scaled")] == ["passed"]


def test_comparison_hook_can_reject_with_its_own_message(run):
    assert run.outcome("reject", "test_good") == "FAILED"
    assert run.outcome("reject", "test_fixture") == "FAILED"
    assert "house rule says no" in run.output
    assert [r["status"] for r in run.records("reject", "test_good")] == ["mismatch"]


def test_comparison_hook_returning_false_means_different(run):
    assert run.outcome("falsy", "test_good") == "FAILED"
    assert [r["status"] for r in run.records("falsy", "test_good")] == ["mismatch"]
    assert "pytest_fxtrace_compare hook returned False" in run.output


def test_hooks_returning_none_leave_the_decision_to_the_defaults(run):
    assert run.outcome("deferring", "test_branchy") == "FAILED"
    assert run.outcome("deferring", "test_scaled") == "FAILED"
    assert run.outcome("deferring", "test_good") == "PASSED"


def test_a_tracer_class_instead_of_an_instance_is_a_clear_error(run):
    assert run.outcome("tracerclass", "test_good") == "FAILED"
    assert run.outcome("tracerclass", "test_fixture") == "FAILED"
    assert "pytest_fxtrace_make_tracer returned the class pytest_fxtrace.backends.fx.tracer.Tracer" in run.output
    assert "return an instance" in run.output
    assert run.records("tracerclass", "test_good") == []  # no check happened


def test_a_comparison_returning_nonsense_is_a_clear_error(run):
    assert run.outcome("badcompare", "test_good") == "FAILED"
    assert "pytest_fxtrace_compare returned 'same'" in run.output


def test_conftest_hooks_apply_below_their_folder_only(run):
    # leafy/conftest.py's tracer and tolerant/conftest.py's comparison stay in their folders
    assert run.outcome("plain", "test_branchy") == "FAILED"
    assert run.outcome("plain", "test_scaled") == "FAILED"
    assert run.outcome("reject", "test_branchy") == "FAILED"
    assert run.records("reject", "test_branchy")[0]["category"] == "control-flow"


def test_observer_sees_every_check_with_its_final_status_on_the_workers(run):
    seen = []
    for file in sorted(run.path.glob("observed-*.json")):
        seen.extend(tuple(entry) for entry in json.loads(file.read_text()))
    assert json.loads((run.path / "observed-controller.json").read_text()) == []
    assert {file.name for file in run.path.glob("observed-gw*.json")} <= {"observed-gw0.json", "observed-gw1.json"}
    expected = {
        (r["nodeid"], r["model"].rpartition(".")[2], r["status"], r["category"])
        for r in run.report["results"]
    }
    assert set(seen) == expected
    assert len(seen) == len(run.report["results"])
    assert ("plain/test_plain.py::test_branchy_expected", "Branchy", "xfailed", "control-flow") in seen
