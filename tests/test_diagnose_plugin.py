"""Diagnosis as a user meets it: a marked test fails with the line, the module, what
traced and a verified fix; xfail by category; the mismatching graph under basetemp."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_fxtrace import _compat

MODELS = (Path(__file__).parent / "diag_models.py").read_text()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(diag_models=MODELS)
    pytester.syspathinsert()
    return pytester


NESTED_TEST = """
import pytest, torch
from diag_models import Nested

@pytest.mark.traceable({marker})
def test_nested():
    model = Nested()
    assert model(torch.randn(1, 3, 8, 10)).shape == (1, 3, 8, 2)
"""


def test_untraceable_test_fails_with_line_module_coverage_and_verified_fix(project):
    project.makepyfile(test_nested=NESTED_TEST.format(marker=""))
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*Nested.first.pad (DynamicPad) is not traceable: `width = int(x.shape[[]-1])` at diag_models.py:*"
            " converts a traced value to a Python number with int()*",
            "*category: type-conversion*",
            "*coverage: 100% of the parameters the call reached are in graphs that traced"
            " (the root traced, with the failing modules as leaves)*",
            "*first.pad (DynamicPad): type-conversion at diag_models.py:*",
        ]
    )
    assert "  fix (verified): @pytest.mark.traceable(leaf_modules=['DynamicPad'])\n" in result.stdout.str()
    assert "per-module:" not in result.stdout.str()  # the table is for -v
    assert "Traceback" not in result.stdout.str()


def test_pasting_the_suggested_marker_makes_the_test_pass(project):
    project.makepyfile(test_nested=NESTED_TEST.format(marker="leaf_modules=['DynamicPad']"))
    project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_verbose_adds_the_per_module_table(project):
    project.makepyfile(test_nested=NESTED_TEST.format(marker=""))
    result = project.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*per-module:*", "*<root> (Nested): traced*", "*first.conv (Conv2d): leaf*"])


def test_xfail_by_category(project):
    body = """
    @pytest.mark.traceable({marker})
    def test_{name}():
        Nested()(torch.randn(1, 3, 8, 10))
    """
    cases = {
        "expected": "xfail='type-conversion'",
        "one_of": "xfail=['iteration', 'type-conversion']",
        "other_reason": "xfail='iteration'",
        "traces_cleanly": "xfail='iteration', leaf_modules=['DynamicPad']",
    }
    source = "import pytest, torch\nfrom diag_models import Nested\n" + "".join(
        textwrap.dedent(body).format(marker=marker, name=name) for name, marker in cases.items()
    )
    project.makepyfile(test_xfail=source)
    result = project.runpytest_subprocess("-rxXf", "-p", "no:cacheprovider")
    result.assert_outcomes(xfailed=2, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "XFAIL*test_expected*expected type-conversion*",
            "XFAIL*test_one_of*expected iteration, type-conversion:*",
            "expected a traceability failure of category iteration, but got type-conversion:",
            "[[]XPASS(strict)[]] expected a traceability failure (iteration), but every model traced and matched*",
            "FAILED test_xfail.py::test_other_reason - *",
            "FAILED test_xfail.py::test_traces_cleanly - *",
        ]
    )


def test_mismatch_names_the_cause_and_writes_the_graph_under_basetemp(project, tmp_path):
    project.makepyfile(
        test_noise="""
        import pytest, torch
        from diag_models import BakedNoise

        @pytest.mark.traceable
        def test_noise():
            BakedNoise()(torch.randn(4, 4))
        """
    )
    basetemp = tmp_path / "base"
    result = project.runpytest_subprocess("-p", "no:cacheprovider", f"--basetemp={basetemp}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*BakedNoise traced, but the GraphModule's output differs from eager on recorded call 1: "
            "torch.randn(...) was evaluated once while tracing*at diag_models.py:*",
            "*category: baked-constant*",
            "*first diverges in the root (BakedNoise) at node add*max abs error*max rel error*",
            f"*traced module written to {basetemp}*",
        ]
    )
    dumped = out.split("traced module written to ")[1].split()[0]
    assert Path(dumped, "module.py").exists() and Path(dumped).is_relative_to(basetemp)


def test_an_isinstance_branch_taken_wrongly_while_tracing_shows_the_user_s_line(project):
    project.makepyfile(
        test_guard="""
        import pytest, torch
        from diag_models import TypeGuardedOutput

        @pytest.mark.traceable
        def test_guarded():
            assert TypeGuardedOutput()(torch.randn(2, 4)) is not None
        """
    )
    line = next(n for n, text in enumerate(MODELS.splitlines(), 1) if text.endswith("# LINE: isinstance-none"))
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "TypeGuardedOutput traced, but the GraphModule's output differs from eager on recorded call 1: forward "
            "tests isinstance(x, ...) while tracing, where x is a traced value*"
            f": `if isinstance(x, torch.Tensor):` at diag_models.py:{line}",
            "  category: control-flow",
            "  fix in code: let the test pass for the traced value too: isinstance(x, (torch.Tensor, torch.fx.Proxy))*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_training_flag_and_hooks_fail_marked_tests(project):
    project.makepyfile(
        test_silent="""
        import pytest, torch
        from diag_models import FrozenFlag, RootHook

        @pytest.mark.traceable
        def test_both_modes():
            model = FrozenFlag()
            model.train()
            model(torch.randn(4, 4))
            model.eval()
            model(torch.randn(4, 4))

        @pytest.mark.traceable
        def test_hooked():
            RootHook()(torch.randn(4, 4))
        """
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*FrozenFlag traced, but the graphs traced in train and eval mode differ*at diag_models.py:*",
            "*category: training-flag*",
        ]
    )
    result.stdout.fnmatch_lines(["*the forward hook `scale_output` on the root (RootHook)*", "*category: hooks-dropped*"])


def test_json_report_carries_the_verified_options(project, tmp_path):
    project.makepyfile(test_nested=NESTED_TEST.format(marker=""))
    path = tmp_path / "fx.json"
    project.runpytest_subprocess("-p", "no:cacheprovider", f"--fx-report={path}")
    (record,) = json.loads(path.read_text())["results"]
    assert record["status"] == "untraceable" and record["category"] == "type-conversion"
    assert record["module"] == "first.pad"
    assert record["coverage"] == 1.0
    assert record["suggestion"]["verified"] is True
    assert record["suggestion"]["options"] == {"leaf_modules": ["DynamicPad"]}


@pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))
def test_coverage_reads_the_same_under_fx_and_export_and_names_what_the_call_never_reached(pytester, tmp_path):
    pytester.makepyfile(
        test_root="""
        import pytest, torch
        from torch import nn

        class RootBranches(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4)
                self.b = nn.Linear(4, 4)
                with torch.no_grad():
                    self.a.weight.zero_()
                    self.a.bias.fill_(-1.0)  # the branch is never taken: b is never called

            def forward(self, x):
                x = self.a(x)
                if x.sum() > 0:
                    x = self.b(x)
                return x

        @pytest.mark.traceable(backend=("fx", "export"))
        def test_root():
            RootBranches()(torch.randn(2, 4))
        """
    )
    path = tmp_path / "fx.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--fx-report={path}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*RootBranches is not traceable: `if x.sum() > 0:` at test_root.py:*",
            "  coverage: 100% of the parameters the call reached are in graphs that traced "
            "(the root's own forward failed); traced: a (Linear); not reached: b (Linear)",
            "*RootBranches is not exportable (export): `if x.sum() > 0:` at test_root.py:*",
            "  coverage: 100% of the parameters the call reached are in exported graphs "
            "(the root's own forward failed); exported: a (Linear); not reached: b (Linear)",
        ]
    )
    records = json.loads(path.read_text())["results"]
    assert [(r["backend"], r["status"], r["coverage"]) for r in records] == [
        ("fx", "untraceable", 1.0), ("export", "untraceable", 1.0),
    ]  # fmt: skip


DROPOUT_MODEL = """
import torch
from torch import nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
{init}
    def forward(self, x):
        x = self.fc(x)
        x = {dropout}
        return x.relu()
