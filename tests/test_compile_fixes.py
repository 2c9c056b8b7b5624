"""Fixes of a torch.compile check over its budget, verified by compiling the model again with
each applied (a Dynamo state of its own, the recorded calls replayed, compared with eager):
torch.compiler.disable on a logging submodule or helper, capture_scalar_outputs for .item(),
mark_dynamic / dynamic=True for sizes that vary, allow_unspec_int_on_nn_module for an int
attribute. Each verified fix, applied for real, makes the check pass (within the budget the
fix names), and the model, Dynamo's options and the inputs are as before the check."""

from __future__ import annotations

import itertools

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.backends.compile import _compat as compile_compat
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import resolve_options
from pytest_fxtrace.report.records import suggestion_json

pytestmark = pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem()))

import compile_fix_models as m  # noqa: E402  (tests/ is on sys.path: conftest)


def check_calls(model, inputs, before=None, **options):
    """Zero-code mode: the calls a marked test makes (``before(model, i)`` ahead of call i)."""
    checks = TestChecks(resolve_options(("test", {"backend": "compile", **options})))
    with recording(checks.observer_for, checks.internal_error):
        for i, args in enumerate(inputs):
            if before is not None:
                before(model, i)
            model(*args)
    (report,) = checks.finish()
    return report


def test_a_logging_submodule_is_disabled_verified_with_the_graphs_it_leaves() -> None:
    x = torch.randn(2, 4)
    model = m.WithNoisy()
    original = vars(m.Noisy)["forward"]
    rng = torch.get_rng_state()
    report = check_calls(model, [(x,)])
    assert (report.status, report.category) == ("untraceable", "unsupported"), report.describe()
    fix = report.suggestion
    assert fix.verified and not fix.options, fix
    assert fix.text.startswith(
        f"decorate `Noisy.forward` ({report.location.path}:{m.line_of('F-NOISYDEF')}) with @torch.compiler.disable (Dynamo runs it eagerly); "
        "compiled again so: 2 graphs, 0 breaks inside compiled code (was 1), matches eager on 1 recorded call; "
        "the call of a disabled function is a known break, which max_graph_breaks=1 accepts"
    ), fix.text
    assert "fix (verified): decorate `Noisy.forward`" in report.describe()
    # the class, the model and the RNG stream are as before; the fix, applied, passes as it says
    assert vars(m.Noisy)["forward"] is original and "forward" not in vars(model.noisy)
    assert torch.equal(torch.get_rng_state(), rng)
    m.Noisy.forward = torch.compiler.disable(original)
    try:
        applied = check_calls(m.WithNoisy(), [(x,)], max_graph_breaks=1)
    finally:
        m.Noisy.forward = original
    assert applied.status == "passed", applied.describe()
    assert [site.id for site in applied.graph_breaks] == ["GB0099"]  # the known break, at the call


def test_a_logging_helper_function_is_disabled_and_put_back() -> None:
    original = m.log_stats
    report = check_calls(m.WithHelper(), [(torch.randn(2, 4),)])
    assert report.location.line == m.line_of("F-HELPER")
    assert report.suggestion.verified, report.suggestion
    where = f"{report.location.path}:{m.line_of('F-LOGDEF')}"
    assert report.suggestion.text.startswith(f"decorate `log_stats` ({where}) with @torch.compiler.disable")
    assert m.log_stats is original


def test_item_is_fixed_by_capture_scalar_outputs_verified_and_the_option_put_back() -> None:
    x = torch.randn(2, 4)
    report = check_calls(m.Scaled(), [(x,)])
    assert (report.category, report.location.line) == ("data-dependent", m.line_of("F-ITEM"))
    assert report.suggestion.verified
    assert report.suggestion.text == (
        "torch._dynamo.config.capture_scalar_outputs = True; compiled again so: 0 breaks (was 1), "
        "matches eager on 1 recorded call"
    )
    assert compile_compat.dynamo_option("capture_scalar_outputs") is False
    with compile_compat.dynamo_options(capture_scalar_outputs=True):
        assert check_calls(m.Scaled(), [(x,)]).status == "passed"


def set_step(model, i) -> None:
    model.step = i + 1


def test_an_int_attribute_recompile_is_fixed_by_allow_unspec_int_on_nn_module_verified() -> None:
    inputs = [(torch.ones(2),)] * 3
    report = check_calls(m.Stepped(), inputs, set_step)
    assert (report.category, report.location.line) == ("specialization", m.line_of("F-STEP"))
    assert report.suggestion.verified and not report.suggestion.partial, report.suggestion
    assert report.suggestion.text == (
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True; compiled again so: "
        "0 recompiles over the 3 recorded calls (was 2), matches eager"
    )
    assert compile_compat.dynamo_option("allow_unspec_int_on_nn_module") is False
    with compile_compat.dynamo_options(allow_unspec_int_on_nn_module=True):
        applied = check_calls(m.Stepped(), inputs, set_step)
    assert applied.status == "passed", applied.describe()
    (only,) = applied.recompiles  # the one re-specialisation that makes it symbolic, not counted
    assert not only.counted and only.reason.startswith("`self.step` was 1, now 2 (automatic dynamic")


SIZES = [(torch.ones(2, 3),), (torch.ones(4, 3),), (torch.ones(4, 5),)]


