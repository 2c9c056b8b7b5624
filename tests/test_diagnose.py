"""Diagnosis of untraceable models: category, the user's line, the failing submodule,
coverage and a verified fix -- one tiny model per pattern (tests/diag_models.py)."""

from __future__ import annotations

import inspect
import json
import re
import sys

import diag_models as m
import pytest
import torch

import pytest_fxtrace
from pytest_fxtrace import _compat
from pytest_fxtrace.backends.base import Seams
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import TraceOptions

X = torch.randn(2, 4)
X4 = torch.randn(4, 4)

# (model, args, options, status, category, marked line, failing module)
PATTERNS = {
    "value-branch": (m.ValueBranch, (X,), {}, "untraceable", "control-flow", "value-branch", ""),
    "shape-branch": (m.ShapeBranch, (X,), {}, "untraceable", "control-flow", "shape-branch", "block"),
    "assert": (m.AssertDim, (X,), {}, "untraceable", "control-flow", "assert", ""),
    "len": (m.LenOfInput, (X,), {}, "untraceable", "len", "len", ""),
    "unpack": (m.Unpack, (X,), {}, "untraceable", "iteration", "unpack", ""),
    "star": (m.StarArgs, (X,), {}, "untraceable", "iteration", "star", ""),
    "comprehension": (m.Comprehension, (X,), {}, "untraceable", "iteration", "comprehension", ""),
    "int": (m.IntOfShape, (X,), {}, "untraceable", "type-conversion", "int", ""),
    "range": (m.RangeOfShape, (X,), {}, "untraceable", "type-conversion", "range", ""),
    "contains": (m.Contains, (X,), {}, "untraceable", "contains", "contains", ""),
    "zeros": (m.ZerosOfShape, (X,), {}, "untraceable", "tensor-constructor", "zeros", ""),
    "tensor": (m.TensorOfShape, (X,), {}, "untraceable", "tensor-constructor", "tensor", ""),
    "isinstance-assert": (
        m.IsinstanceAssert, (X,), {}, "untraceable", "control-flow", "isinstance-assert", "head",
    ),
    "unregistered": (m.Unregistered, (X,), {}, "untraceable", "unregistered-module", "unregistered", ""),
    "mutation": (
        m.Mutates, (X,), {"tracer": m.MutableCheckingTracer}, "untraceable", "mutation", "mutation", "",
    ),
    "own-proxy": (  # the tracer's proxy class is the tracer's machinery, not the user's line
        m.BranchesThroughOwnProxy, (X,), {"tracer": m.OwnProxyTracer}, "untraceable", "control-flow", "own-proxy", "",
    ),
    "own-create-proxy": (  # the tracer's create_proxy is not the line of a node the graph bakes
        m.BakedNoise, (X4,), {"tracer": m.ProxyMakingTracer}, "mismatch", "baked-constant", "randn", "",
    ),
    "helper": (
        m.HelperPad, (torch.randn(1, 3, 4, 5),), {}, "untraceable", "type-conversion", "helper", "",
    ),
    "flag": (m.FlagArgument, (X, torch.tensor(True)), {}, "untraceable", "control-flow", "flag", ""),
    "nested": (
        m.Nested, (torch.randn(1, 3, 8, 10),), {}, "untraceable", "type-conversion", "dynamic-pad", "first.pad",
    ),
    "isinstance-branch": (
        m.IsinstanceBranch, (X,), {}, "mismatch", "control-flow", "isinstance-branch", "",
    ),
    "isinstance-none": (m.TypeGuardedOutput, (X,), {}, "mismatch", "control-flow", "isinstance-none", ""),
    "isinstance-helper": (m.UsesTypeGuardedHelper, (X,), {}, "mismatch", "control-flow", "isinstance-helper", ""),
    "isinstance-block": (
        m.HoldsTypeGuardedBlock, (X,), {}, "mismatch", "control-flow", "isinstance-block", "block",
    ),
    "unrecordable": (m.PassesScale, (X,), {}, "untraceable", "other", "unrecordable", ""),
    "randn": (m.BakedNoise, (X4,), {}, "mismatch", "baked-constant", "randn", ""),
    "root-hook": (m.RootHook, (X,), {}, "mismatch", "hooks-dropped", "hook", ""),
    "inplace-constant": (m.InplaceOnConstant, (X4,), {}, "mismatch", "baked-constant", "inplace-constant", ""),
    "counter": (m.Counter, (X,), {}, "mismatch", "baked-constant", "counter", ""),
    "buffer-counter": (m.BufferCounter, (X,), {}, "mismatch", "baked-constant", "buffer-counter", ""),
    "buffer-add": (m.BufferCounterInPlace, (X,), {}, "mismatch", "baked-constant", "buffer-add", ""),
    "buffer-rebound": (m.BufferRebound, (X,), {}, "mismatch", "baked-constant", "buffer-rebound", ""),
    "buffer-in-submodule": (m.CountsInSubmodule, (X,), {}, "mismatch", "baked-constant", "buffer-add", "counter"),
    "is-none-forced": (
        m.OptionalInput, (X, X), {"concrete_args": {"y": None}}, "mismatch", "specialization", None, "",
    ),
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_each_pattern_is_reported_with_category_line_and_module(pattern):
    factory, args, options, status, category, line, module = PATTERNS[pattern]
    report = pytest_fxtrace.check_traceable(factory(), args, **options)
    assert (report.status, report.category, report.module) == (status, category, module), report.describe()
    if line is not None:
        assert report.location is not None, report.describe()
        assert report.location.path.endswith("diag_models.py")
        assert report.location.line == m.line_of(line), report.describe()
        assert f"diag_models.py:{m.line_of(line)}" in report.describe()


def test_untraceable_message_reads_what_where_what_traced_and_fix():
    report = pytest_fxtrace.check_traceable(m.ShapeBranch(), (X,))
    text = report.describe()
    first = text.splitlines()[0]
    assert first.startswith("ShapeBranch.block (ShapeBranchBlock) is not traceable: `if x.shape[0] > 1:`")
    assert "uses a traced value in control flow" in first
    assert "the partial graph ended on node gt (call_function gt)" in text
    assert "coverage: 100% of the parameters the call reached are in graphs that traced" in text  # the Linear; the block has none
    assert "block (ShapeBranchBlock): control-flow at" in text
    assert "fix (verified): @pytest.mark.traceable(leaf_modules=['ShapeBranchBlock'])" in text
    assert "torch.where" in text  # the code-level fix of the category
    assert len(text.splitlines()) <= 40


def test_model_error_is_not_a_traceability_failure():
    report = pytest_fxtrace.check_traceable(m.Broken(), (X,))
    assert report.status == "model-error"
    assert report.location.line == m.line_of("model-error")
    assert report.suggestion is None and report.localization is None


def test_nested_failures_are_localized_and_the_leaf_fix_is_verified():
    model = m.Nested()
    x = torch.randn(1, 3, 8, 10)
    report = pytest_fxtrace.check_traceable(model, (x,))
    collection = report.localization
    assert [r.path for r in collection.deepest_failures()] == ["first.pad", "second.pad"]
    assert collection.records[""].status == "traced"  # the root traced around them
    assert collection.records["first.conv"].status == "leaf"
    assert report.suggestion.verified
    assert report.suggestion.options == {"leaf_modules": ["DynamicPad"]}
    assert report.suggestion.text == "@pytest.mark.traceable(leaf_modules=['DynamicPad'])"
    json.dumps(report.suggestion.options)  # JSON-able as the report needs
    fixed = pytest_fxtrace.check_traceable(model, (x,), **report.suggestion.options)
    assert fixed.ok, fixed.describe()


def test_failing_helper_function_gets_a_verified_autowrap():
    report = pytest_fxtrace.check_traceable(m.HelperPad(), (torch.randn(1, 3, 4, 5),))
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == {"autowrap_functions": ["diag_models:pad_to_multiple"]}
    fixed = pytest_fxtrace.check_traceable(
        m.HelperPad(), (torch.randn(1, 3, 4, 5),), **report.suggestion.options
    )
    assert fixed.ok



def test_a_helper_failing_inside_a_submodule_is_autowrapped_rather_than_the_submodule_made_a_leaf():
    report = pytest_fxtrace.check_traceable(m.HoldsGridBlock(), (torch.randn(2, 4, 4),))
    assert (report.module, report.location.line) == ("block", m.line_of("grid-helper")), report.describe()
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == {"autowrap_functions": ["diag_models:tokens_to_grid"]}


def test_len_on_a_traced_value_gets_a_verified_autowrap_of_len():
    report = pytest_fxtrace.check_traceable(m.LenOfInput(), (X,))
    assert report.category == "len"
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == {"autowrap_functions": ["builtins:len"]}
    assert "fix (verified): @pytest.mark.traceable(autowrap_functions=['builtins:len'])" in report.describe()
    assert "x.shape[0]" in report.describe()  # the code-level fix is still offered
    fixed = pytest_fxtrace.check_traceable(m.LenOfInput(), (X,), **report.suggestion.options)
    assert fixed.ok, fixed.describe()
    assert "len" not in vars(m)  # the module's globals are as before

def test_flag_argument_gets_verified_concrete_args():
    report = pytest_fxtrace.check_traceable(m.FlagArgument(), (X, torch.tensor(True)))
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == {"concrete_args": {"flag": True}}


def test_no_fix_found_says_what_was_tried():
    report = pytest_fxtrace.check_traceable(m.ValueBranch(), (X,))
    assert not report.suggestion.verified
    assert report.suggestion.options == {}
    assert report.suggestion.text.startswith("none found")
    assert "root's own forward fails" in report.suggestion.text
    assert "fix (not verified): none found" in report.describe()


def test_diagnosis_leaves_the_model_as_it_was():
    model = m.Nested()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    pytest_fxtrace.check_traceable(model, (torch.randn(1, 3, 8, 10),))
    assert model.training
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not any(m_._forward_hooks or m_._forward_pre_hooks for m_ in model.modules())


def test_frozen_training_flag_is_found_when_both_modes_are_called():
    model = m.FrozenFlag()
    checks = TestChecks(TraceOptions())
    with recording(checks.observer_for):
        model.train()
        model(X)
        model.eval()
        model(X)
    (report,) = checks.finish()
    assert (report.status, report.category) == ("mismatch", "training-flag"), report.describe()
    assert report.location.line == m.line_of("training")


def test_state_that_grows_across_calls_is_named():
    checks = TestChecks(TraceOptions())
    model = m.Counter()
    with recording(checks.observer_for):
        model(X)
        model(X)
    (report,) = checks.finish()
    assert report.category == "baked-constant"
    assert "self.calls" in report.message


def test_optional_argument_left_out_traces_with_its_default():
    # `if y is None` vanishes from a plain torch.fx trace; here the unpassed y is concrete
    report = pytest_fxtrace.check_traceable(m.OptionalInput(), (X,))
    assert report.ok, report.describe()


def test_unguarded_concrete_argument_is_promoted_to_specialization():
    model = m.Configured()
    options = TraceOptions(concrete_args={"mode": m.Mode(2.0)})
    checks = TestChecks(options)
    with recording(checks.observer_for):
        model(X, m.Mode(3.0))
    (report,) = checks.finish()
    assert (report.status, report.category) == ("mismatch", "specialization"), report.describe()
    assert "`mode`" in report.message


def test_mismatch_names_the_first_diverging_submodule_and_dumps_the_graph(tmp_path):
    from pytest_fxtrace.entry import check_model_backends

    (report,) = check_model_backends(m.BakedNoise(), (X4,), None, TraceOptions(), Seams(dump_dir=tmp_path))
    assert report.divergence is not None
    assert report.divergence.node == "add"
    assert report.divergence.max_abs_error > 0
    assert report.dump_path is not None and report.dump_path.startswith(str(tmp_path))
    assert (tmp_path / "BakedNoise_traced" / "module.py").exists()
    assert f"traced module written to {report.dump_path}" in report.describe()


def test_lost_buffer_update_is_a_mismatch_naming_the_buffer_and_the_statement():
    model = m.BufferCounter()
    report = pytest_fxtrace.check_traceable(model, (X,))
    line = m.line_of("buffer-counter")
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    assert report.message.startswith(
        "BufferCounter traced, but the GraphModule's buffer self.calls differs from eager after recorded "
        "call 1: forward updates the buffer self.calls in place by an op on the buffer alone, which torch.fx "
        "ran once while tracing"
    ), report.message
    assert "(self.calls.add_(x.new_ones(())) rather than `self.calls += 1`)" in report.message
    assert report.message.endswith(f"`self.calls += 1` at {report.location}")
    assert report.location.line == line and report.location.path.endswith("diag_models.py")
    assert model.calls.item() == 0  # check_traceable leaves the model as it was


def test_a_rebound_buffer_is_named_as_rebound():
    report = pytest_fxtrace.check_traceable(m.BufferRebound(), (X,))
    assert "forward rebinds the buffer self.calls to a tensor computed without a traced value" in report.message
    assert report.message.endswith(f"`self.calls = self.calls + 1` at {report.location}"), report.message


def test_a_lost_buffer_update_is_found_on_the_test_s_own_calls_and_the_buffer_counts_as_unmarked():
    model = m.CountsInSubmodule()
    checks = TestChecks(TraceOptions())
    with recording(checks.observer_for):
        model(X)
        model(X)
    (report,) = checks.finish()
    assert (report.status, report.category, report.module) == ("mismatch", "baked-constant", "counter")
    assert "the GraphModule's buffer counter.calls differs from eager after recorded call 1" in report.message
    assert report.location.line == m.line_of("buffer-add")
    assert model.counter.calls.item() == 2  # the test's own two calls, none of the check's


def test_a_buffer_update_the_graph_records_is_not_flagged():
    model = m.RecordedCounter()
    checks = TestChecks(TraceOptions())
    with recording(checks.observer_for):
        model(X)
        model(X)
    (report,) = checks.finish()
    assert report.ok and report.calls == 2, report.describe()
    assert model.calls.item() == 2


def test_an_isinstance_test_a_traced_value_fails_names_the_statement_and_why():
    report = pytest_fxtrace.check_traceable(m.TypeGuardedOutput(), (X,))
    line = m.line_of("isinstance-none")
    assert report.message == (
        "TypeGuardedOutput traced, but the GraphModule's output differs from eager on recorded call 1: forward "
        "tests isinstance(x, ...) while tracing, where x is a traced value (a torch.fx Proxy standing for the "
        "Tensor, not a Tensor), so the test was False and the graph recorded the branch meant for other inputs: "
        f"`if isinstance(x, torch.Tensor):` at {report.location}"
    )
    assert report.location.line == line
    assert report.suggestion is None  # the root cannot be a leaf: the change is in code
    assert "fix in code: let the test pass for the traced value too: isinstance(x, (torch.Tensor, torch.fx.Proxy))" in (
        report.describe()
    )


def test_the_isinstance_fix_in_code_traces_and_matches():
    report = pytest_fxtrace.check_traceable(m.AdmitsTracedValues(), (X,))
    assert report.ok, report.describe()


def test_an_isinstance_test_in_a_helper_gets_a_verified_autowrap():
    model = m.UsesTypeGuardedHelper()
    report = pytest_fxtrace.check_traceable(model, (X,))
    assert "the helper doubled tests isinstance(x, ...) while tracing" in report.message
    assert report.suggestion.verified, report.describe()
    assert report.suggestion.options == {"autowrap_functions": ["diag_models:doubled"]}
    assert pytest_fxtrace.check_traceable(model, (X,), **report.suggestion.options).ok


def test_an_isinstance_test_in_a_submodule_gets_a_verified_leaf():
    model = m.HoldsTypeGuardedBlock()
    report = pytest_fxtrace.check_traceable(model, (X,))
    assert (report.module, report.module_type) == ("block", "TypeGuardedBlock")
    assert report.suggestion.verified and report.suggestion.options == {"leaf_modules": ["TypeGuardedBlock"]}
    assert pytest_fxtrace.check_traceable(model, (X,), **report.suggestion.options).ok


def test_watching_isinstance_tests_keeps_the_trace_function_that_was_set():
    seen = []

    def tracer(frame, event, arg):  # a coverage tool's or a debugger's
        seen.append(frame.f_code.co_name)
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        report = pytest_fxtrace.check_traceable(m.TypeGuardedOutput(), (X,))
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    assert report.category == "control-flow" and report.location.line == m.line_of("isinstance-none")
    assert "forward" in seen  # it went on seeing calls while ours watched the trace


def test_counter_that_does_not_reach_the_output_is_not_flagged():
    report = pytest_fxtrace.check_traceable(m.LoggingCounter(), (torch.randn(2, 3, 4),))
    assert report.ok, report.describe()


def test_an_object_a_graph_cannot_hold_is_named_in_the_headline():
    # not "converts a traced value to a Python number": nothing was converted
    report = pytest_fxtrace.check_traceable(m.PassesScale(), (X,))
    line = m.line_of("unrecordable")
    assert re.match(
        rf"PassesScale is not traceable: `return scaled\(x, Scale\(\)\)` at \S*diag_models.py:{line} "
        "hands torch.fx a Scale object, which a graph cannot record$",
        report.message,
    ), report.message


class DropoutAfterNorm(torch.nn.Module):
    """Functional dropout after a BatchNorm, which cannot run in train mode on one sample."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return torch.nn.functional.dropout(self.norm(x), p=0.5, training=self.training)


def test_dropout_fix_is_verified_in_both_modes_and_leaves_the_model_as_it_was():
    model = DropoutAfterNorm()
    checks = TestChecks(TraceOptions())
    with recording(checks.observer_for):
        model.train()
        model(X4)
        model.eval()
        model(X4)
    (report,) = checks.finish()
    assert report.category == "training-flag" and report.suggestion.verified, report.describe()
    assert "nn.Dropout(p=0.5)" in report.suggestion.text and report.suggestion.options == {}
    assert not model.training and not model.norm.training  # as the test left it
    assert model.norm.num_batches_tracked.item() == 1  # only the test's own train call counted


def test_dropout_fix_is_not_claimed_where_the_model_cannot_run_in_the_other_mode():
    model = DropoutAfterNorm()
    checks = TestChecks(TraceOptions())
    with recording(checks.observer_for):
        model.train()
        model(X4)
        model.eval()
        model(X4[:1])  # BatchNorm in train mode refuses one sample: the train side cannot be checked
    (report,) = checks.finish()
    assert report.category == "training-flag"
    assert not report.suggestion.verified
    assert "the model does not run in train mode on these inputs (ValueError)" in report.suggestion.text
    assert "fix (not verified): in code: call dropout through a submodule" in report.describe()


class ChecksSizeOfItem(torch.nn.Module):
    """A size read from a tensor and declared to torch as a size; torch 2.14 wraps
    ``torch._check_is_size`` in typing_extensions' deprecation wrapper."""

    def forward(self, x, t):
        k = t.item()
        torch._check_is_size(k)
        return x[:k]


@pytest.mark.filterwarnings("ignore:_check_is_size:FutureWarning")
@pytest.mark.skipif(
    not hasattr(torch, "_check_is_size"), reason="this torch has no torch._check_is_size (added in 2.2)"
)
def test_a_library_decorators_wrapper_is_not_blamed_for_the_users_line():
    report = pytest_fxtrace.check_traceable(ChecksSizeOfItem(), (torch.randn(5), torch.tensor(3)))
    line = inspect.getsourcelines(ChecksSizeOfItem.forward)[1] + 2
    assert report.status == "untraceable", report.describe()
    assert report.location is not None and report.location.path.endswith("test_diagnose.py"), report.describe()
    assert (report.location.line, report.location.source) == (line, "torch._check_is_size(k)")
    assert "typing_extensions" not in report.describe()


class StacksRowsOfASize(torch.nn.Module):
    def forward(self, x):
        return torch.stack([x[i] * 2 for i in range(x.shape[0])])


@pytest.mark.parametrize(
    ("model", "source"),
    [
        (m.RangeOfShape, "for _ in range(x.shape[0]):"),
        (StacksRowsOfASize, "return torch.stack([x[i] * 2 for i in range(x.shape[0])])"),
    ],
    ids=["for", "comprehension"],
)
def test_a_loop_over_a_traced_size_gets_the_loop_advice(model, source):
    report = pytest_fxtrace.check_traceable(model(), (X,))
    assert (report.category, report.location.source) == ("type-conversion", source), report.describe()
    assert report.message.endswith("converts a traced value to a Python number with range()"), report.message
    assert (
        "fix in code: a loop over a traced size cannot be unrolled: vectorise it (one tensor op over the "
        "whole dimension instead of a step per element), unpack a fixed number of slices (a, b = "
        "torch.unbind(x)), or loop over a concrete size"
    ) in report.describe()
    assert "stays symbolic" not in report.describe()


def test_a_conversion_outside_a_loop_keeps_the_keep_values_as_tensors_advice():
    report = pytest_fxtrace.check_traceable(m.IntOfShape(), (X,))
    assert report.code_fix.startswith("keep values as tensors (x.shape[0] stays symbolic"), report.describe()
    # the advice, applied and verified: the patch the message shows in its place
    assert "+        n = x.shape[0]  # LINE: int" in report.suggestion.patch


@pytest.mark.parametrize("backend", ["export", "compile"])
def test_a_static_forward_is_captured_where_torch_captures_it(backend):
    problem = (_compat.export_problem if backend == "export" else _compat.compile_problem)()
    if problem is not None:
        pytest.skip(problem)
    report = pytest_fxtrace.check_traceable(m.StaticSwish(), (X,), backend=backend)
    assert report.status == "passed", report.describe()
    assert report.calls == 1


def test_a_static_forward_is_untraceable_by_fx_as_by_torch_fx_itself():
    with pytest.raises(TypeError, match="must be Tensor, not StaticSwish"):
        torch.fx.symbolic_trace(m.StaticSwish())  # plain torch.fx passes the module as x
    report = pytest_fxtrace.check_traceable(m.StaticSwish(), (X,))
    assert (report.status, report.category) == ("untraceable", "unsupported"), report.describe()
    assert report.location.line == m.line_of("static-forward")
    assert "makes forward a @staticmethod: torch.fx calls StaticSwish.forward(module, *inputs), so the module arrives as 'x'" in report.message
    assert "make forward a regular method: def forward(self, x)" in report.describe()


PADDED, LENGTHS = torch.randn(2, 5, 4), torch.tensor([5, 3])


def test_a_packed_sequence_input_is_traced_as_one_proxy_as_torch_fx_does():
    packed = torch.nn.utils.rnn.pack_padded_sequence(PADDED, LENGTHS, batch_first=True, enforce_sorted=False)
    torch.fx.symbolic_trace(m.PackedEncoder())(packed)  # plain torch.fx traces it
    report = pytest_fxtrace.check_traceable(m.PackedEncoder().eval(), (packed,))
    assert report.status == "passed", report.describe()


def test_a_packed_sequence_given_to_a_submodule_is_untraceable_at_the_packing_line():
    with pytest.raises(TypeError):
        torch.fx.symbolic_trace(m.PacksItsInput())  # plain torch.fx fails at the same statement
    report = pytest_fxtrace.check_traceable(m.PacksItsInput().eval(), (PADDED, LENGTHS))
    assert report.status == "untraceable", report.describe()  # was internal-error ('PHBase' ... 'device')
    assert report.location.line == m.line_of("pack")
