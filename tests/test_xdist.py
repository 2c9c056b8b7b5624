"""Under pytest-xdist the session's outputs say the same as a serial run.

The project of test_report_session.py runs three ways (xdist not loaded, ``-n 0``,
``-n 2``); the JSON report (timings aside), the summary, the junit-xml properties and
the GitHub annotations must be identical. A worker that crashes does not take the
report with it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from forked_pytest import pytest_process, user_env
from test_report_session import Run, junit_properties, make_project

pytestmark = pytest.mark.xdist_group(__name__)  # its module-scoped sessions run once, in one worker

MODES = {"serial": ("-p", "no:xdist"), "n0": ("-n", "0"), "n2": ("-n", "2")}


class Outputs:
    def __init__(self, run: Run) -> None:
        self.run = run
        document = json.loads((run.project / "out" / "fx.json").read_text())
        for record in document["results"]:
            record.pop("trace_seconds")
        document.pop("durations", None)  # each test's measured seconds
        self.report = document
        self.summary = run.summary()
        self.junit = junit_properties(run)
        self.annotations = run.annotations()


def run_mode(project: Path, mode: tuple[str, ...], *args: str) -> Run:
    proc = pytest_process(
        ["-p", "no:cacheprovider", *mode, *args],
        cwd=project, timeout=600, env=user_env(GITHUB_ACTIONS="true", COLUMNS="120"),
    )
    return Run(proc, project)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Outputs]:
    project = make_project(tmp_path_factory.mktemp("xdist_project"))
    (project / "test_zoo.py").unlink()  # test_models.py has every status; the zoo only adds rows
    results = {}
    for name, mode in MODES.items():
        run = run_mode(project, mode, "--fx-report=out/fx.json", "--junitxml=junit.xml")
        assert run.returncode == 1, run.output
        results[name] = Outputs(run)
    assert "gw1" in results["n2"].run.output  # two workers really ran
    return results


@pytest.mark.parametrize("mode", ["n0", "n2"])
def test_json_report_is_the_same_as_serial(outputs, mode):
    assert outputs[mode].report == outputs["serial"].report
    assert len(outputs["serial"].report["results"]) == 8


@pytest.mark.parametrize("mode", ["n0", "n2"])
def test_summary_is_the_same_as_serial(outputs, mode):
    assert outputs[mode].summary == outputs["serial"].summary
    assert outputs["serial"].summary[0].startswith("8 checks: ")


@pytest.mark.parametrize("mode", ["n0", "n2"])
def test_junit_properties_are_the_same_as_serial(outputs, mode):
    assert outputs[mode].junit == outputs["serial"].junit
    assert dict(outputs["serial"].junit["test_branchy"])["fx_status"] == "untraceable"


@pytest.mark.parametrize("mode", ["n0", "n2"])
def test_annotations_are_the_same_as_serial(outputs, mode):
    assert outputs[mode].annotations == outputs["serial"].annotations
    assert len(outputs["serial"].annotations) == 5


def test_only_the_controller_writes_the_report(outputs):
    assert [p.name for p in (outputs["n2"].run.project / "out").iterdir()] == ["fx.json"]


CRASHING = '''
import os

import pytest
import torch
from models import Good


@pytest.mark.traceable
def test_before():
    Good()(torch.randn(2, 4))


@pytest.mark.traceable
def test_crash():
    Good()(torch.randn(2, 4))
    os._exit(3)


@pytest.mark.traceable
def test_after():
    Good()(torch.randn(2, 4))
'''


def test_a_crashed_worker_leaves_a_report_that_names_what_was_lost(tmp_path):
    project = make_project(tmp_path)
    for name in ("test_models.py", "test_zoo.py"):
        (project / name).unlink()
    (project / "test_crash.py").write_text(textwrap.dedent(CRASHING))
    # one worker: test_before and test_crash run on gw0, which dies; its replacement runs test_after
    run = run_mode(project, ("-n", "1"), "--fx-report=out/fx.json")
    assert run.returncode == 1, run.output
    assert "crashed while running 'test_crash.py::test_crash'" in run.output
    document = json.loads((project / "out" / "fx.json").read_text())
    # test_before finished on gw0 before it died: its result is kept, not lost with the worker
    assert [(r["nodeid"], r["status"]) for r in document["results"]] == [
        ("test_crash.py::test_before", "passed"),
        ("test_crash.py::test_after", "passed"),
    ]
    assert document["unfinished"] == [
        {"nodeid": "test_crash.py::test_crash", "reason": "worker gw0 crashed while running it"},
    ]
    summary = run.summary()
    assert summary[0] == "2 checks: 2 passed"
    assert "1 test(s) with no recorded result:" in summary
    assert "  test_crash.py::test_crash: worker gw0 crashed while running it" in summary
