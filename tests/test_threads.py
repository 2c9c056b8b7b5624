"""Zoo items checked in pytest's own processes under ``-n N`` take their share of the CPUs
as torch's thread count, as the isolated children do, and put torch's count back after;
the user's own setting (``OMP_NUM_THREADS``, ``torch.set_num_threads``) wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pytest_fxtrace.zoo.threads import cpu_share, torch_defaults

# the thread counts torch starts with are what this module checks: real processes
pytestmark = pytest.mark.fresh_process

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
needs_two = pytest.mark.skipif(CPUS < 2, reason="a share smaller than torch's default needs 2 CPUs")


@pytest.fixture(scope="module")
def fresh_default() -> int:
    """torch's thread count in a fresh process where nothing sets it."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)


@pytest.fixture
def torch_at(fresh_default):
    """Sets torch's thread count for the test, and puts the count it found back after."""
    before = torch.get_num_threads()

    def set_to(count: int) -> None:
        torch.set_num_threads(count)

    set_to(fresh_default)
    yield set_to
    torch.set_num_threads(before)


def test_torch_defaults_hold_the_count_torch_starts_with(fresh_default):
    assert fresh_default in torch_defaults()


@needs_two
def test_a_check_takes_its_share_of_the_cpus_and_gives_torch_its_count_back(torch_at, fresh_default):
    with cpu_share({"PYTEST_XDIST_WORKER_COUNT": "2"}) as inside:
        assert torch.get_num_threads() == inside == max(1, CPUS // 2)
    assert torch.get_num_threads() == fresh_default


def test_an_exception_in_the_check_still_gives_torch_its_count_back(torch_at, fresh_default):
    with pytest.raises(RuntimeError), cpu_share({"PYTEST_XDIST_WORKER_COUNT": str(CPUS * 2)}):
        raise RuntimeError("the check raised")
    assert torch.get_num_threads() == fresh_default


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_the_users_environment_variable_wins(torch_at, fresh_default, variable):
    with cpu_share({"PYTEST_XDIST_WORKER_COUNT": str(CPUS * 2), variable: str(fresh_default)}) as inside:
        assert torch.get_num_threads() == inside == fresh_default


def test_the_users_torch_set_num_threads_wins(torch_at):
    chosen = max(torch_defaults()) + 1  # no count torch starts with
    torch_at(chosen)
    with cpu_share({"PYTEST_XDIST_WORKER_COUNT": str(CPUS * 2)}) as inside:
        assert torch.get_num_threads() == inside == chosen


REGISTRY = textwrap.dedent(
    """
    import json

    import torch


    class Registry:
        def names(self):
            return ["shared", "pinned"]

        def build(self, name):
            return torch.nn.Linear(3, 3)

        def example_inputs(self, name, model):
            with open(f"threads-{name}.json", "w") as f:
                json.dump(torch.get_num_threads(), f)
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)

# a plugin, not a conftest.py: a conftest's hooks apply to the items of the folders it sits
# over, and a zoo item's path is a virtual one
PINNING = textwrap.dedent(
    """
    import json

    import torch

    BEFORE = {{}}


    def pytest_runtest_setup(item):
        # the user's own choice for one model (zoo items take no fixtures)
        BEFORE[item.name] = torch.get_num_threads()
        if item.name == "pinned":
            torch.set_num_threads({chosen})


    def pytest_runtest_teardown(item):
        with open(f"after-{{item.name}}.json", "w") as f:  # what the check left behind
            json.dump(torch.get_num_threads(), f)
        torch.set_num_threads(BEFORE[item.name])
    """
)


@needs_two
def test_in_process_zoo_items_under_xdist_take_their_share(pytester, monkeypatch, fresh_default):
    chosen = max(torch_defaults()) + 1
    pytester.makepyfile(threadreg=REGISTRY)
    pytester.makepyfile(pinning=PINNING.format(chosen=chosen))
    pytester.syspathinsert()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    result = pytester.runpytest_subprocess("--fx-zoo=threadreg:REGISTRY", "-n", "2", "-p", "pinning")
    result.assert_outcomes(passed=2)
    seen = {name: json.loads((pytester.path / f"threads-{name}.json").read_text()) for name in ("shared", "pinned")}
    assert seen == {"shared": max(1, CPUS // 2), "pinned": chosen}
    # torch's count is what it was before the check once the check is done
    after = {name: json.loads((pytester.path / f"after-{name}.json").read_text()) for name in ("shared", "pinned")}
    assert after == {"shared": fresh_default, "pinned": chosen}
