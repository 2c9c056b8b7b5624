"""Diagnosis as a user meets it: a marked test fails with the line, the module, what
traced and a verified fix; xfail by category; the mismatching graph under basetemp.

One project holds every case, each in its own test module (a fix applied as printed in a
module of its own beside the failing one); it runs once for the module, and once more
with -v for the per-module table, and each test reads its behaviour from those runs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from shared_project import SharedProject, outcomes, section

from pytest_fxtrace import _compat

MODELS = (Path(__file__).parent / "diag_models.py").read_text()
EXPORT_PROBLEM = _compat.export_problem()
needs_export = pytest.mark.skipif(EXPORT_PROBLEM is not None, reason=str(EXPORT_PROBLEM))
# the tests share the project's runs: one xdist worker under --dist loadgroup (tox's)
pytestmark = pytest.mark.xdist_group(__name__)

NESTED_TEST = """
import pytest, torch
from diag_models import Nested

@pytest.mark.traceable({marker})
def test_nested():
    model = Nested()
    assert model(torch.randn(1, 3, 8, 10)).shape == (1, 3, 8, 2)
"""

XFAIL_BODY = """
@pytest.mark.traceable({marker})
def test_{name}():
    Nested()(torch.randn(1, 3, 8, 10))
"""
XFAIL_CASES = {
    "expected": "xfail='type-conversion'",
    "one_of": "xfail=['iteration', 'type-conversion']",
    "other_reason": "xfail='iteration'",
    "traces_cleanly": "xfail='iteration', leaf_modules=['DynamicPad']",
}
XFAIL_TEST = "import pytest, torch\nfrom diag_models import Nested\n" + "".join(
    XFAIL_BODY.format(marker=marker, name=name) for name, marker in XFAIL_CASES.items()
)

NOISE_TEST = """
import pytest, torch
from diag_models import BakedNoise

@pytest.mark.traceable
def test_noise():
    BakedNoise()(torch.randn(4, 4))
"""

GUARD_TEST = """
import pytest, torch
from diag_models import TypeGuardedOutput

@pytest.mark.traceable
def test_guarded():
    assert TypeGuardedOutput()(torch.randn(2, 4)) is not None
"""

SILENT_TEST = """
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

