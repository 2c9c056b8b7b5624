"""The marker and the fixture, end to end, as a user meets them.

One user project with many small tests is run once per module in a subprocess
(``python -m pytest``, exactly what a user types); each test here asserts one
behaviour on that run's outcome and output. Behaviours that need their own
configuration (ini, command line, usage errors) get their own pytester run.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import optional
import pytest
from forked_pytest import pytest_process

HERE = Path(__file__).parent
# the tests reading the user project's run share one xdist worker under --dist loadgroup (tox's)
pytestmark = pytest.mark.xdist_group(__name__)

USER_TESTS = '''
import dataclasses, json, os
import pytest
import torch
import pytest_fxtrace
from models import (Branchy, Outer, Heads, head_dim, Flagged, TopK, ShapeGate, Noisy,
                    DictOutput, ListInput, PerRow)


@pytest.mark.traceable
def test_resnet18_zero_code():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    out = model(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 10)


@pytest.mark.traceable
def test_branchy_fails():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(leaf_modules=[Branchy])
def test_leaf_by_class():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(leaf_modules=["Branchy"])
def test_leaf_by_name():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(leaf_modules=["block"])
def test_leaf_by_path():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable
def test_leaf_by_registry():
    pytest_fxtrace.register_leaf(Branchy)
    try:
        Outer()(torch.randn(2, 4))
    finally:
        pytest_fxtrace.unregister_leaf(Branchy)


@pytest.mark.traceable
def test_autowrap_missing():
    Heads()(torch.randn(3, 8))


@pytest.mark.traceable(autowrap_functions=["models:head_dim"])
def test_autowrap_by_path():
    Heads()(torch.randn(3, 8))


@pytest.mark.traceable(autowrap_functions=[head_dim])
def test_autowrap_by_function():
    Heads()(torch.randn(3, 8))


@pytest.mark.traceable
def test_concrete_automatic():
    model = Flagged()
    model(torch.randn(2, 4))
    model(torch.randn(2, 4), use_bias=False, scale=0.5)


@pytest.mark.traceable
def test_concrete_missing():
    TopK()(torch.randn(2, 6), torch.tensor(3))


@pytest.mark.traceable(concrete_args={"k": 3})
def test_concrete_explicit():
    TopK()(torch.randn(2, 6), torch.tensor(3))


@pytest.mark.traceable
def test_param_shapes_missing():
    ShapeGate()(torch.randn(2, 4))


@pytest.mark.traceable(param_shapes_constant=True)
def test_param_shapes_constant():
    ShapeGate()(torch.randn(2, 4))


@pytest.mark.traceable(tracer="usertracers:BranchyLeafTracer")
def test_custom_tracer_by_path():
    Outer()(torch.randn(2, 4))


class Halve(torch.nn.Module):
    def forward(self, x):
        return x * 0.5


@pytest.mark.traceable(tracer="usertracers:NoFloatLiteralsTracer")
def test_tracer_own_create_arg():
    Halve()(torch.randn(2, 4))


@pytest.mark.traceable
def test_dropout_train_mode():
    Noisy().train()(torch.randn(6, 4))


@pytest.mark.traceable(concrete_args={"n": 2})
def test_specialized_batch():
    model = PerRow()
    model(torch.randn(2, 3), 2)
    model(torch.randn(3, 3), 3)


@pytest.mark.traceable
def test_nested_outputs():
    DictOutput()(torch.randn(2, 4))
    ListInput()([torch.randn(3), torch.randn(3)], scale=2)


@pytest.mark.traceable
def test_nothing_called():
    assert 1 + 1 == 2


@pytest.mark.traceable
def test_own_assertion_first():
    Outer()(torch.randn(2, 4))
    assert False, "the test's own assertion"


def train(marked_file):
    torch.manual_seed(0)
    model = Noisy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    with open(marked_file, "w") as fh:
        json.dump(losses, fh)


@pytest.mark.traceable
def test_training_loop_marked():
    train("losses-marked.json")


def test_training_loop_unmarked():
    train("losses-unmarked.json")


@pytest.mark.traceable
def test_head_replaced_between_calls():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model(torch.randn(3, 4))
    model[2] = torch.nn.Linear(4, 2)  # a new head: the second call is judged on it
    model(torch.randn(3, 4))


@dataclasses.dataclass
class Prompt:
    bias: torch.Tensor


class Prompted(torch.nn.Module):
    def forward(self, x, prompt):
        return x + prompt.bias.sum()


@pytest.mark.traceable
def test_prompts_that_print_alike():
    model = Prompted()
    first, second = torch.zeros(2000), torch.zeros(2000)
    second[1000] = 5.0  # where the repr of a long tensor says "..."
    model(torch.randn(2, 3), Prompt(first))
    model(torch.randn(2, 3), Prompt(second))


@pytest.mark.traceable
def test_user_traces_the_model_too():
    # the test's own symbolic_trace runs the nested Sequential's forward with Proxies:
    # not a call of the model, so neither recorded nor allowed to add to the user's graph
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.nn.Linear(4, 2))
    gm = torch.fx.symbolic_trace(model)
    assert [node.op for node in gm.graph.nodes] == ["placeholder"] + ["call_module"] * 3 + ["output"]
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x), model(x))


@pytest.mark.traceable(xfail="control-flow")
def test_xfail_expected_category():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(xfail="iteration")
def test_xfail_other_category():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(xfail="control-flow")
def test_xfail_but_traces():
    Flagged()(torch.randn(2, 4))


@pytest.mark.traceable
def test_model_error_marked():
    Outer()(torch.randn(2, 5))  # the Linear takes 4 features


def test_fixture_call(fxtrace):
    report = fxtrace(Flagged(), torch.randn(2, 4), use_bias=False)
    assert report.ok and report.status == "passed"


def test_fixture_check_with_options(fxtrace):
    report = fxtrace.check(Outer(), args=(torch.randn(2, 4),), leaf_modules=["Branchy"])
    assert report.nodes > 2


def test_fixture_failure(fxtrace):
    fxtrace(Outer(), torch.randn(2, 4))


def test_fixture_model_error(fxtrace):
    fxtrace(Outer(), torch.randn(2, 5))
'''

USER_TRACERS = '''
import torch
import pytest_fxtrace
from models import Branchy


class BranchyLeafTracer(pytest_fxtrace.Tracer):
    def is_leaf_module(self, m, qualname):
        return isinstance(m, Branchy) or super().is_leaf_module(m, qualname)


class NoFloatLiteralsTracer(torch.fx.Tracer):
    """A project's policy, kept in its tracer: no Python float baked into a graph."""

    def create_arg(self, a):
        if type(a) is float:
            raise TypeError(f"float literal {a} would be baked into the graph")
        return super().create_arg(a)
