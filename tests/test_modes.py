"""The modes a recorded call ran in are the capture's and the record's (issue 41, item 1):
grad mode and autocast region, each captured and replayed in as eager ran, and said in the
report (``grad_mode``, ``autocast``)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.export import problem

BACKENDS = ("fx", "export") if problem() is None else ("fx",)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_in_an_autocast_region_is_captured_in_it_and_the_record_says_so(backend):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        report = check_traceable(mlp(), (torch.randn(2, 4),), backend=backend)
    assert report.ok, report.describe()
    assert report.autocast == "cpu:bfloat16"
    plain = check_traceable(mlp(), (torch.randn(2, 4),), backend=backend)
    assert plain.ok and plain.autocast is None


def test_the_autocast_region_reaches_the_json_record(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_user="""
import pytest, torch
from torch import nn

@pytest.mark.traceable
def test_mixed():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(torch.randn(2, 4)).dtype == torch.bfloat16

@pytest.mark.traceable
def test_plain():
    nn.Linear(4, 4)(torch.randn(2, 4))
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-report=fx.json")
    result.assert_outcomes(passed=2)
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((pytester.path / "fx.json").read_text())["results"]}
    assert records["test_mixed"]["autocast"] == "cpu:bfloat16"
    assert "autocast" not in records["test_plain"]
