"""Two different kinds of failing submodule: each gets its own candidate fix (an
autowrap of its helper, or a leaf), and their combination is verified like any other
fix (tests/fix_combo_models.py; timm's nest_tiny_jx is in tests/test_timm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import fix_combo_models as m
import pytest
import torch

import pytest_fxtrace

X = torch.randn(1, 4, 4, 4)
COMBINED = {"autowrap_functions": ["fix_combo_models:unblock"], "leaf_modules": ["PadSame"]}


def test_each_kind_of_failing_module_gets_its_own_fix_and_the_combination_is_verified():
    report = pytest_fxtrace.check_traceable(m.TwoKinds(), (X,))
    assert report.status == "untraceable"
    failing = {r.path: r.diagnosis.category for r in report.localization.deepest_failures()}
    assert failing == {"stages.0": "type-conversion", "stages.1.pool": "control-flow"}
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == COMBINED
    assert (
        "fix (verified): @pytest.mark.traceable(autowrap_functions=['fix_combo_models:unblock'], "
        "leaf_modules=['PadSame'])"
    ) in report.describe()
    # neither part alone is a fix: the combination is what works
    assert not pytest_fxtrace.check_traceable(m.TwoKinds(), (X,), autowrap_functions=[m.unblock]).ok
    assert not pytest_fxtrace.check_traceable(m.TwoKinds(), (X,), leaf_modules=["PadSame"]).ok
    assert pytest_fxtrace.check_traceable(m.TwoKinds(), (X,), **COMBINED).ok


def test_a_marked_test_prints_the_combined_fix_and_pasting_it_passes(pytester: pytest.Pytester, tmp_path):
    pytester.makepyfile(fix_combo_models=(Path(__file__).parent / "fix_combo_models.py").read_text())
    pytester.syspathinsert()
    test = """
import pytest, torch
from fix_combo_models import TwoKinds

@pytest.mark.traceable({marker})
def test_two_kinds():
    TwoKinds()(torch.randn(1, 4, 4, 4))
"""
    pytester.makepyfile(test_two=test.format(marker=""))
    report = tmp_path / "fx.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--fx-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "  fix (verified): @pytest.mark.traceable(autowrap_functions=[[]'fix_combo_models:unblock'[]], "
            "leaf_modules=[[]'PadSame'[]])",
        ]
    )
    (record,) = json.loads(report.read_text())["results"]
    assert record["suggestion"]["verified"] is True and record["suggestion"]["options"] == COMBINED
    pytester.makepyfile(test_two=test.format(marker="**" + repr(COMBINED)))
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