ROOT_TEST = textwrap.dedent(
    """
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



@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    project = SharedProject(tmp_path_factory.mktemp("diagnose_plugin"))
    project.makepyfile(
        diag_models=MODELS,
        test_nested=NESTED_TEST.format(marker=""),
        test_pasted=NESTED_TEST.format(marker="leaf_modules=['DynamicPad']"),  # the suggested marker
        test_xfail=XFAIL_TEST,
        test_noise=NOISE_TEST,
        test_guard=GUARD_TEST,
        test_silent=SILENT_TEST,
        dropout_model=DROPOUT_MODEL.format(init="", dropout="F.dropout(x, p=0.25, training=self.training)"),
        test_drop=TRAIN_THEN_EVAL,
        # the fix printed for test_drop, applied, under the same test
        dropout_fixed=DROPOUT_MODEL.format(init="        self.dropout = nn.Dropout(p=0.25)\n", dropout="self.dropout(x)"),
        test_drop_fixed=TRAIN_THEN_EVAL.replace("from dropout_model import", "from dropout_fixed import"),
    )
    if EXPORT_PROBLEM is None:  # backend="export" is a usage error for the whole session
        project.makepyfile(test_root=ROOT_TEST)
    return project


@pytest.fixture(scope="module")
def checked(project: SharedProject) -> pytest.RunResult:
    """Every case, with -rA (each test's outcome), the JSON report and a basetemp of ours."""
    return project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", "--fx-report=fx.json", f"--basetemp={project.path / 'base'}"
    )


def record(project: SharedProject, nodeid: str) -> list[dict]:
    return [r for r in json.loads((project.path / "fx.json").read_text())["results"] if r["nodeid"] == nodeid]


def test_untraceable_test_fails_with_line_module_coverage_and_verified_fix(checked):
    assert outcomes(checked, nodeids=True)["test_nested.py::test_nested"] == "FAILED"
    checked.stdout.fnmatch_lines(
        [
            "*Nested.first.pad (DynamicPad) is not traceable: `width = int(x.shape[[]-1])` at diag_models.py:*"
            " converts a traced value to a Python number with int()*",
            "*category: type-conversion*",
            "*coverage: 100% of the parameters the call reached are in graphs that traced"
            " (the root traced, with the failing modules as leaves)*",
            "*first.pad (DynamicPad): type-conversion at diag_models.py:*",
        ]
    )
    assert "  fix (verified): @pytest.mark.traceable(leaf_modules=['DynamicPad'])\n" in checked.stdout.str()
    assert "per-module:" not in checked.stdout.str()  # the table is for -v
    assert "Traceback" not in section(checked, "test_nested")


def test_pasting_the_suggested_marker_makes_the_test_pass(checked):
    assert outcomes(checked, nodeids=True)["test_pasted.py::test_nested"] == "PASSED"


def test_verbose_adds_the_per_module_table(project):
    result = project.runpytest_subprocess("-v", "-p", "no:cacheprovider", "test_nested.py")
    result.stdout.fnmatch_lines(["*per-module:*", "*<root> (Nested): traced*", "*first.conv (Conv2d): leaf*"])


def test_xfail_by_category(checked):
    ran = outcomes(checked)
    assert [ran[f"test_{name}"] for name in XFAIL_CASES] == ["XFAIL", "XFAIL", "FAILED", "FAILED"]
    checked.stdout.fnmatch_lines_random(
        [
            "XFAIL*test_expected*expected type-conversion*",
            "XFAIL*test_one_of*expected iteration, type-conversion:*",
            "expected a traceability failure of category iteration, but got type-conversion:",
            "[[]XPASS(strict)[]] expected a traceability failure (iteration), but every model traced and matched*",
            "FAILED test_xfail.py::test_other_reason - *",
            "FAILED test_xfail.py::test_traces_cleanly - *",
        ]
    )


def test_mismatch_names_the_cause_and_writes_the_graph_under_basetemp(project, checked):
    assert outcomes(checked)["test_noise"] == "FAILED"
    basetemp = project.path / "base"
    out = checked.stdout.str()
    checked.stdout.fnmatch_lines(
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


def test_an_isinstance_branch_taken_wrongly_while_tracing_shows_the_user_s_line(checked):
    line = next(n for n, text in enumerate(MODELS.splitlines(), 1) if text.endswith("# LINE: isinstance-none"))
    assert outcomes(checked)["test_guarded"] == "FAILED"
    checked.stdout.fnmatch_lines(
        [
            "TypeGuardedOutput traced, but the GraphModule's output differs from eager on recorded call 1: forward "
            "tests isinstance(x, ...) while tracing, where x is a traced value*"
            f": `if isinstance(x, torch.Tensor):` at diag_models.py:{line}",
            "  category: control-flow",
            "  fix in code: let the test pass for the traced value too: isinstance(x, (torch.Tensor, torch.fx.Proxy))*",
        ]
    )
    assert "Traceback" not in section(checked, "test_guarded")


def test_training_flag_and_hooks_fail_marked_tests(checked):
    assert outcomes(checked)["test_both_modes"] == outcomes(checked)["test_hooked"] == "FAILED"
    checked.stdout.fnmatch_lines(
        [
            "*FrozenFlag traced, but the graphs traced in train and eval mode differ*at diag_models.py:*",
            "*category: training-flag*",
        ]
    )
    checked.stdout.fnmatch_lines(["*the forward hook `scale_output` on the root (RootHook)*", "*category: hooks-dropped*"])


def test_json_report_carries_the_verified_options(project, checked):
    (nested,) = record(project, "test_nested.py::test_nested")
    assert nested["status"] == "untraceable" and nested["category"] == "type-conversion"
    assert nested["module"] == "first.pad"
    assert nested["coverage"] == 1.0
    assert nested["suggestion"]["verified"] is True
    assert nested["suggestion"]["options"] == {"leaf_modules": ["DynamicPad"]}


@needs_export
def test_coverage_reads_the_same_under_fx_and_export_and_names_what_the_call_never_reached(project, checked):
    assert outcomes(checked)["test_root"] == "FAILED"
    checked.stdout.fnmatch_lines(
        [
            "*RootBranches is not traceable: `if x.sum() > 0:` at test_root.py:*",
            "  coverage: 100% of the parameters the call reached are in graphs that traced "
            "(the root's own forward failed); traced: a (Linear); not reached: b (Linear)",
            "*RootBranches is not exportable (export): `if x.sum() > 0:` at test_root.py:*",
            "  coverage: 100% of the parameters the call reached are in exported graphs "
            "(the root's own forward failed); exported: a (Linear); not reached: b (Linear)",
        ]
    )
    assert [(r["backend"], r["status"], r["coverage"]) for r in record(project, "test_root.py::test_root")] == [
        ("fx", "untraceable", 1.0), ("export", "untraceable", 1.0),
    ]  # fmt: skip


def test_functional_dropout_trained_then_evaluated_gets_the_verified_module_fix(checked):
    assert outcomes(checked, nodeids=True)["test_drop.py::test_train_then_eval"] == "FAILED"
    checked.stdout.fnmatch_lines(
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
    failure = checked.stdout.str().split("= FAILURES =")[1].split("fxtrace summary")[0]
    assert failure.count("dropout_model.py:12") == 1  # the location, once
    # the fix, applied as printed, passes the same test
    assert outcomes(checked, nodeids=True)["test_drop_fixed.py::test_train_then_eval"] == "PASSED"
