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
