"""--fx-journal and --fx-resume: a zoo run killed at a random moment (SIGKILL, as a CI time
limit or the OOM killer kills a job) keeps what it finished; resumed, it checks only the rest,
and its report is the uninterrupted run's. ``python -m pytest_fxtrace.merge`` reads a journal."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import textwrap
import time
from pathlib import Path

import pytest
from forked_pytest import Session, start_pytest

from pytest_fxtrace.report.journal import Entry, JournalWriter, read_journal
from pytest_fxtrace.report.merge import main as merge_main
from pytest_fxtrace.report.records import CheckRecord

# eight small models; "sleeper" holds its worker a few seconds in the run to kill (while the
# file "hold" is beside the registry), so the kill lands mid-run; each build is logged
# (O_APPEND, from whichever process builds: an isolated child here)
REGISTRY = textwrap.dedent(
    """
    import time
    from pathlib import Path

    import torch

    LOG = Path(__file__).with_name("builds.log")


    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x


    class Registry:
        def names(self):
            return ["a", "sleeper", "b", "branchy", "c", "d", "e", "f"]

        def build(self, name):
            with LOG.open("a") as log:
                log.write(name + "\\n")
            if name == "sleeper" and LOG.with_name("hold").exists():
                time.sleep(4)
            return Branchy() if name == "branchy" else torch.nn.Linear(3, 3)

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)
ZOO = "--fx-zoo=jreg:REGISTRY"


def _report(path: Path) -> dict:
    """A report with its timings (trace seconds, each test's duration) left out."""
    document = json.loads(path.read_text())
    for record in document["results"]:
        record.pop("trace_seconds")
    document["durations"] = sorted(document.get("durations", {}))
    return document


def _builds(path: Path) -> list[str]:
    log = path / "builds.log"
    return log.read_text().split() if log.exists() else []


def _journalled(path: Path) -> set[str]:
    entries, _ = read_journal(path)
    return {entry.nodeid.rpartition("::")[2] for entry in entries}


def _start(project: Path, *args: str) -> Session:
    """``python -m pytest ZOO -n 2 --fx-isolate *args`` under way in ``project`` (its own
    process group, the workers in it), the registry importable from every process."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(project), os.environ.get("PYTHONPATH")]))
    )
    env.pop("PYTEST_ADDOPTS", None)
    args = ("-p", "no:cacheprovider", f"--basetemp={project / 'basetemp'}", ZOO, "-n", "2", "--fx-isolate", *args)
    return start_pytest(list(args), cwd=project, env=env)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie not yet waited for)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


def _kill_at_random(project: Path, run: Session, seed: int) -> tuple[set[str], list[str]]:
    """SIGKILL the process group of ``run`` (journalling to ``project``'s j.jsonl) a random
    moment after the first test is journalled; what the journal held then, and the builds."""
    journal = project / "j.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not _ended(run.pid):
            if journal.exists() and len(journal.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        time.sleep(random.Random(seed).uniform(0.0, 2.0))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    time.sleep(2)  # a job an isolated child (a session of its own) took just before the kill is logged
    return _journalled(journal), _builds(project)


@pytest.mark.slow
def test_a_zoo_run_killed_at_a_random_moment_resumes_to_the_uninterrupted_run_s_report(pytester) -> None:
    # the uninterrupted run, in a folder of its own, runs while the run to kill does: each
    # spends most of its time waiting (children starting, the kill). Only the run to kill
    # holds the sleeper (a report leaves timings out: the runs' reports compare all the same)
    uninterrupted = pytester.mkdir("uninterrupted")
    for project in (pytester.path, uninterrupted):
        (project / "jreg.py").write_text(REGISTRY)
    pytester.syspathinsert()
    full_run = _start(uninterrupted, "--fx-report=full.json")
    (pytester.path / "hold").touch()
    killed_run = _start(pytester.path, "--fx-journal=j.jsonl", "--fx-report=killed.json")

    seed = random.randrange(2**32)
    print(f"kill seed: {seed}")
    try:
        done, killed_builds = _kill_at_random(pytester.path, killed_run, seed)
    finally:
        finished = full_run.wait(600)
    full = pytest.RunResult(finished.returncode, finished.stdout.splitlines(), finished.stderr.splitlines(), finished.duration)
    full.assert_outcomes(passed=7, failed=1)
    assert not (pytester.path / "killed.json").exists()  # nothing but the journal survives a kill
    (pytester.path / "hold").unlink()
    resumed = pytester.runpytest_subprocess(
        ZOO, "-n", "2", "--fx-isolate", "--fx-journal=j.jsonl", "--fx-resume", "--fx-report=resumed.json"
    )
    assert resumed.ret == 1  # branchy failed, in this run or the killed one
    assert _report(pytester.path / "resumed.json") == _report(uninterrupted / "full.json"), seed
    resumed_builds = _builds(pytester.path)[len(killed_builds) :]
    # the journal's models are not checked again; the rest are, each once; the models
    # checked twice are those in flight at the kill (started, not journalled)
    assert not done & set(resumed_builds), (seed, done, resumed_builds)
    assert sorted(resumed_builds) == sorted(set(REGISTRY_NAMES) - done), seed
    twice = set(killed_builds) & set(resumed_builds)
    print(f"journalled at the kill: {sorted(done)}; checked twice: {sorted(twice)}")
    assert twice == set(killed_builds) - done, seed
    assert len(twice) <= 4, (seed, twice)  # per worker: its model, and one whose report was on its way
    resumed.stdout.fnmatch_lines(
        [f"*--fx-resume kept {len(done)} tests' records from it without running them*"]
    )
    # the journal now holds the whole run: merged, it is the uninterrupted run's report merged
    merged = {"j.jsonl": pytester.path / "j.jsonl", "full.json": uninterrupted / "full.json"}
    for name, path in merged.items():
        assert merge_main([str(path), "-o", str(pytester.path / f"merged-{name}.json")]) == 1
    assert _report(pytester.path / "merged-j.jsonl.json") == _report(pytester.path / "merged-full.json.json")


REGISTRY_NAMES = ("a", "sleeper", "b", "branchy", "c", "d", "e", "f")

QUICK = textwrap.dedent(
    """
    import torch


    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x


    class Registry:
        def names(self):
            return ["a", "branchy", "c"]

        def build(self, name):
            return Branchy() if name == "branchy" else torch.nn.Linear(3, 3)

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)