def test_sizes_that_vary_twice_are_fixed_by_marking_the_input_dims_dynamic_and_the_marks_go() -> None:
    report = check_calls(m.Batched(), SIZES)
    assert report.category == "specialization" and "`x.shape[1]` went from 3 to 5" in report.message
    assert report.suggestion.verified, report.suggestion
    assert report.suggestion.text == (
        "mark the sizes that vary dynamic before calling the compiled model: torch._dynamo.mark_dynamic(x, 0); "
        "torch._dynamo.mark_dynamic(x, 1); compiled again so: 0 recompiles over the 3 recorded calls (was 1), "
        "matches eager"
    )
    assert not any(name.startswith("_dynamo") for (x,) in SIZES for name in vars(x))
    marked = [(x.clone(),) for (x,) in SIZES]
    for (x,) in marked:
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(x, 1)
    assert check_calls(m.Batched(), marked).status == "passed"


def test_sizes_of_a_tensor_in_a_list_are_fixed_by_the_dynamic_option_verified() -> None:
    inputs = [([x],) for (x,) in SIZES]
    report = check_calls(m.Listed(), inputs)
    assert report.suggestion.verified and dict(report.suggestion.options) == {"dynamic": True}, report.suggestion
    assert report.suggestion.text.startswith("compile with dynamic=True (torch.compile(model, dynamic=True))")
    assert check_calls(m.Listed(), inputs, dynamic=True).status == "passed"


def count_trials(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fixes the search compiles the model again with, in order."""
    from pytest_fxtrace.backends.compile import fixes

    trials: list[str] = []
    original = fixes.compile_again

    def counting(fix, calls, context, marks=None):
        trials.append(fix.name)
        return original(fix, calls, context, marks)

    monkeypatch.setattr(fixes, "compile_again", counting)
    return trials


MOVE_THE_CALL = (
    "move the call (print, logging, a C extension) out of forward, or "
    "wrap the function that makes it in torch.compiler.disable (a known break instead of an unknown one)"
)


def test_a_fix_that_removes_some_sites_gives_the_change_in_code_for_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    import compile_models

    trials = count_trials(monkeypatch)
    report = check_traceable(compile_models.SeveralBreaks(), (torch.randn(2, 4),), backend="compile")
    assert report.category == "unsupported" and report.suggestion.verified
    assert report.suggestion.text == (
        "torch._dynamo.config.capture_scalar_outputs = True; compiled again so: 2 breaks (was 3), matches eager on "
        f"1 recorded call; for the rest, in code: {MOVE_THE_CALL}"
    )
    # disabling Block.forward cannot remove the print and the branch in forward: not compiled
    assert trials == ["capture_scalar_outputs=True"]
    assert report.suggestion.partial  # applied, the check still fails: the record and the page say so
    assert suggestion_json(report.suggestion)["partial"] is True
    assert "fix (verified in part: it leaves some of the failure): torch._dynamo" in report.describe()


def test_the_change_in_code_for_the_rest_is_that_of_the_sites_left() -> None:
    report = check_traceable(m.ItemThenPrint(), (torch.randn(2, 4),), backend="compile")
    assert (report.category, report.location.line) == ("data-dependent", m.line_of("F-ITEM-FIRST"))
    assert report.suggestion.verified, report.suggestion
    assert report.suggestion.text.endswith(f"for the rest, in code: {MOVE_THE_CALL}"), report.suggestion.text


def test_the_fix_that_can_pass_is_compiled_first_and_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    trials = count_trials(monkeypatch)
    report = check_traceable(m.GainAndLogged(), (torch.randn(2, 4),), backend="compile")
    assert report.category == "data-dependent" and report.suggestion.verified, report.describe()
    assert report.suggestion.text.startswith("decorate `Gain.forward` ("), report.suggestion.text
    assert "and `Logged.forward` (" in report.suggestion.text
    assert "0 breaks inside compiled code (was 2)" in report.suggestion.text
    assert len(trials) == 1 and trials[0].startswith("torch.compiler.disable on"), trials


def test_a_branch_on_data_in_forward_gets_the_change_in_code_unverified() -> None:
    report = check_traceable(m.DataBranch(), (torch.randn(2, 4),), backend="compile")
    assert report.category == "control-flow" and not report.suggestion.verified
    assert report.suggestion.text.startswith("in code: compute both sides and pick with torch.where")


def test_a_shape_branch_no_dynamic_fix_removes_says_what_was_tried() -> None:
    class ShapeBranch(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 3:
                return x.sum(0)
            return x.mean(0)

    report = check_calls(ShapeBranch(), [(torch.ones(n, 3),) for n in (2, 3, 5)])
    # what does pass is the budget the calls need (every call ran and matched eager first),
    # and in code torch.cond: not mark_dynamic, tried and in vain
    assert report.category == "specialization" and report.suggestion.verified
    assert report.suggestion.text.endswith(
        "each of the 3 recorded calls ran through the compiled model and matched eager; tried first: "
        "compiled again with mark_dynamic, no fewer recompiles; compiled again with dynamic=True, no fewer recompiles"
    )
    assert report.code_fix.startswith("express the branch with torch.cond") and "mark_dynamic" not in report.code_fix


def test_a_fix_whose_compile_would_run_past_the_timeout_is_not_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_fxtrace.backends.compile import backend

    clock = itertools.count(0, 40)  # the check's compile "takes" 40 s; 80 s of timeout=100 are gone
    monkeypatch.setattr(backend, "monotonic", lambda: next(clock))
    trials = count_trials(monkeypatch)
    report = check_traceable(m.WithNoisy(), (torch.randn(2, 4),), backend="compile", timeout=100)
    assert (report.status, report.location.line) == ("untraceable", m.line_of("F-PRINT")), report.describe()
    assert trials == []
    assert report.suggestion.text.startswith(
        "none found: not compiled again with torch.compiler.disable on `Noisy.forward` ("
    ), report.suggestion.text
    assert "): a compile takes about 40 s here, past timeout=100 s; in code: move the call" in report.suggestion.text
