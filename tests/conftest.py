import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked_pytest import run_pytest

HERE = Path(__file__).parent
pytest_plugins = ["browser"]  # browser_page: one headless chromium per test process


@pytest.fixture
def pytester(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> pytest.Pytester:
    """pytest's ``pytester``, whose ``runpytest_subprocess`` forks its session from a process
    that has imported torch already (tests/forked_pytest.py) instead of starting a Python:
    the same arguments, directory, environment and ``--basetemp``, and a process of its own.
    A test marked ``fresh_process`` gets a real ``python -m pytest``."""
    fresh = request.node.get_closest_marker("fresh_process") is not None
    runs = iter(range(1_000_000))

    def runpytest_subprocess(*args: str | os.PathLike[str], timeout: float | None = None) -> pytest.RunResult:
        __tracebackhide__ = True
        basetemp = pytester.path / f"runpytest-{next(runs)}"
        basetemp.mkdir(mode=0o700)
        argv = [f"--basetemp={basetemp}", *map(os.fspath, args)]
        for plugin in reversed(pytester.plugins):
            argv = ["-p", str(plugin), *argv]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
        print("running: python -m pytest", *argv, "\n     in:", os.getcwd())
        try:
            done = run_pytest(argv, cwd=os.getcwd(), env=env, timeout=timeout, fresh=fresh)
        except subprocess.TimeoutExpired as expired:
            raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: python -m pytest {argv}") from expired
        print(done.stdout, done.stderr, sep="\n")
        return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), done.duration)

    pytester.runpytest_subprocess = runpytest_subprocess  # type: ignore[method-assign]
    return pytester


@pytest.fixture
def models_source() -> str:
    """Source of tests/models.py, for writing into a pytester directory."""
    return (HERE / "models.py").read_text()


@pytest.fixture
def user_project(pytester: pytest.Pytester, models_source: str) -> pytest.Pytester:
    """A pytester directory holding the tiny models as the user's own ``models.py``."""
    pytester.makepyfile(models=models_source)
    pytester.syspathinsert()
    return pytester


# The modules that test pytest-side machinery (sessions, files, xdist, reports, sharding,
# isolation, start-up) through pytester sessions whose outcome does not depend on torch's
# version. They are marked ``plumbing``: the tests environment (newest torch and pytest) and
# tests-torch21 (the oldest torch, pytest and pluggy) run them; tests-torch213 (a torch
# between, same pytest as the newest) runs everything else, so the matrix does not pay for
# the same pytest sessions a third time. Engine, backend and diagnosis tests run everywhere.
PLUMBING = {
    "test_browser_plugin",
    "test_baseline",
    "test_hardening_session",
    "test_hooks",
    "test_html_session",
    "test_isolate",
    "test_journal",
    "test_report_session",
    "test_shard",
    "test_snapshot_cycle",
    "test_snapshot_faults",
    "test_snapshot_plugin",
    "test_split",
    "test_startup",
    "test_xdist",
    "test_zoo",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if getattr(getattr(item, "module", None), "__name__", None) in PLUMBING:
            item.add_marker(pytest.mark.plumbing)


class XdistGroupIds:
    """pytest-xdist's ``--dist loadgroup`` (tox's) puts a test's xdist_group into its node id
    (``test_m.py::test_x@test_m``) by writing ``item._nodeid``, which pytest >= 9.2 no longer
    reads (it reads ``item._id``): the groups are lost, every test is dealt alone, and a
    module's shared pytest sessions (tests/shared_project.py) run once per worker
    (pytest-dev/pytest-xdist#1386). On a worker, after xdist's hook, the id it wrote becomes
    the id pytest reads; with an older pytest (or no loadgroup) nothing changes."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            written = item.__dict__.get("_nodeid")
            node_id = getattr(item, "_id", None)
            if written and node_id is not None and written != item.nodeid:
                item._id = type(node_id).parse(written)


def pytest_configure(config: pytest.Config) -> None:
    sys.path.insert(0, str(HERE))
    config.pluginmanager.register(XdistGroupIds(), "fxtrace-tests-xdist-group-ids")


def pytest_sessionstart(session: pytest.Session) -> None:
    # the sessions these tests start (pytester, subprocesses) would append their step
    # summaries to the one of the CI job running this suite; tests that check the step
    # summary give their sessions a file of their own
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
