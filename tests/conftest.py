import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


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
    "test_baseline",
    "test_hardening_session",
    "test_hooks",
    "test_html_session",
    "test_isolate",
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


def pytest_configure(config: pytest.Config) -> None:
    sys.path.insert(0, str(HERE))


def pytest_sessionstart(session: pytest.Session) -> None:
    # the sessions these tests start (pytester, subprocesses) would append their step
    # summaries to the one of the CI job running this suite; tests that check the step
    # summary give their sessions a file of their own
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
