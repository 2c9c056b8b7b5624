"""Reusable ``pytester`` checks of the golden-snapshot life cycle.

For projects that build on pytest-fxtrace's snapshots (a custom tracer, a
``pytest_fxtrace_normalize_code`` hook, a different ``fxtrace_snapshot_dir``) and want
to know the whole cycle still works with their setup, under pytest-xdist too::

    from pytest_fxtrace.testing import CycleProject, run_snapshot_cycle

    pytest_plugins = ["pytester"]

    @pytest.mark.parametrize("mode", [("-p", "no:xdist"), ("-n", "0"), ("-n", "2")])
    def test_snapshot_cycle(pytester, mode):
        project = CycleProject(conftest=MY_CONFTEST)
        run_snapshot_cycle(pytester, *mode, project=project)

``run_snapshot_cycle`` walks a tiny project through: missing -> fail; update -> pass
and files exist; rerun -> pass; change the model -> fail with a diff naming the
changed line; update -> pass; delete a test -> orphan reported; update with
``--fx-snapshot-keep-orphans`` -> orphan kept; ``-k`` update -> orphan kept; full
update -> orphan deleted. Every step asserts on what a user sees
(exit code, message, files) and says which step failed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_fxtrace.snapshot import DEFAULT_DIR, SUFFIX

MODELS = """\
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x).relu()


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))
"""

KEPT_TESTS = """\
import pytest
import torch

from models import Encoder, Head


@pytest.mark.traceable(snapshot=True)
def test_pipeline():
    features = Encoder()(torch.randn(1, 3, 8, 8))
    assert Head()(features).shape == (1, 2)
"""

DOOMED_TEST = """

@pytest.mark.traceable(snapshot=True)
def test_doomed():
    Head()(torch.randn(1, 4, 5, 5))
"""


@dataclasses.dataclass(frozen=True)
class CycleProject:
    """The project the cycle runs on; replace any part to run it on your own setup.

    ``changed_models`` must change the generated code so that ``changed_line`` is a
    line only the new code has; ``doomed_test`` is appended to ``tests`` and later
    deleted, leaving its snapshot (``doomed_snapshot``, a file name) orphaned;
    ``kept_k`` is a ``-k`` expression selecting the tests but not the doomed one.
    """

    models: str = MODELS
    changed_models: str = MODELS.replace("self.conv(x).relu()", "self.conv(x).sigmoid()")
    changed_line: str = "sigmoid = conv.sigmoid();  conv = None"
    tests: str = KEPT_TESTS
    doomed_test: str = DOOMED_TEST
    doomed_snapshot: str = "test_doomed.Head.fx.txt"
    kept_k: str = "pipeline"
    module: str = "test_cycle"
    conftest: str = ""
    ini: str = ""  # lines for the [pytest] section of pytest.ini
    snapshot_dir: str = DEFAULT_DIR
    expected_snapshots: tuple[str, ...] = (
        "test_pipeline.Encoder.fx.txt",
        "test_pipeline.Head.fx.txt",
        "test_doomed.Head.fx.txt",
    )


@dataclasses.dataclass
class CycleResult:
    """What the cycle saw: every run's output, and the snapshot files at two points."""

    outputs: dict[str, str] = dataclasses.field(default_factory=dict)
    created: dict[str, bytes] = dataclasses.field(default_factory=dict)  # after the first update
    final: dict[str, bytes] = dataclasses.field(default_factory=dict)


def snapshot_contents(root: Path, snapshot_dir: str = DEFAULT_DIR) -> dict[str, bytes]:
    """Every snapshot file under ``root`` (relative POSIX path -> bytes)."""
    parts = tuple(snapshot_dir.split("/"))
    found = {}
    for path in sorted(root.rglob(f"*{SUFFIX}")):
        relative = path.relative_to(root).parts
        if any(relative[i : i + len(parts)] == parts for i in range(len(relative))):
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def write_project(
    root: Path, project: CycleProject | None = None, *, changed: bool = False, doomed: bool = True
) -> None:
    """Write the cycle's project into ``root``: ``models.py``, the test module, ``pytest.ini``
    and the conftest; ``changed`` writes the changed models, ``doomed`` the doomed test."""
    project = project or CycleProject()
    root.mkdir(parents=True, exist_ok=True)
    (root / "models.py").write_text(project.changed_models if changed else project.models)
    (root / f"{project.module}.py").write_text(project.tests + (project.doomed_test if doomed else ""))
    (root / "pytest.ini").write_text(
        f"[pytest]\nfxtrace_snapshot_dir = {project.snapshot_dir}\n{project.ini}\n"
    )
    if project.conftest:
        (root / "conftest.py").write_text(project.conftest)