def test_resume_deselects_the_journal_s_tests_and_keeps_their_failures_in_report_and_exit_status(
    pytester,
) -> None:
    pytester.makepyfile(qreg=QUICK)
    pytester.syspathinsert()
    zoo = "--fx-zoo=qreg:REGISTRY"
    first = pytester.runpytest_subprocess(
        zoo, "-p", "no:xdist", "--fx-journal=j.jsonl", "--fx-report=full.json", "-k", "branchy"
    )
    first.assert_outcomes(failed=1, deselected=2)
    first.stdout.fnmatch_lines(["fxtrace journal: *j.jsonl (1 tests appended)"])
    resumed = pytester.runpytest_subprocess(
        zoo, "-p", "no:xdist", "--fx-journal=j.jsonl", "--fx-resume", "--fx-report=r.json"
    )
    resumed.assert_outcomes(passed=2, deselected=1)
    assert resumed.ret == 1  # the journal's failure fails the resumed run, as it failed the whole one
    resumed.stdout.fnmatch_lines(["3 checks: 2 passed, 1 untraceable"])
    statuses = {
        r["nodeid"].rpartition("::")[2]: r["status"]
        for r in json.loads((pytester.path / "r.json").read_text())["results"]
    }
    assert statuses == {"a": "passed", "branchy": "untraceable", "c": "passed"}
    again = pytester.runpytest_subprocess(zoo, "-p", "no:xdist", "--fx-journal=j.jsonl", "--fx-resume")
    again.assert_outcomes(deselected=3)  # everything is done: nothing runs, the verdict stands
    assert again.ret == 1


def test_resume_without_a_journal_yet_runs_everything_and_without_the_option_is_a_usage_error(
    pytester,
) -> None:
    pytester.makepyfile(qreg=QUICK)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("--fx-zoo=qreg:REGISTRY", "-p", "no:xdist", "--fx-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-resume needs the journal to resume from: --fx-journal=PATH*"])
    result = pytester.runpytest_subprocess(
        "--fx-zoo=qreg:REGISTRY", "-p", "no:xdist", "--fx-resume", "--fx-journal=new/j.jsonl"
    )
    result.assert_outcomes(passed=2, failed=1)
    assert _journalled(pytester.path / "new" / "j.jsonl") == {"a", "branchy", "c"}


def _record(nodeid: str, status: str = "passed") -> CheckRecord:
    return CheckRecord(nodeid=nodeid, model="torch.nn.Linear", status=status, order=(int(nodeid[-1]), 0))


def test_a_journal_cut_short_by_a_kill_reads_up_to_its_last_whole_line_and_merges(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "j.jsonl"
    journal = JournalWriter(path, append=False)
    journal.write(Entry("zoo/r::m1", (_record("zoo/r::m1"),), 1.5, "2.14.1"))
    journal.write(Entry("zoo/r::m0", (_record("zoo/r::m0", "untraceable"),), 0.5, "2.14.1"))
    journal.close()
    with path.open("a") as f:
        f.write(Entry("zoo/r::m2", (_record("zoo/r::m2"),), 0.1, "2.14.1").line()[:40])  # killed mid-write
    entries, torn = read_journal(path)
    assert ([e.nodeid for e in entries], torn) == (["zoo/r::m1", "zoo/r::m0"], 1)
    assert entries[0].records[0] == _record("zoo/r::m1")
    assert merge_main([str(path), "-o", str(tmp_path / "m.json")]) == 1  # m0 failed
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [r["nodeid"] for r in merged["results"]] == ["zoo/r::m0", "zoo/r::m1"]
    assert merged["torch"] == "2.14.1" and merged["durations"] == {"zoo/r::m0": 0.5, "zoo/r::m1": 1.5}
    assert "ignored 1 line cut short" in capsys.readouterr().err
    # appending (a resumed run) keeps the header and the lines; a file that is no journal is refused
    again = JournalWriter(path, append=True)
    again.write(Entry("zoo/r::m2", (_record("zoo/r::m2"),), 0.1, "2.14.1"))
    again.close()
    assert path.read_text().count('"fxtrace_journal"') == 1
    assert [e.nodeid for e in read_journal(path)[0]] == ["zoo/r::m1", "zoo/r::m0", "zoo/r::m2"]
    (tmp_path / "x.jsonl").write_text('{"nodeid": "a"}\n')
    assert merge_main([str(tmp_path / "x.jsonl")]) == 2
