"""--fx-isolate end to end: a model that aborts, one that eats memory past
--fx-max-rss and one stuck in native code past --fx-timeout each cost their own
record (crashed / crashed / timeout, by name), and every other model finishes."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from pytest_fxtrace import _compat
from pytest_fxtrace.report.records import CheckRecord

REGISTRY = textwrap.dedent(
    """
    import ctypes
    import os

    import torch


    class Abort(torch.nn.Module):
        def forward(self, x):
            os.abort()


    class Hog(torch.nn.Module):
        def forward(self, x):
            held = []
            for _ in range(24):  # 3 GB at most, past a 1 GB cap
                held.append(torch.ones(2**25, dtype=torch.float32))  # 128 MB, touched
            ctypes.CDLL(None).sleep(60)
            return x


    class Stuck(torch.nn.Module):
        def forward(self, x):
            ctypes.CDLL(None).sleep(600)  # native code: no Python signal handler runs
            return x


    class Registry:
        def names(self):
            return ["a_ok", "abort", "b_ok", "hog", "c_ok", "stuck", "d_ok"]

        def build(self, name):
            return {"abort": Abort, "hog": Hog, "stuck": Stuck}.get(name, lambda: torch.nn.Linear(3, 3))()

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)


@pytest.mark.parametrize(
    "workers", [pytest.param(("-p", "no:xdist"), marks=pytest.mark.slow), ("-n", "2")], ids=["serial", "n2"]
)
def test_isolated_crashes_memory_and_hangs_cost_one_model_each(pytester, workers):
    pytester.makepyfile(crashreg=REGISTRY)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess(
        "--fx-zoo=crashreg:REGISTRY",
        "--fx-isolate",
        "--fx-max-rss=1",
        "--fx-timeout=4",
        "--fx-report=r.json",
        *workers,
    )
    result.assert_outcomes(passed=4, failed=3)
    by_id = {r["nodeid"]: r for r in json.loads((pytester.path / "r.json").read_text())["results"]}
    statuses = {nodeid.rpartition("::")[2]: r["status"] for nodeid, r in by_id.items()}
    assert statuses == {
        "a_ok": "passed",
        "abort": "crashed",
        "b_ok": "passed",
        "hog": "crashed",
        "c_ok": "passed",
        "stuck": "timeout",
        "d_ok": "passed",
    }
    output = result.stdout.str()
    assert "abort crashed the check: its process died (signal SIGABRT)" in output
    assert "hog crashed the check: its process reached" in output and "past --fx-max-rss=1 GB" in output
    assert "stuck: the check did not finish within timeout=4 s and its process was killed" in output


NEEDS_EXPORT = pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))
# a registry's own per-model options may name the backends too (over the command line's)
BOTH_FROM_REGISTRY = """
            def options(self, name):
                return {"backend": ("fx", "export")}
"""


@pytest.mark.parametrize(
    ("backends", "registry_options"),
    [
        pytest.param((), "", id="fx"),
        pytest.param(("--fx-backend=fx,export",), "", id="fx-and-export", marks=NEEDS_EXPORT),
        pytest.param((), BOTH_FROM_REGISTRY, id="fx-and-export-from-the-registry", marks=NEEDS_EXPORT),
    ],
)
def test_isolated_checks_give_the_same_verdicts_as_in_process(pytester, backends, registry_options):
    pytester.makepyfile(
        reg="""
        import torch

        class Branchy(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x
                return -x

        class Registry:
            def names(self):
                return ["linear", "branchy"]

            def build(self, name):
                return torch.nn.Linear(3, 3) if name == "linear" else Branchy()

            def example_inputs(self, name, model):
                return (torch.randn(2, 3),)
        """
        + registry_options
        + """
        REGISTRY = Registry()
        """
    )
    pytester.syspathinsert()
    reports = {}
    for name, extra in (("inproc", ()), ("isolated", ("--fx-isolate",))):
        result = pytester.runpytest_subprocess(
            "--fx-zoo=reg:REGISTRY", f"--fx-report={name}.json", *backends, *extra
        )
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["Branchy is not traceable: `if x.sum() > 0:` at reg.py:5*"])
        document = json.loads((pytester.path / f"{name}.json").read_text())
        for record in document["results"]:
            record.pop("trace_seconds")
        document.pop("durations", None)  # each test's measured seconds
        reports[name] = document
    assert reports["inproc"] == reports["isolated"]
    # one record per model per backend, each checked in the child with its own backend
    found = {(r["nodeid"].rpartition("::")[2], r["backend"], r["status"]) for r in reports["isolated"]["results"]}
    expected = {("linear", "fx", "passed"), ("branchy", "fx", "untraceable")}
    if backends or registry_options:
        expected |= {("linear", "export", "passed"), ("branchy", "export", "untraceable")}
    assert found == expected
    # the per-module statuses the HTML page draws come back from the child too
    linear = next(r for r in reports["isolated"]["results"] if r["nodeid"].endswith("::linear"))
    assert [(m.path, m.type, m.status) for m in CheckRecord.from_json(linear).modules] == [("", "Linear", "traced")]


def test_max_rss_without_isolate_is_a_usage_error(pytester):
    result = pytester.runpytest_subprocess("--fx-max-rss=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-max-rss needs --fx-isolate*"])


THREADS_REGISTRY = """
import json
import os

import torch


class Registry:
    def names(self):
        return ["first", "second"]

    def build(self, name):
        with open(f"threads-{name}.json", "w") as f:
            json.dump({"torch": torch.get_num_threads(), "env": os.environ.get("OMP_NUM_THREADS"), "pid": os.getpid()}, f)
        return torch.nn.Linear(3, 3)

    def example_inputs(self, name, model):
        return (torch.randn(2, 3),)


REGISTRY = Registry()
"""


def _threads_seen(pytester: pytest.Pytester) -> dict[str, tuple[int, str]]:
    """Each model's child: torch's thread count and OMP_NUM_THREADS as it saw them."""
    seen = {}
    for name in ("first", "second"):
        data = json.loads((pytester.path / f"threads-{name}.json").read_text())
        seen[name] = (data["torch"], data["env"])
    return seen


@pytest.mark.parametrize("user_setting", [None, "3"], ids=["shared-out", "the-user-s"])
def test_isolated_children_share_the_cpus_among_xdist_workers(pytester, monkeypatch, user_setting):
    """Two workers' children with a thread per CPU each would oversubscribe the machine
    (OpenMP's spinning barriers then slow a check many times over): each child gets the
    CPUs divided by the workers, unless the user set OMP_NUM_THREADS."""
    pytester.makepyfile(threg=THREADS_REGISTRY)
    pytester.syspathinsert()
    if user_setting is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", user_setting)
    result = pytester.runpytest_subprocess("--fx-zoo=threg:REGISTRY", "--fx-isolate", "-n", "2")
    result.assert_outcomes(passed=2)
    seen = _threads_seen(pytester)
    if user_setting is None:
        share = max(1, len(os.sched_getaffinity(0)) // 2)
        assert seen == {"first": (share, str(share)), "second": (share, str(share))}
    else:  # kept as the user set it (torch caps it at the CPUs it has)
        assert [env for _, env in seen.values()] == ["3", "3"]
