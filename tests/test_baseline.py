"""--fx-baseline end to end: known failures xfail, a new or changed failure fails, a
fixed model names its stale entry; --fx-baseline-update writes the same bytes
serial and under -n 2, and keeps the entries of tests it did not run.

One project holds the registry and a marked test; the update run that most tests start
from runs once for the module (serially: the -n 2 test compares its file), and each test
runs only the sessions its own case needs, on copies where it changes the file.
"""

from __future__ import annotations

import glob
import json
import textwrap
from pathlib import Path

import pytest
from shared_project import SharedProject

REGISTRY = textwrap.dedent(
    """
    import os

    import torch


    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x


    class Looping(torch.nn.Module):
        def forward(self, x):
            return sum(row for row in x)


    BROKEN = set(os.environ.get("ZOO_BREAK", "").split(","))
    FIXED = set(os.environ.get("ZOO_FIX", "").split(","))


    class Registry:
        def names(self):
            return ["branchy", "linear", "looping", "relu"]

        def build(self, name):
            if name in FIXED or name in ("linear", "relu") and name not in BROKEN:
                return torch.nn.Linear(3, 3)
            return Looping() if name == "looping" else Branchy()

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)

MARKED = textwrap.dedent(
    """
    import pytest
    import torch

    from zooreg import Branchy


    @pytest.mark.traceable
    def test_branchy():
        Branchy()(torch.randn(2, 3))
    """
)

ZOO = "--fx-zoo=zooreg:REGISTRY"
# the tests share the update run: one xdist worker under --dist loadgroup (tox's)
pytestmark = pytest.mark.xdist_group(__name__)


def run(project: SharedProject, *args: str, env: dict[str, str] | None = None) -> pytest.RunResult:
    return project.runpytest_subprocess(*args, env=env)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    project = SharedProject(tmp_path_factory.mktemp("baseline"))
    project.makepyfile(zooreg=REGISTRY, test_marked=MARKED)
    return project


@pytest.fixture(scope="module")
def update(project: SharedProject) -> pytest.RunResult:
    """baseline.json written from every test, serially; the tests read it or copy it."""
    return run(project, ZOO, "--fx-baseline=baseline.json", "--fx-baseline-update", "-p", "no:xdist")


def entries(project: SharedProject, name: str = "baseline.json") -> list[tuple[str, str, str | None]]:
    document = json.loads((project.path / name).read_text())
    return [(e["nodeid"], e["status"], e["category"]) for e in document["entries"]]


def copy(project: SharedProject, name: str) -> Path:
    path = project.path / name
    path.write_bytes((project.path / "baseline.json").read_bytes())
    return path


def test_baseline_update_then_known_failures_xfail(project, update):
    update.assert_outcomes(passed=2, xfailed=3)
    update.stdout.fnmatch_lines(["fxtrace baseline: wrote *baseline.json (3 entries, 3 added, 0 removed)"])
    assert entries(project) == [
        ("test_marked.py::test_branchy", "untraceable", "control-flow"),
        ("zoo/zooreg:REGISTRY::branchy", "untraceable", "control-flow"),
        ("zoo/zooreg:REGISTRY::looping", "untraceable", "iteration"),
    ]
    result = run(project, ZOO, "--fx-baseline=baseline.json", "--fx-report=r.json")
    assert result.ret == 0
    result.assert_outcomes(passed=2, xfailed=3)
    statuses = [r["status"] for r in json.loads((project.path / "r.json").read_text())["results"]]
    assert sorted(statuses) == ["passed", "passed", "xfailed", "xfailed", "xfailed"]


def test_baseline_a_new_break_fails_exactly_one_test(project, update):
    result = run(project, ZOO, "--fx-baseline=baseline.json", env={"ZOO_BREAK": "relu"})
    result.assert_outcomes(passed=1, xfailed=3, failed=1)
    result.stdout.fnmatch_lines(["FAILED zoo/zooreg:REGISTRY::relu*", "*1 failed*"])
    assert f"(not in the baseline {project.path / 'baseline.json'})" in result.stdout.str()


def test_baseline_a_changed_failure_fails(project, update):
    path = copy(project, "changed.json")
    path.write_text(path.read_text().replace('"iteration"', '"len"'))
    result = run(project, ZOO, "--fx-baseline=changed.json", "-k", "looping")
    result.assert_outcomes(failed=1, deselected=4)
    result.stdout.fnmatch_lines(["*expects untraceable (len): the failure changed*"])


def test_baseline_a_fixed_model_names_the_stale_entry(project, update):
    env = {"ZOO_FIX": "looping", "GITHUB_ACTIONS": "true"}
    result = run(project, ZOO, "--fx-baseline=baseline.json", "--fx-report=fixed.json", env=env)
    result.assert_outcomes(passed=2, xfailed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*baselined as failing, but it passes now: delete this entry from *baseline.json*",
            "  zoo/zooreg:REGISTRY::looping ?zooreg.Looping?: untraceable (iteration)",
        ]
    )
    results = json.loads((project.path / "fixed.json").read_text())["results"]
    looping = [r for r in results if "looping" in r["nodeid"]]
    assert looping[0]["status"] == "xpassed"
    annotation = [line for line in result.stdout.lines if line.startswith("::error") and "looping" in line]
    assert "baselined as failing, but Linear traced" in annotation[0]
    assert "delete its entry from the baseline file" in annotation[0]


def test_baseline_update_is_byte_identical_under_xdist_and_keeps_deselected(project, update):
    serial = copy(project, "serial.json")  # as the serial update wrote it
    run(project, ZOO, "--fx-baseline=n2.json", "--fx-baseline-update", "-n", "2")
    assert serial.read_bytes() == (project.path / "n2.json").read_bytes()
    result = run(project, ZOO, "--fx-baseline=serial.json", "--fx-baseline-update", "-k", "looping")
    result.stdout.fnmatch_lines(["*(3 entries, 0 added, 0 removed)"])
    assert serial.read_bytes() == (project.path / "n2.json").read_bytes()


def test_baseline_missing_file_is_a_usage_error(project):
    result = run(project, "--fx-baseline=nowhere.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-baseline=*nowhere.json: no such file; create it from this run with*"])


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('[{"nodeid": "test_marked.py::test_branchy", "status": "untraceable"}]',
         'is not a pytest-fxtrace baseline: it holds a list, not an object with "version" and "entries".'),
        ('{"version": 1, "entries": [{"nodeid": "test_marked.py::test_branchy"}]}',
         'is not a pytest-fxtrace baseline: entries[0] has no "status".'),
        ('{"version": 1, "entries": [{"nodeid": "n", "status": "untraceable", "category": ["len"]}]}',
         'is not a pytest-fxtrace baseline: entries[0]["category"] is a list, not a string or null.'),
        ('{"version": 1, "entries": [', "is not JSON: Expecting value at line 1, column 28."),
        ('{"version": 2, "entries": []}',
         'is not a pytest-fxtrace baseline: its "version" is 2: this pytest-fxtrace reads version 1 (a file '
         "written by another release of pytest-fxtrace, or edited by hand); rewrite it with --fx-baseline-update."),
    ],
)  # fmt: skip
def test_baseline_in_another_shape_is_a_usage_error_showing_the_expected_one(project, content, problem):
    path = project.path / f"shape-{len(content)}.json"
    path.write_text(content)
    result = run(project, f"--fx-baseline={path.name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            glob.escape(f"ERROR: --fx-baseline={path}: the file {problem}"),
            '  A baseline is one JSON object, e.g. {"version": 1, "entries": [[]{"nodeid": *, "status": *}]}',
            f"*Correct it, or delete it and write it from a run with --fx-baseline={path} --fx-baseline-update",
        ]
    )
    assert "Traceback" not in result.stderr.str() and "TypeError" not in result.stderr.str()


def test_baseline_given_in_the_ini_names_the_ini_option(project):
    (project.path / "ini-baseline.json").write_text('{"entries": "none"}')
    result = run(project, "-o", "fxtrace_baseline=ini-baseline.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ['ERROR: ini fxtrace_baseline=*ini-baseline.json: the file is not a pytest-fxtrace baseline: "entries" is '
         'the string "none", not a list.']
    )  # fmt: skip


def test_baseline_entries_differing_only_in_a_null_category_load(project):
    """Sorting them compared None with a string (a TypeError out of pytest_configure)."""
    document = {"version": 1, "entries": [
        {"nodeid": "test_marked.py::test_branchy", "model": "zooreg.Branchy", "status": "untraceable", "category": c}
        for c in ("control-flow", None)
    ]}  # fmt: skip
    (project.path / "nulls.json").write_text(json.dumps(document))
    result = run(project, "--fx-baseline=nulls.json", "--collect-only", "test_marked.py")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
