"""A project directory that the tests of one module share, so that a pytest session they all
read runs once: a module-scoped fixture writes the project and runs its sessions, and each
test asserts one behaviour on their results.

Every session still runs as ``pytester.runpytest_subprocess`` runs it (a fresh
``python -m pytest`` in the project directory, the project on ``PYTHONPATH``, a basetemp of
its own, no ``PYTEST_ADDOPTS``, no colours), because the checks import torch: what a session
does to a process is never seen by the next. It saves the sessions, not the isolation; and
each session's process is forked from one that has imported torch already
(tests/forked_pytest.py), so it no longer pays a Python start and the imports either.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
from forked_pytest import run_pytest


class SharedProject:
    """A pytester-like directory (``makepyfile``, ``makeini``, ``runpytest_subprocess``) that
    lives for a module's tests."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self._runs = 0

    def makepyfile(self, **files: str) -> None:
        for name, text in files.items():
            (self.path / f"{name}.py").write_text(textwrap.dedent(text).lstrip("\n"))

    def makefile(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    def makeini(self, text: str) -> None:
        self.makefile("tox.ini", text)

    def makeconftest(self, text: str) -> None:
        self.makefile("conftest.py", text)

    def runpytest_subprocess(self, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> pytest.RunResult:
        self._runs += 1
        basetemp = self.path / f"runpytest-{self._runs}"
        environ = {key: value for key, value in os.environ.items() if key not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR")}
        environ.update(PY_COLORS="0", PYTHONPATH=os.pathsep.join(filter(None, [str(self.path), os.environ.get("PYTHONPATH")])))
        environ.update(env or {})
        done = run_pytest([f"--basetemp={basetemp}", *args], cwd=self.path, env=environ, timeout=timeout)
        return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), done.duration)


def outcomes(result: pytest.RunResult, *, nodeids: bool = False) -> dict[str, str]:
    """Each test's outcome by its name (``test_x``; its node id with ``nodeids``), from the -rA
    short summary (``PASSED test_m.py::test_x``): the tests of a shared session each read theirs."""
    words = ("PASSED", "FAILED", "XFAIL", "XPASS", "ERROR", "SKIPPED")
    found = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word in words and "::" in rest:
            nodeid = rest.split(" - ")[0]
            found[nodeid if nodeids else nodeid.split("::")[-1]] = word
    return found


def section(result: pytest.RunResult, test: str) -> str:
    """The failure section pytest printed for ``test`` (its heading names the test)."""
    output = "\n".join(result.outlines) + "\n"
    match = re.search(rf"^_+ {re.escape(test)} _+\n(.*?)(?=^_{{3,}} |^=+ )", output, re.M | re.S)
    assert match, f"no failure section for {test} in:\n{output}"
    return match.group(1)
