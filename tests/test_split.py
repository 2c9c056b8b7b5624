"""A zoo split over CI jobs by measured durations (pytest-split), and the shards' reports
merged back: ``python -m pytest_fxtrace.merge --durations`` writes the ``.test_durations``
pytest-split itself writes for one unsharded run.

One project, one set of runs for the whole module (the fixture ``runs``): the unsharded run
(``-n 2``), then two pytest-split shards at once. The project's conftest replaces pytest's
clock with one that moves by a fixed step per test phase, so a test lasts the same in every
run, worker and shard, and durations compare byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pytest_split")

REGISTRY = textwrap.dedent(
    """
    import torch


    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x


    class Looping(torch.nn.Module):
        def forward(self, x):
            return sum(row for row in x)


    class Registry:
        def names(self):
            return ["branchy", "fixed", "linear", "looping", "relu", "tanh"]

        def build(self, name):
            return {"branchy": Branchy(), "looping": Looping(), "relu": torch.nn.ReLU()}.get(
                name, torch.nn.Linear(3, 3)
            )

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)

# pytest's clock, moved on by 1/8 to 1 s at each reading by the phase then running: a phase
# lasts the step its last reading took, the same in any run (sums of eighths are exact)
CONFTEST = textwrap.dedent(
    """
    import os
    import zlib

    import _pytest.timing

    _now = [0.0]


    def _clock():
        phase = os.environ.get("PYTEST_CURRENT_TEST", "")
        _now[0] += (zlib.crc32(phase.encode()) % 8 + 1) / 8
        return _now[0]


    _pytest.timing.perf_counter = _clock
    """
)

ZOO = "--fx-zoo=splitreg:REGISTRY"
NAMES = ["branchy", "fixed", "linear", "looping", "relu", "tanh"]


def _env(project: Path) -> dict[str, str]:
    """The user's environment, without this suite's own pytest and CI variables; the
    project's registry importable from every process (xdist's workers included)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(project), env.get("PYTHONPATH", "")) if p)
    return env


def _start(project: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", ZOO, *args],
        cwd=project,
        env=_env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=600)
    return out


def _merge(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_fxtrace.merge", *args],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=120,
    )


class Runs:
    def __init__(self, project: Path, outputs: dict[str, str]) -> None:
        self.project = project
        self.outputs = outputs

    def read(self, name: str) -> str:
        return (self.project / name).read_text(encoding="utf-8")

    def nodeids(self, report: str) -> list[str]:
        return [r["nodeid"] for r in json.loads(self.read(report))["results"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    project = tmp_path_factory.mktemp("split")
    (project / "splitreg.py").write_text(REGISTRY)
    (project / "conftest.py").write_text(CONFTEST)
    (project / "pytest.ini").write_text("[pytest]\n")
    outputs = {}
    # the unsharded run: the report, and pytest-split's own durations of the same run
    outputs["whole"] = _finish(
        _start(project, "-n", "2", "--fx-report=whole.json", "--store-durations", "--durations-path=split.durations")
    )
    # the durations the next CI run splits by, from that run's report
    first = _merge(project, "whole.json", "--durations", "whole.durations")
    outputs["merge-whole"] = first.stdout + first.stderr
    shards = {
        group: _start(
            project, "-p", "no:xdist", "--splits=2", f"--group={group}", "--durations-path=whole.durations",
            f"--fx-report=shard{group}.json",
        )
        for group in ("1", "2")
    }  # fmt: skip
    for group, proc in shards.items():
        outputs[f"shard{group}"] = _finish(proc)
    merged = _merge(project, "shard1.json", "shard2.json", "--durations", "merged.durations")
    outputs["merge"] = merged.stdout + merged.stderr
    return Runs(project, outputs)


def test_durations_from_the_report_are_the_bytes_pytest_split_stores(runs):
    assert (runs.project / "whole.durations").read_bytes() == (runs.project / "split.durations").read_bytes(), (
        runs.outputs["whole"] + runs.outputs["merge-whole"]
    )
    durations = json.loads(runs.read("whole.durations"))
    assert sorted(durations) == [f"zoo/splitreg:REGISTRY::{name}" for name in NAMES]
    assert len(set(durations.values())) > 1  # the clock gives tests different costs


def test_pytest_split_splits_the_zoo_by_the_durations_written(runs):
    durations = json.loads(runs.read("whole.durations"))
    shards = [runs.nodeids("shard1.json"), runs.nodeids("shard2.json")]
    assert all(shards), runs.outputs
    assert sorted(shards[0] + shards[1]) == sorted(durations)  # every model once
    for group, nodeids in zip(("1", "2"), shards, strict=True):
        estimate = sum(durations[n] for n in nodeids)
        assert f"Running group {group}/2 (estimated duration: {estimate:.2f}s)" in runs.outputs[f"shard{group}"]


def test_merged_shards_give_the_durations_of_one_unsharded_run(runs):
    assert runs.outputs["merge"].splitlines()[-1].startswith("durations: wrote merged.durations (6 tests)")
    assert (runs.project / "merged.durations").read_bytes() == (runs.project / "split.durations").read_bytes()


def test_durations_keep_the_entries_of_tests_the_reports_do_not_hold(runs, tmp_path):
    previous = tmp_path / ".test_durations"
    previous.write_text(json.dumps({"tests/test_other.py::test_slow": 12.5, "zoo/splitreg:REGISTRY::relu": 99.0}))
    proc = _merge(runs.project, "shard1.json", "shard2.json", "--durations", str(previous))
    assert proc.returncode in (0, 1), proc.stderr
    written = json.loads(previous.read_text())
    assert written["tests/test_other.py::test_slow"] == 12.5
    assert written["zoo/splitreg:REGISTRY::relu"] == json.loads(runs.read("split.durations"))["zoo/splitreg:REGISTRY::relu"]


def test_a_durations_file_that_is_not_pytest_splits_is_refused(runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('["not", "pairs"]')
    proc = _merge(runs.project, "shard1.json", "--durations", str(bad))
    assert proc.returncode == 2
    assert f"--durations {bad}: not a pytest-split durations file" in proc.stderr
    assert bad.read_text() == '["not", "pairs"]'