"""

TRAIN_THEN_EVAL = """
import pytest, torch
from dropout_model import Net

@pytest.mark.traceable
def test_train_then_eval():
    model = Net()
    model.train()
    model(torch.randn(4, 8)).sum().backward()
    model.eval()
    model(torch.randn(4, 8))
"""


def test_functional_dropout_trained_then_evaluated_gets_the_verified_module_fix(pytester: pytest.Pytester):
    pytester.makepyfile(
        dropout_model=DROPOUT_MODEL.format(init="", dropout="F.dropout(x, p=0.25, training=self.training)")
    )
    pytester.syspathinsert()
    pytester.makepyfile(test_drop=TRAIN_THEN_EVAL)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "Net traced, but the graphs traced in train and eval mode differ *: "
            "`x = F.dropout(x, p=0.25, training=self.training)` at dropout_model.py:12",
            "  category: training-flag",
            "  fix (verified): in code: call dropout through a submodule instead of the functional one "
            "(the statement above): `self.dropout = nn.Dropout(p=0.25)` in __init__, `x = self.dropout(x)` "
            "in forward; it stays a leaf, so one graph follows model.train() / model.eval()",
            "*Net*mismatch*training-flag*yes",  # the summary's fix column (rows fit the terminal)
        ]
    )
    failure = result.stdout.str().split("= FAILURES =")[1].split("fxtrace summary")[0]
    assert failure.count("dropout_model.py:12") == 1  # the location, once
    # the fix, applied as printed, passes the same test
    pytester.makepyfile(
        dropout_model=DROPOUT_MODEL.format(init="        self.dropout = nn.Dropout(p=0.25)\n", dropout="self.dropout(x)")
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
