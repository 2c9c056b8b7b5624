"""A check captures and replays in the grad mode its model was run in, and its record says
which: zoo mode runs its models under ``no_grad`` and checks them there; a marked test's
calls are checked in the mode each was made in (``grad``, ``no_grad``, ``inference_mode``).

The model is one whose capture differs with the mode, as transformers' Sam3Model does
under torch.export: with grad enabled it takes a plain path, under ``no_grad`` a branch
on a tensor's value that no backend can capture. A check made with grad enabled passes a
model that a user capturing it for inference cannot capture.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_fxtrace import _compat

MODES = textwrap.dedent(
    """
    import torch


    class InferencePath(torch.nn.Module):
        def forward(self, x):
            if torch.is_grad_enabled():
                return x * 2
            if x.abs().sum() >= 0:  # the same value, by a branch on the data
                return x * 2
            return x * 3


    class Registry:
        def names(self):
            return ["inference_path", "linear"]

        def build(self, name):
            return InferencePath() if name == "inference_path" else torch.nn.Linear(3, 3)

        def example_inputs(self, name, model):
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)

MARKED = textwrap.dedent(
    """
    import pytest
    import torch

    from modes import InferencePath


    @pytest.mark.traceable
    def test_with_grad():
        InferencePath()(torch.randn(2, 3))


    @pytest.mark.traceable
    def test_under_no_grad():
        with torch.no_grad():
            InferencePath()(torch.randn(2, 3))


    @pytest.mark.traceable
    def test_under_inference_mode():
        with torch.inference_mode():
            InferencePath()(torch.randn(2, 3))
    """
)


def _records(path: Path) -> dict[tuple[str, str], dict]:
    document = json.loads(path.read_text())
    return {(r["nodeid"], r["backend"]): r for r in document["results"]}


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_zoo_mode_captures_under_no_grad_as_it_runs_the_model_and_says_so(pytester, isolate) -> None:
    pytester.makepyfile(modes=MODES)
    exports = _compat.export_problem() is None  # torch >= 2.12
    backends = "fx,export" if exports else "fx"
    args = ["--fx-zoo=modes:REGISTRY", f"--fx-backend={backends}", "--fx-report=r.json", "-p", "no:xdist"]
    result = pytester.runpytest_subprocess(*args, *(["--fx-isolate"] if isolate else []))
    by_id = _records(pytester.path / "r.json")
    node = "zoo/modes:REGISTRY::inference_path"
    # captured with grad enabled, both backends took the plain path and passed it
    assert by_id[(node, "fx")]["status"] == "untraceable", result.stdout.str()
    assert by_id[(node, "fx")]["category"] == "control-flow"
    assert not exports or by_id[(node, "export")]["status"] == "untraceable"
    assert by_id[(node, "fx")]["location"]["line"] == 8  # the branch on the data
    assert {r["grad_mode"] for r in by_id.values()} == {"no_grad"}
    assert by_id[("zoo/modes:REGISTRY::linear", "fx")]["status"] == "passed"


def test_a_marked_test_s_calls_are_checked_in_the_mode_each_was_made_in(pytester) -> None:
    pytester.makepyfile(modes=MODES, test_modes=MARKED)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("--fx-report=r.json", "-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=2)
    by_test = {nodeid.partition("::")[2]: r for (nodeid, _), r in _records(pytester.path / "r.json").items()}
    assert {name: (r["status"], r["grad_mode"]) for name, r in by_test.items()} == {
        "test_with_grad": ("passed", "grad"),
        "test_under_no_grad": ("untraceable", "no_grad"),
        "test_under_inference_mode": ("untraceable", "inference_mode"),
    }
