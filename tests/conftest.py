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


def pytest_configure(config: pytest.Config) -> None:
    sys.path.insert(0, str(HERE))


def pytest_sessionstart(session: pytest.Session) -> None:
    # the sessions these tests start (pytester, subprocesses) would append their step
    # summaries to the one of the CI job running this suite; tests that check the step
    # summary give their sessions a file of their own
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