class _Cycle:
    def __init__(self, pytester: pytest.Pytester, args: tuple[str, ...], project: CycleProject) -> None:
        self.pytester = pytester
        self.args = args
        self.project = project
        self.result = CycleResult()
        self.folder = pytester.path / project.snapshot_dir / project.module

    def run(self, step: str, *extra: str, expect: pytest.ExitCode | int) -> str:
        outcome = self.pytester.runpytest_subprocess(*self.args, "-p", "no:cacheprovider", *extra)
        output = outcome.stdout.str() + "\n" + outcome.stderr.str()
        self.result.outputs[step] = output
        assert outcome.ret == expect, f"step {step!r}: exit code {outcome.ret}, expected {expect}\n{output}"
        return output

    def expect(self, step: str, condition: bool, what: str) -> None:
        assert condition, f"step {step!r}: {what}\n{self.result.outputs.get(step, '')}"

    def files(self) -> dict[str, bytes]:
        return snapshot_contents(self.pytester.path, self.project.snapshot_dir)

    def go(self) -> CycleResult:
        project = self.project
        root = self.pytester.path
        write_project(root, project)
        fail, ok = pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.OK

        out = self.run("missing", expect=fail)
        self.expect(
            "missing", "create it with: pytest --fx-snapshot-update" in out, "no command to create it"
        )
        self.expect("missing", not self.files(), "a snapshot was created without --fx-snapshot-update")

        out = self.run("create", "--fx-snapshot-update", expect=ok)
        created = self.files()
        names = sorted(Path(name).name for name in created)
        self.expect("create", names == sorted(project.expected_snapshots), f"files {names}")
        self.expect("create", "created" in out, "the summary does not list created files")
        self.result.created = created

        self.run("rerun", expect=ok)
        self.expect("rerun", self.files() == created, "a passing run changed the snapshot files")

        write_project(root, project, changed=True)
        out = self.run("changed", expect=fail)
        self.expect(
            "changed", "+    " + project.changed_line in out, "the diff does not name the changed line"
        )
        self.expect("changed", self.files() == created, "a failing run changed the snapshot files")

        out = self.run("accept", "--fx-snapshot-update", expect=ok)
        self.expect("accept", "updated" in out, "the summary does not list updated files")
        accepted = self.files()
        changed = [name for name in accepted if accepted[name] != created.get(name)]
        self.expect("accept", bool(changed), "no snapshot file was updated")

        doomed = self.folder / project.doomed_snapshot
        write_project(root, project, changed=True, doomed=False)
        out = self.run("orphaned", expect=ok)
        self.expect("orphaned", "orphaned" in out and project.doomed_snapshot in out, "orphan not reported")
        self.expect("orphaned", doomed.exists(), "a run without --fx-snapshot-update deleted the orphan")

        out = self.run("keep orphans", "--fx-snapshot-update", "--fx-snapshot-keep-orphans", expect=ok)
        self.expect("keep orphans", doomed.exists(), "--fx-snapshot-keep-orphans deleted the orphan")
        self.expect("keep orphans", "--fx-snapshot-keep-orphans" in out, "the summary does not say why")

        out = self.run("partial update", "--fx-snapshot-update", "-k", project.kept_k, expect=ok)
        self.expect("partial update", doomed.exists(), "a -k update run deleted the orphan")
        self.expect("partial update", "kept" in out, "the summary does not say the orphan was kept")

        out = self.run("full update", "--fx-snapshot-update", expect=ok)
        self.expect("full update", not doomed.exists(), "a full update run kept the orphan")
        self.expect("full update", "deleted" in out and project.doomed_snapshot in out, "deletion not listed")
        self.result.final = self.files()
        return self.result


def run_snapshot_cycle(pytester: pytest.Pytester, *args: str, project: Any = None) -> CycleResult:
    """Run the golden-snapshot life cycle in ``pytester``'s directory; ``args`` go to every
    run (``"-n", "2"``). Raises AssertionError naming the step that went wrong.

    Example::

        result = run_snapshot_cycle(pytester, "-n", "2")
        assert len(result.created) == 3
    """
    return _Cycle(pytester, tuple(args), project or CycleProject()).go()