'''

MODULE_MARK_TESTS = '''
import pytest, torch
from models import Outer

pytestmark = pytest.mark.traceable(leaf_modules=["Branchy"], rtol=0.5)


@pytest.mark.traceable(atol=0.5)
def test_module_and_function_markers_merge():
    Outer()(torch.randn(2, 4))


@pytest.mark.traceable(leaf_modules=[])
def test_closest_marker_wins():
    Outer()(torch.randn(2, 4))
'''


# the fxtrace fixture given what is not a model, or an unknown option
MISUSE_TESTS = """
import torch

# a model builder and a model class, as torchvision's resnet18 and ResNet
# (defined here so the test runs on torch releases without torchvision)
class ResNet(torch.nn.Module):
    def forward(self, x):
        return x

def resnet18():
    return ResNet()

def test_function_not_model(fxtrace):
    fxtrace(resnet18, torch.randn(1, 3, 32, 32))

def test_class_not_instance(fxtrace):
    fxtrace(ResNet, torch.randn(1, 3, 32, 32))

def test_unknown_option(fxtrace):
    fxtrace.check(torch.nn.ReLU(), (torch.ones(1),), leaf_module=["X"])
"""


class Run:
    """Outcome and output of one user pytest run."""

    def __init__(self, proc: subprocess.CompletedProcess, path: Path) -> None:
        self.returncode = proc.returncode
        self.output = proc.stdout + proc.stderr
        self.path = path
        self.outcomes = dict(
            (name, outcome)
            for outcome, name in re.findall(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR) \S+::(\w+)", self.output, re.M)
        )

    def section(self, test: str) -> str:
        """The failure section pytest printed for ``test``."""
        match = re.search(rf"^_+ {test} _+\n(.*?)(?=^_{{3,}} |^=+ )", self.output, re.M | re.S)
        assert match, f"no failure section for {test} in:\n{self.output}"
        return match.group(1)


def run_user_suite(path: Path, *args: str) -> Run:
    proc = pytest_process(
        ["-p", "no:cacheprovider", "-rA", "--strict-markers", *args],
        cwd=path, timeout=600,
    )
    return Run(proc, path)


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> Run:
    path = tmp_path_factory.mktemp("user_project")
    (path / "models.py").write_text((HERE / "models.py").read_text())
    (path / "usertracers.py").write_text(USER_TRACERS)
    (path / "test_user.py").write_text(USER_TESTS)
    (path / "test_module_mark.py").write_text(MODULE_MARK_TESTS)
    (path / "test_misuse.py").write_text(MISUSE_TESTS)
    (path / "conftest.py").write_text("")
    return run_user_suite(path)


@optional.needs("torchvision")
def test_real_resnet18_passes_in_zero_code_mode(user_run):
    assert user_run.outcomes["test_resnet18_zero_code"] == "PASSED"


def test_untraceable_model_points_at_user_line_and_submodule(user_run):
    assert user_run.outcomes["test_branchy_fails"] == "FAILED"
    text = user_run.section("test_branchy_fails")
    line = next(i for i, src in enumerate((HERE / "models.py").read_text().splitlines(), 1) if "# BRANCH" in src)
    assert f"models.py:{line}" in text
    assert "Outer.block (Branchy) is not traceable" in text
    assert "if x.sum() > 0:" in text
    assert "control-flow" in text
    assert "torch/fx" not in text and "_symbolic_trace" not in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "test", ["test_leaf_by_class", "test_leaf_by_name", "test_leaf_by_path", "test_leaf_by_registry"]
)
def test_leaf_module_options_make_the_failing_model_pass(user_run, test):
    assert user_run.outcomes["test_branchy_fails"] == "FAILED"
    assert user_run.outcomes[test] == "PASSED"


def test_autowrap_functions_by_path_or_object(user_run):
    assert user_run.outcomes["test_autowrap_missing"] == "FAILED"
    assert "type-conversion" in user_run.section("test_autowrap_missing")
    assert user_run.outcomes["test_autowrap_by_path"] == "PASSED"
    assert user_run.outcomes["test_autowrap_by_function"] == "PASSED"


def test_concrete_args_automatic_and_explicit(user_run):
    assert user_run.outcomes["test_concrete_automatic"] == "PASSED"
    assert user_run.outcomes["test_concrete_missing"] == "FAILED"
    assert user_run.outcomes["test_concrete_explicit"] == "PASSED"


def test_param_shapes_constant_option(user_run):
    assert user_run.outcomes["test_param_shapes_missing"] == "FAILED"
    assert user_run.outcomes["test_param_shapes_constant"] == "PASSED"


def test_custom_tracer_by_dotted_path(user_run):
    assert user_run.outcomes["test_custom_tracer_by_path"] == "PASSED"


def test_a_user_tracers_own_create_arg_sees_plain_arguments_too(user_run):
    # our tracer's shortcut for plain arguments (numbers, tuples, proxies) must not
    # go around a create_arg the user's tracer defines
    assert user_run.outcomes["test_tracer_own_create_arg"] == "FAILED"
    text = user_run.section("test_tracer_own_create_arg")
    assert "float literal 0.5 would be baked into the graph" in text


def test_an_error_raised_by_a_users_tracer_points_at_the_model_line(user_run):
    # the tracer's own method is user code too, but the line to show is the traced one
    text = user_run.section("test_tracer_own_create_arg")
    assert re.search(r"`return x \* 0\.5` at test_user\.py:\d+", text)
    assert "usertracers.py" not in text
    assert "type-conversion" not in text


def test_dropout_in_train_mode_replays_same_rng(user_run):
    assert user_run.outcomes["test_dropout_train_mode"] == "PASSED"


def test_graph_wrong_for_second_batch_size_fails(user_run):
    assert user_run.outcomes["test_specialized_batch"] == "FAILED"
    text = user_run.section("test_specialized_batch")
    assert "specialization" in text
    assert "recorded call 2" in text


def test_nested_outputs_and_list_inputs_pass(user_run):
    assert user_run.outcomes["test_nested_outputs"] == "PASSED"


def test_marked_test_without_module_call_fails_nothing_to_check(user_run):
    assert user_run.outcomes["test_nothing_called"] == "FAILED"
    assert "nothing to check" in user_run.section("test_nothing_called")


def test_test_body_failure_is_reported_before_traceability(user_run):
    text = user_run.section("test_own_assertion_first")
    assert "the test's own assertion" in text
    assert "is not traceable" not in text


def test_a_submodule_replaced_between_two_calls_is_not_a_mismatch(user_run):
    assert user_run.outcomes["test_head_replaced_between_calls"] == "PASSED", user_run.output


def test_calls_whose_arguments_print_alike_are_each_traced_with_their_own(user_run):
    assert user_run.outcomes["test_prompts_that_print_alike"] == "PASSED", user_run.section("test_prompts_that_print_alike")


def test_a_test_that_traces_the_model_itself_is_checked_on_its_eager_calls_only(user_run):
    assert user_run.outcomes["test_user_traces_the_model_too"] == "PASSED", user_run.output


def test_training_loop_losses_identical_with_and_without_marker(user_run):
    assert user_run.outcomes["test_training_loop_marked"] == "PASSED"
    marked = (user_run.path / "losses-marked.json").read_text()
    unmarked = (user_run.path / "losses-unmarked.json").read_text()
    assert marked == unmarked


def test_xfail_by_category(user_run):
    assert user_run.outcomes["test_xfail_expected_category"] == "XFAIL"
    assert user_run.outcomes["test_xfail_other_category"] == "FAILED"
    assert "expected a traceability failure of category iteration, but got control-flow" in user_run.section(
        "test_xfail_other_category"
    )
    assert user_run.outcomes["test_xfail_but_traces"] == "FAILED"
    assert "XPASS(strict)" in user_run.section("test_xfail_but_traces")


def test_a_model_error_in_a_marked_test_shows_no_frame_of_ours(user_run):
    text = user_run.section("test_model_error_marked")
    assert "mat1 and mat2 shapes cannot be multiplied" in text
    forward = (HERE / "models.py").read_text().splitlines().index("        return self.block(self.pre(x)) * 2") + 1
    assert f"models.py:{forward}: in forward" in text  # the user's frames are all there
    assert "pytest_fxtrace" not in text and "capture.py" not in text


def test_fixture_returns_report_on_success(user_run):
    assert user_run.outcomes["test_fixture_call"] == "PASSED"
    assert user_run.outcomes["test_fixture_check_with_options"] == "PASSED"


def test_fixture_failure_shows_report_not_traceback(user_run):
    text = user_run.section("test_fixture_failure")
    assert "Outer.block (Branchy) is not traceable" in text
    assert "torch/fx" not in text and "Traceback" not in text


def test_fixture_model_error_is_not_untraceable(user_run):
    text = user_run.section("test_fixture_model_error")
    assert "raised when run eagerly" in text
    assert "not a traceability problem" in text


def test_fixture_misused_says_so_once_without_a_chained_exception(user_run):
    for test, message in (
        ("test_function_not_model",
         "pytest-fxtrace: expected a torch.nn.Module to check, got the function resnet18: pass the model it builds (resnet18())"),
        ("test_class_not_instance",
         "pytest-fxtrace: expected a torch.nn.Module to check, got the class ResNet: pass an instance, e.g. ResNet()"),
        ("test_unknown_option", "pytest-fxtrace: fxtrace.check(): unknown option 'leaf_module'"),
    ):  # fmt: skip
        assert user_run.outcomes[test] == "FAILED"
        text = user_run.section(test)
        assert text.count(message.partition("pytest-fxtrace: ")[2]) == 1, text
        assert "During handling of the above exception" not in text and "Traceback" not in text


def test_module_pytestmark_merges_with_function_marker(user_run):
    assert user_run.outcomes["test_module_and_function_markers_merge"] == "PASSED"
    assert user_run.outcomes["test_closest_marker_wins"] == "FAILED"


def test_marker_is_registered_for_strict_markers(pytester: pytest.Pytester):
    pytester.makepyfile(
        "import pytest, torch\n@pytest.mark.traceable\ndef test_x():\n    torch.nn.ReLU()(torch.ones(1))\n"
    )
    result = pytester.runpytest_subprocess("--strict-markers", "--markers")
    assert "@pytest.mark.traceable(**options)" in result.stdout.str()


def test_marked_tests_pass_under_strict_markers(user_run):
    # run_user_suite runs the user's project with --strict-markers
    assert user_run.outcomes["test_leaf_by_class"] == user_run.outcomes["test_fixture_call"] == "PASSED"


def test_unknown_marker_option_is_a_usage_error_naming_the_test(pytester: pytest.Pytester):
    pytester.makepyfile("import pytest\n@pytest.mark.traceable(leaf_module=['X'])\ndef test_typo():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_typo*unknown option 'leaf_module'*valid options*leaf_modules*"])


def test_a_misspelt_option_name_is_answered_with_the_name_it_is_close_to(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_typos=textwrap.dedent(
            """
            import pytest

            @pytest.mark.traceable(leaf_module=["X"])
            def test_close():
                pass

            @pytest.mark.traceable(frobnicate=True)
            def test_far():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_close: @pytest.mark.traceable: unknown option 'leaf_module' (did you mean 'leaf_modules'?); valid options: *",
            "*test_far: @pytest.mark.traceable: unknown option 'frobnicate'; valid options: *",
        ]
    )


def test_a_misspelt_backend_or_category_is_answered_with_the_name_it_is_close_to(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_typos=textwrap.dedent(
            """
            import pytest

            @pytest.mark.traceable(backend="exprot")
            def test_backend():
                pass

            @pytest.mark.traceable(xfail="control_flow")
            def test_category():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess("-k", "backend")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_backend: @pytest.mark.traceable: backend: 'exprot' is not a backend (did you mean 'export'*?); "
            "use one of 'fx', 'export'*",
        ]
    )
    result = pytester.runpytest_subprocess("-k", "category")
    result.stderr.fnmatch_lines(
        [
            "*test_category: @pytest.mark.traceable: xfail: 'control_flow' is not a category id "
            "(did you mean 'control-flow'?); use one of: *",
        ]
    )


TWO_TYPOS = textwrap.dedent(
    """
    import pytest, torch

    @pytest.mark.traceable(leaf_module=["X"])
    def test_typo_one():
        torch.nn.ReLU()(torch.ones(1))

    @pytest.mark.traceable(rtol="tight")
    def test_typo_two():
        torch.nn.ReLU()(torch.ones(1))

    @pytest.mark.traceable
    def test_fine():
        torch.nn.ReLU()(torch.ones(1))
    """
)


@pytest.mark.parametrize("mode", [(), ("-n", "2")], ids=["serial", "n2"])
def test_a_deselected_tests_bad_marker_does_not_stop_the_session(pytester: pytest.Pytester, mode):
    pytester.makepyfile(test_typos=TWO_TYPOS)
    result = pytester.runpytest_subprocess("-k", "fine", *mode)
    result.assert_outcomes(passed=1)
    assert "leaf_module" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("mode", [(), ("-n", "2")], ids=["serial", "n2"])
def test_every_selected_tests_bad_marker_is_reported_naming_test_and_marker(pytester: pytest.Pytester, mode):
    pytester.makepyfile(test_typos=TWO_TYPOS)
    result = pytester.runpytest_subprocess(*mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: test_typos.py::test_typo_one: @pytest.mark.traceable: unknown option 'leaf_module'*",
            "test_typos.py::test_typo_two: @pytest.mark.traceable: rtol: expected a number, got 'tight'",
        ]
    )
    assert "test_fine" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()
    result = pytester.runpytest_subprocess("-k", "two or fine", *mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: test_typos.py::test_typo_two: @pytest.mark.traceable: rtol:*"])
    assert "test_typo_one" not in result.stderr.str()


def test_unimportable_tracer_in_ini_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nfxtrace_tracer = nowhere.mod:Tracer\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini fxtrace_tracer: tracer: cannot import module 'nowhere.mod'*"])


def test_ini_and_command_line_options_apply(pytester: pytest.Pytester):
    pytester.makepyfile(models=(HERE / "models.py").read_text(), usertracers=USER_TRACERS)
    pytester.syspathinsert()
    pytester.makeini("[pytest]\nfxtrace_leaf_modules =\n    Branchy\n")
    pytester.makepyfile(
        test_cfg=textwrap.dedent(
            """
            import pytest, torch
            from models import Outer, Heads

            @pytest.mark.traceable
            def test_ini_leaf():
                Outer()(torch.randn(2, 4))

            @pytest.mark.traceable(leaf_modules=[])
            def test_marker_beats_ini():
                Outer()(torch.randn(2, 4))
            """
        )
    )
    result = pytester.runpytest_subprocess("-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["PASSED test_cfg.py::test_ini_leaf", "FAILED test_cfg.py::test_marker_beats_ini*"])
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess("-rA", "--fx-tracer=usertracers:BranchyLeafTracer", "-k", "ini_leaf")
    result.assert_outcomes(passed=1)
