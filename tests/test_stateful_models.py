"""Models that update their own buffers and Python state in forward, called several times.

Each replay runs on the buffer state its own call saw, the user's buffers end as an unmarked
run leaves them, and where the GraphModule really leaves an update out (an in-place op on a
buffer alone runs once while tracing) the message names that statement, not another one.
"""

from __future__ import annotations

import json
import re

import pytest
from shared_project import SharedProject, outcomes

pytestmark = pytest.mark.xdist_group(__name__)  # the project's session runs once, in one worker

STATEFUL_TESTS = """
import pytest, torch, torch.nn as nn


class RunningMean(nn.Module):
    # the update starts from a traced value: the graph records it
    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(4))
        self.calls = 0

    def forward(self, x):
        self.running_mean.lerp_(x.mean(0), 0.1)
        self.calls += 1
        return x - self.running_mean


def run(mode):
    torch.manual_seed(0)
    model = getattr(RunningMean(), mode)()
    x = torch.randn(3, 4)
    outputs = [model(x + i) for i in range(3)]
    return model, outputs


@pytest.fixture(scope="module")
def unmarked():
    return {mode: run(mode) for mode in ("train", "eval")}


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.traceable
def test_running_mean(mode, unmarked):
    model, outputs = run(mode)
    expected_model, expected_outputs = unmarked[mode]
    assert torch.equal(model.running_mean, expected_model.running_mean)
    assert model.calls == expected_model.calls == 3
    for got, want in zip(outputs, expected_outputs):
        assert torch.equal(got, want)
"""


def test_a_model_updating_its_buffers_is_replayed_on_the_state_each_call_saw(session: pytest.RunResult, project: SharedProject):
    assert [outcomes(session, nodeids=True)[f"test_stateful.py::test_running_mean[{m}]"] for m in ("train", "eval")] == ["PASSED"] * 2
    assert [r["status"] for r in records(project, "test_stateful.py")] == ["passed", "passed"]


UPDATE_FROM_ITSELF = """
import pytest, torch, torch.nn as nn


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(4))
        self.calls = 0

    def forward(self, x):
        self.running_mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.calls += 1
        return x - self.running_mean


@pytest.mark.traceable
def test_decay():
    model = Decay()
    model(torch.randn(3, 4))
    model(torch.randn(3, 4))
"""


def test_a_buffer_updated_from_itself_alone_is_named_as_the_cause(session: pytest.RunResult, project: SharedProject):
    assert outcomes(session)["test_decay"] == "FAILED"
    session.stdout.fnmatch_lines(
        [
            "Decay traced, but the GraphModule's output differs from eager on recorded call 2: forward "
            "updates the buffer self.running_mean in place by an op on the buffer alone, which torch.fx "
            "ran once while tracing instead of recording it*buf.lerp_(new, 0.1)*"
            "`self.running_mean.mul_(0.9).add_(x.mean(0), alpha=0.1)` at test_decay.py:11",
            "  category: baked-constant",
        ]
    )
    section = session.stdout.str().split("_ test_decay _", 1)[1].split("\n", 1)[1]
    decay_failure = re.split(r"(?m)^[_=]", section)[0]  # up to the next failure or the summary
    assert "self.calls" not in decay_failure  # counts calls, changes no output: not the cause
    (record,) = records(project, "test_decay.py")
    assert (record["status"], record["category"], record["location"]["line"]) == ("mismatch", "baked-constant", 11)


COUNTS_IN_A_BUFFER = """
import pytest, torch, torch.nn as nn


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * 2


class Rebound(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1
        return x * 2


@pytest.mark.traceable
def test_counted():
    model = Counted()
    model(torch.randn(3))
    assert model.calls.item() == 1


@pytest.mark.traceable(backend="export-strict")
def test_rebound():
    model = Rebound()
    model(torch.randn(3))
    assert model.calls.item() == 1
"""


def test_a_buffer_update_no_output_reads_is_a_mismatch_naming_the_buffer_and_the_statement(session: pytest.RunResult, project: SharedProject):
    export = EXPORT
    lines = (project.path / "test_counted.py").read_text().splitlines()
    counted = lines.index("        self.calls += 1") + 1
    rebound = lines.index("        self.calls = self.calls + 1") + 1 if export else None
    assert [outcomes(session).get(name) for name in ("test_counted", "test_rebound")] == ["FAILED", "FAILED" if export else None]
    result = session
    result.stdout.fnmatch_lines(
        [
            "Counted traced, but the GraphModule's buffer self.calls differs from eager after recorded call 1: "
            "forward updates the buffer self.calls in place by an op on the buffer alone, which torch.fx ran once "
            f"while tracing*: `self.calls += 1` at test_counted.py:{counted}",
            "  category: baked-constant",
        ]
    )
    assert [(r["status"], r["category"], r["location"]["line"]) for r in records(project, "test_counted.py")] == [("mismatch", "baked-constant", counted)] + (
        [("mismatch", "baked-constant", rebound)] if export else []
    )
    if export:
        result.stdout.fnmatch_lines(
            [
                "Rebound exported, but the exported program's buffer self.calls differs from eager after recorded "
                "call 1: forward rebinds the buffer self.calls to a new tensor, which strict export (TorchDynamo) "
                f"leaves out of the program*: `self.calls = self.calls + 1` at test_counted.py:{rebound}",
            ]
        )


def _export_usable() -> bool:
    from pytest_fxtrace import _compat

    return _compat.export_problem() is None


EXPORT = _export_usable()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    """The three projects above as one: a session runs them all once."""
    project = SharedProject(tmp_path_factory.mktemp("stateful"))
    # a torch without torch.export refuses backend="export-strict" at collection, even for
    # a deselected test: there the project has the fx test alone
    counted = COUNTS_IN_A_BUFFER if EXPORT else COUNTS_IN_A_BUFFER.split('@pytest.mark.traceable(backend="export-strict")')[0]
    project.makepyfile(test_stateful=STATEFUL_TESTS, test_decay=UPDATE_FROM_ITSELF, test_counted=counted)
    return project


@pytest.fixture(scope="module")
def session(project: SharedProject) -> pytest.RunResult:
    return project.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider", "-rA", env={"COLUMNS": "200"})


def records(project: SharedProject, module: str) -> list[dict]:
    return [r for r in json.loads((project.path / "report.json").read_text())["results"] if r["nodeid"].startswith(module)]
