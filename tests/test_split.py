"""A zoo split over CI jobs by measured durations (pytest-split), and the shards' reports
merged back: ``python -m pytest_fxtrace.merge --durations`` writes the ``.test_durations``
pytest-split itself writes for one unsharded run, and ``--baseline`` the baseline one
unsharded ``--fx-baseline-update`` writes; shards updating one baseline at once on a shared
file system write it too.

One project, one set of runs for the whole module (the fixture ``runs``): the unsharded run
(``-n 2``, updating its baseline), then four pytest-split shards at once: two updating one
shared baseline, two gating on the first baseline (as a nightly CI run does). The project's
conftest replaces pytest's clock with one that moves by a fixed step per test phase, so a
test lasts the same in every run, worker and shard, and durations compare byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forked_pytest import Session, start_pytest, user_env

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
            return {"branchy": Branchy(), "looping": Looping(), "relu": torch.nn.ReLU(), "tanh": Branchy()}.get(
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


def _entry(name: str, category: str) -> dict[str, str]:
    model = "splitreg.Branchy" if name != "looping" else "splitreg.Looping"
    return {"nodeid": f"zoo/splitreg:REGISTRY::{name}", "backend": "fx", "model": model, "status": "untraceable",
            "category": category}  # fmt: skip


# the baseline the runs start from: branchy fails as it says, looping's category changed,
# fixed passes now, retired is no longer in the registry; tanh fails with no entry
INITIAL = json.dumps({"version": 1, "entries": [
    _entry("branchy", "control-flow"), _entry("fixed", "control-flow"), _entry("looping", "control-flow"),
    _entry("retired", "control-flow"),
]})  # fmt: skip


def _env(project: Path) -> dict[str, str]:
    """The user's environment, without this suite's own pytest and CI variables; the
    project's registry importable from every process (xdist's workers included)."""
    return user_env(PYTHONPATH=os.pathsep.join(p for p in (str(project), os.environ.get("PYTHONPATH", "")) if p))


def _start(project: Path, *args: str) -> Session:
    return start_pytest(["-p", "no:cacheprovider", ZOO, *args], cwd=project, env=_env(project))


def _finish(session: Session) -> str:
    done = session.wait(600)
    return done.stdout + done.stderr


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


# the tests of the module's runs share them: one xdist worker runs them, once, under --dist
# loadgroup (tox's)
shared = pytest.mark.xdist_group(__name__)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    project = tmp_path_factory.mktemp("split")
    (project / "splitreg.py").write_text(REGISTRY)
    (project / "conftest.py").write_text(CONFTEST)
    (project / "pytest.ini").write_text("[pytest]\n")
    for name in ("whole", "shared", "gating", "from-updates", "from-gates", "elsewhere"):
        (project / f"{name}.baseline.json").write_text(INITIAL)
    (project / "elsewhere.baseline.json").write_text('{"version": 1, "entries": []}')
    outputs = {}
    # the unsharded run: the report, pytest-split's own durations of the same run, the baseline
    outputs["whole"] = _finish(
        _start(
            project, "-n", "2", "--fx-report=whole.json", "--store-durations", "--durations-path=split.durations",
            "--fx-baseline=whole.baseline.json", "--fx-baseline-update",
        )
    )  # fmt: skip
    # the durations the next CI run splits by, from that run's report
    first = _merge(project, "whole.json", "--durations", "whole.durations")
    outputs["merge-whole"] = first.stdout + first.stderr
    split = ("-p", "no:xdist", "--splits=2", "--durations-path=whole.durations")
    shards = {}
    for group in ("1", "2"):  # all four at once: two update one file, two gate
        shards[f"shard{group}"] = _start(
            project, *split, f"--group={group}", f"--fx-report=shard{group}.json",
            "--fx-baseline=shared.baseline.json", "--fx-baseline-update",
        )  # fmt: skip
        shards[f"gate{group}"] = _start(
            project, *split, f"--group={group}", f"--fx-report=gate{group}.json", "--fx-baseline=gating.baseline.json"
        )
    for name, proc in shards.items():
        outputs[name] = _finish(proc)
    merges = {
        "merge": ("shard1.json", "shard2.json", "--durations", "merged.durations"),
        "merge-updates": ("shard1.json", "shard2.json", "--baseline", "from-updates.baseline.json"),
        "merge-gates": ("gate1.json", "gate2.json", "--baseline", "from-gates.baseline.json"),
        "merge-elsewhere": ("gate1.json", "gate2.json", "--baseline", "elsewhere.baseline.json"),
    }
    for name, args in merges.items():
        merged = _merge(project, *args)
        outputs[name] = merged.stdout + merged.stderr
        outputs[f"{name}-exit"] = str(merged.returncode)
    return Runs(project, outputs)


@shared
def test_durations_from_the_report_are_the_bytes_pytest_split_stores(runs):
    assert (runs.project / "whole.durations").read_bytes() == (runs.project / "split.durations").read_bytes(), (
        runs.outputs["whole"] + runs.outputs["merge-whole"]
    )
    durations = json.loads(runs.read("whole.durations"))
    assert sorted(durations) == [f"zoo/splitreg:REGISTRY::{name}" for name in NAMES]
    assert len(set(durations.values())) > 1  # the clock gives tests different costs


@shared
def test_pytest_split_splits_the_zoo_by_the_durations_written(runs):
    durations = json.loads(runs.read("whole.durations"))
    shards = [runs.nodeids("shard1.json"), runs.nodeids("shard2.json")]
    assert all(shards), runs.outputs
    assert sorted(shards[0] + shards[1]) == sorted(durations)  # every model once
    for group, nodeids in zip(("1", "2"), shards, strict=True):
        estimate = sum(durations[n] for n in nodeids)
        assert f"Running group {group}/2 (estimated duration: {estimate:.2f}s)" in runs.outputs[f"shard{group}"]


@shared
def test_merged_shards_give_the_durations_of_one_unsharded_run(runs):
    assert runs.outputs["merge"].splitlines()[-1].startswith("durations: wrote merged.durations (6 tests)")
    assert (runs.project / "merged.durations").read_bytes() == (runs.project / "split.durations").read_bytes()


@shared
def test_durations_keep_the_entries_of_tests_the_reports_do_not_hold(runs, tmp_path):
    previous = tmp_path / ".test_durations"
    previous.write_text(json.dumps({"tests/test_other.py::test_slow": 12.5, "zoo/splitreg:REGISTRY::relu": 99.0}))
    proc = _merge(runs.project, "shard1.json", "shard2.json", "--durations", str(previous))
    assert proc.returncode in (0, 1), proc.stderr
    written = json.loads(previous.read_text())
    assert written["tests/test_other.py::test_slow"] == 12.5
    assert written["zoo/splitreg:REGISTRY::relu"] == json.loads(runs.read("split.durations"))["zoo/splitreg:REGISTRY::relu"]


@shared
def test_a_durations_file_that_is_not_pytest_splits_is_refused(runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('["not", "pairs"]')
    proc = _merge(runs.project, "shard1.json", "--durations", str(bad))
    assert proc.returncode == 2
    assert f"--durations {bad}: not a pytest-split durations file" in proc.stderr
    assert bad.read_text() == '["not", "pairs"]'


def _entries(runs: Runs, name: str) -> list[tuple[str, str | None]]:
    document = json.loads(runs.read(f"{name}.baseline.json"))
    return [(e["nodeid"].rpartition("::")[2], e["category"]) for e in document["entries"]]


@shared
def test_the_unsharded_update_writes_the_reference_baseline(runs):
    assert _entries(runs, "whole") == [
        ("branchy", "control-flow"), ("looping", "iteration"), ("retired", "control-flow"), ("tanh", "control-flow"),
    ], runs.outputs["whole"]  # fmt: skip


@shared
def test_shards_updating_one_baseline_at_once_write_the_unsharded_bytes(runs):
    assert runs.read("shared.baseline.json") == runs.read("whole.baseline.json"), (
        runs.outputs["shard1"] + runs.outputs["shard2"]
    )


@shared
def test_merging_the_shards_updates_gives_the_unsharded_baseline(runs):
    assert runs.read("from-updates.baseline.json") == runs.read("whole.baseline.json"), runs.outputs["merge-updates"]
    assert runs.outputs["merge-updates"].splitlines()[-1] == (
        "baseline: wrote from-updates.baseline.json (4 entries, 2 added, 2 removed)"
    )


@shared
def test_merging_gating_shards_gives_the_unsharded_baseline(runs):
    """Shards that gate on the baseline (a nightly run) report a baselined failure as
    xfailed; the merge takes its status from the entry that judged it."""
    gated = {r["nodeid"].rpartition("::")[2]: r for r in json.loads(runs.read("gate1.json"))["results"]}
    gated.update({r["nodeid"].rpartition("::")[2]: r for r in json.loads(runs.read("gate2.json"))["results"]})
    assert (gated["branchy"]["status"], gated["branchy"].get("baselined")) == ("xfailed", True)
    assert "baselined" not in gated["linear"]
    assert runs.read("from-gates.baseline.json") == runs.read("whole.baseline.json"), runs.outputs["merge-gates"]


@shared
def test_a_baseline_that_did_not_judge_the_shards_is_refused(runs):
    assert runs.outputs["merge-elsewhere-exit"] == "2"
    assert (
        "pytest-fxtrace merge: --baseline elsewhere.baseline.json: zoo/splitreg:REGISTRY::branchy [fx] was judged "
        "by a baseline entry this file does not hold: give the baseline the run judged it by (its --fx-baseline)"
    ) in runs.outputs["merge-elsewhere"]
    assert runs.read("elsewhere.baseline.json") == '{"version": 1, "entries": []}'  # not written


@pytest.mark.parametrize(
    ("variables", "group"),
    [
        pytest.param({"JOB_COMPLETION_INDEX": "{i}"}, "$((JOB_COMPLETION_INDEX + 1))", id="kubernetes-indexed-job"),
        pytest.param({"CI_NODE_INDEX": "{n}", "CI_NODE_TOTAL": "3"}, "$CI_NODE_INDEX", id="gitlab-parallel"),
    ],
)
def test_a_shard_index_from_the_environment_splits_the_zoo_as_docs_zoo_md_says(tmp_path: Path, variables, group):
    """The shell lines of docs/zoo.md ("The shard index from an environment variable"): the
    shards the runner's variables name hold every model once. The shell reads each line as
    written (its ``python`` a function that prints the arguments it was given); each shard
    is then that ``python -m pytest`` session, the three side by side."""
    (tmp_path / "splitreg.py").write_text(REGISTRY)
    line = f"python -m pytest -p no:cacheprovider --fx-zoo=splitreg:REGISTRY --collect-only -q --splits=3 --group={group}"
    sessions = []
    for index in range(3):
        env = user_env(PYTHONPATH=str(tmp_path), **{k: v.format(i=index, n=index + 1) for k, v in variables.items()})
        script = 'python() { printf "%s\\n" "$@"; }\n' + line
        done = subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        argv = done.stdout.splitlines()
        assert argv[:2] == ["-m", "pytest"], (done.stdout, done.stderr)
        sessions.append(start_pytest(argv[2:], cwd=tmp_path, env=env))
    outputs = [session.wait(600) for session in sessions]
    shards = [[row for row in done.stdout.splitlines() if row.startswith("zoo/")] for done in outputs]
    names = sorted(nodeid.rpartition("::")[2] for shard in shards for nodeid in shard)
    assert names == ["branchy", "fixed", "linear", "looping", "relu", "tanh"], [d.stdout + d.stderr for d in outputs]
    assert all(shards), shards  # each shard got its share
