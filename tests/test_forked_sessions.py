"""The suite's forked pytest sessions (tests/forked_pytest.py) see what a fresh
``python -m pytest`` in their directory sees, and nothing of each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked_pytest import _shadows_a_preload, _starts_differently, run_pytest, start_pytest

PROBE = """
import json, os, random, sys
import torch

LEFT_BEHIND = []

def test_probe():
    LEFT_BEHIND.append(1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a change to torch's global state, which the next must not see
    probe = {
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "path": sys.path[:3],
        "argv0": sys.argv[0],
        "random": random.random(),
        "marker": os.environ.get("FORK_PROBE"),
        "threads": threads,
        "leftover": sys.modules.get("leftover_of_the_last") is not None,
        "stdin": sys.__stdin__.read() if sys.__stdin__ else None,
    }
    import types
    sys.modules["leftover_of_the_last"] = types.ModuleType("leftover_of_the_last")
    with open(os.environ["FORK_PROBE_OUT"], "w") as out:
        json.dump(probe, out)
    print("probe printed")
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    root = tmp_path_factory.mktemp("forked")
    project, lib = root / "project", root / "lib"
    project.mkdir()
    lib.mkdir()
    (project / "test_probe.py").write_text(PROBE)
    found = []
    for run in range(2):
        out = root / f"probe{run}.json"
        env = {**os.environ, "FORK_PROBE": str(run), "FORK_PROBE_OUT": str(out), "PYTHONPATH": str(lib)}
        done = run_pytest(["-p", "no:cacheprovider", "-p", "no:xdist", "-s", "test_probe.py"], cwd=project, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "probe printed" in done.stdout
        found.append({**json.loads(out.read_text()), "project": str(project), "lib": str(lib)})
    return found


def test_a_session_sees_its_directory_environment_and_arguments_as_a_fresh_process(probes: list[dict]) -> None:
    for run, probe in enumerate(probes):
        assert probe["cwd"] == probe["project"]
        assert probe["path"][:2] == [probe["project"], probe["lib"]]  # as `python -m pytest` with PYTHONPATH
        assert probe["argv0"].endswith(os.path.join("pytest", "__main__.py"))
        assert probe["marker"] == str(run)
        assert probe["stdin"] == ""


def test_sessions_are_processes_of_their_own_that_share_nothing(probes: list[dict]) -> None:
    first, second = probes
    assert first["pid"] != second["pid"] != os.getpid()
    assert not second["leftover"]  # the first session's module is not in the second's process
    assert second["threads"] == first["threads"]  # the first one's torch.set_num_threads(1) is not seen
    assert first["random"] != second["random"]  # each draws its own seed, as a fresh process


def test_a_start_up_variable_makes_a_real_process() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/a"}
    assert _starts_differently({**base, "PYTHONPATH": "/b"}, base) is None  # set up by the fork itself
    assert _starts_differently({**base, "FXTRACE_X": "1"}, base) is None  # read at run time
    assert _starts_differently({**base, "PYTHONHASHSEED": "0"}, base) == "PYTHONHASHSEED"
    assert _starts_differently({**base, "OMP_NUM_THREADS": "1"}, base) == "OMP_NUM_THREADS"


def test_a_session_past_its_time_limit_is_killed_with_its_workers(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hang():\n    time.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_pytest(["-p", "no:cacheprovider", "-p", "no:xdist", "test_hang.py"], cwd=tmp_path, timeout=2)
    # the next session runs at once: the zygote was not left waiting for the hung one
    (tmp_path / "test_hang.py").write_text("def test_quick():\n    pass\n")
    done = run_pytest(["-p", "no:cacheprovider", "-p", "no:xdist", "test_hang.py"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout


AT_EXIT = """
import atexit, os, threading, time

def test_leaves_a_thread_and_an_exit_handler_behind():
    out = os.environ["FORK_AT_EXIT_OUT"]
    def finish():
        time.sleep(0.5)
        with open(out, "a") as file:
            file.write("thread joined;")
    threading.Thread(target=finish).start()  # not a daemon: Python waits for it as it exits
    atexit.register(lambda: open(out, "a").write("exit handler;"))
    assert False
"""


def test_a_session_ends_as_a_fresh_process_exits(tmp_path: Path) -> None:
    # the interpreter's own exit: a thread the session left running is joined, then the exit
    # handlers run, and the process exits with pytest's status
    (tmp_path / "test_at_exit.py").write_text(AT_EXIT)
    out = tmp_path / "at_exit.txt"
    env = {**os.environ, "FORK_AT_EXIT_OUT": str(out)}
    done = run_pytest(["-p", "no:cacheprovider", "-p", "no:xdist", "test_at_exit.py"], cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert out.read_text() == "thread joined;exit handler;"


ORIG_ARGV = """
import sys

def test_how_started():
    print("started as", sys.orig_argv[1:3])
"""


@pytest.mark.skipif(os.environ.get("FXTRACE_TESTS_SUBPROCESS") == "1", reason="FXTRACE_TESTS_SUBPROCESS=1 starts every session")
def test_pytester_sessions_are_forked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_o=ORIG_ARGV)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-s")
    result.stdout.fnmatch_lines(["*started as*forked_pytest.py', '--serve'*"])


@pytest.mark.fresh_process
def test_a_test_marked_fresh_process_gets_a_real_python_m_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_o=ORIG_ARGV)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-s")
    result.stdout.fnmatch_lines(["*started as ['-m', 'pytest']*"])


def test_a_module_shadowing_a_preloaded_one_makes_a_real_process(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    assert _shadows_a_preload(str(tmp_path), {"PYTHONPATH": str(fake)}) == str(fake / "torch")
    assert _shadows_a_preload(str(tmp_path), {"PYTHONPATH": str(tmp_path / "elsewhere")}) is None
    (tmp_path / "timm.py").write_text("")
    assert _shadows_a_preload(str(tmp_path), {}) == str(tmp_path / "timm")


WORKER_PROBE = """
import json, os, random, sys

def probe(name):
    with open(os.path.join(os.environ["FORK_PROBE_OUT"], name + "-" + str(os.getpid()) + ".json"), "w") as out:
        json.dump({
            "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            "forked": "--serve" in sys.orig_argv,
            "cwd": os.getcwd(),
            "path0": sys.path[0],
            "on_pythonpath": os.environ["FORK_PROBE_PATH"] in sys.path,
            "marker": os.environ.get("FORK_PROBE"),
            "random": random.random(),
        }, out)

def test_one():
    probe("one")

def test_two():
    probe("two")
"""

# a session that sets a start-up variable before pytest-xdist starts its workers
STARTUP_CONFTEST = """
import os

def pytest_configure(config):
    os.environ["OMP_NUM_THREADS"] = "1"
"""


def _worker_probes(root: Path, conftest: str | None) -> list[dict]:
    project, out = root / "project", root / "out"
    project.mkdir()
    out.mkdir()
    (project / "test_probe.py").write_text(WORKER_PROBE)
    if conftest:
        (project / "conftest.py").write_text(conftest)
    extra = root / "on-pythonpath"
    extra.mkdir()
    pythonpath = os.pathsep.join(filter(None, [str(extra), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "FORK_PROBE": "w", "FORK_PROBE_OUT": str(out), "FORK_PROBE_PATH": str(extra), "PYTHONPATH": pythonpath}
    done = run_pytest(["-p", "no:cacheprovider", "-n", "2", "--dist", "each", "test_probe.py"], cwd=project, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # the zygote imported the entry-point plugins through pytest's import hook, as a started
    # session does: none "already imported so cannot be rewritten"
    assert "cannot be rewritten" not in done.stdout + done.stderr, done.stdout + done.stderr
    return [{**json.loads(path.read_text()), "project": str(project)} for path in sorted(out.iterdir())]


@pytest.mark.skipif(os.environ.get("FXTRACE_TESTS_SUBPROCESS") == "1", reason="FXTRACE_TESTS_SUBPROCESS=1 starts every session")
def test_the_xdist_workers_of_a_session_are_forked_and_see_what_started_ones_see(tmp_path: Path) -> None:
    probes = _worker_probes(tmp_path, None)
    assert sorted(probe["worker"] for probe in probes) == ["gw0", "gw0", "gw1", "gw1"]  # --dist each
    for probe in probes:
        assert probe["forked"], probe
        # as a started worker: the session's directory (xdist puts its rootdir first), its
        # environment, its PYTHONPATH on sys.path (pytest-xdist passes on its own copy)
        assert probe["cwd"] == probe["path0"] == probe["project"]
        assert probe["marker"] == "w" and probe["on_pythonpath"], probe
    by_worker = {probe["worker"]: probe["random"] for probe in probes if probe["worker"]}
    assert by_worker["gw0"] != by_worker["gw1"]  # each its own random stream


def test_a_worker_whose_session_changed_a_start_up_variable_is_started(tmp_path: Path) -> None:
    probes = _worker_probes(tmp_path, STARTUP_CONFTEST)
    assert len(probes) == 4
    assert not any(probe["forked"] for probe in probes)  # OMP_NUM_THREADS is read when torch starts


MEET = """
import os, time

def test_meet():
    me, other = os.environ["MEET_ME"], os.environ["MEET_OTHER"]
    open(me, "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(other):  # only if the other session runs at the same time
        assert time.monotonic() < deadline, "the other session never started"
        time.sleep(0.05)
"""


def test_sessions_started_side_by_side_run_at_the_same_time(tmp_path: Path) -> None:
    (tmp_path / "test_meet.py").write_text(MEET)
    sessions = [
        start_pytest(
            ["-p", "no:cacheprovider", "-p", "no:xdist", "test_meet.py"], cwd=tmp_path,
            env={**os.environ, "MEET_ME": str(tmp_path / me), "MEET_OTHER": str(tmp_path / other)},
        )
        for me, other in (("a", "b"), ("b", "a"))
    ]
    for done in [session.wait(180) for session in sessions]:
        assert done.returncode == 0, done.stdout + done.stderr


ONE_THREAD = """
import sys, threading, time
sys.path.insert(0, {tests!r})
import forked_pytest
if {started}:
    threading.Thread(target=time.sleep, args=(30,), name="a-pool-thread", daemon=True).start()
forked_pytest._only_thread()
print("forks")
"""


@pytest.mark.parametrize("started", [False, True], ids=["one-thread", "a-second-thread"])
def test_the_zygote_refuses_to_fork_with_a_second_thread_alive(started: bool) -> None:
    code = ONE_THREAD.format(tests=str(Path(__file__).parent), started=started)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if not started:
        assert (done.returncode, done.stdout) == (0, "forks\n"), done.stderr
    else:
        assert done.returncode == 1
        assert "RuntimeError: the zygote has 2 threads, so it cannot fork safely" in done.stderr
        assert "a-pool-thread" in done.stderr
