"""The torch.export check as an engine (no pytest plugin): categories, the user's line,
dynamic shapes from several calls, replay on ep.module() without touching the user's
model, localization, verified fixes, and torch's output kept out of the test's."""

from __future__ import annotations

import functools
import logging
import re
import warnings

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.backends.export import _compat as export_compat
from pytest_fxtrace.backends.export.code import export_code
from pytest_fxtrace.backends.export.diagnose import decides_control_flow
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import resolve_options

pytestmark = pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))

import export_models as m  # noqa: E402  (tests/ is on sys.path: conftest)

MODELS_FILE = "export_models.py"
# what the running torch recommends to declare a size: torch 2.14 deprecates torch._check_is_size
SIZE_CHECK = "torch._check(n >= 0)" if export_compat.check_is_size_deprecated() else "torch._check_is_size(n)"


def backend(strict: bool) -> str:
    return "export-strict" if strict else "export"


def check(model, *args, strict=False, dynamic=None, **kwargs):
    return check_traceable(model, args, kwargs, backend=backend(strict), dynamic=dynamic)


def check_calls(model, calls, strict=False, dynamic=None):
    """Zero-code mode: the calls made while recording, as a marked test makes them."""
    checks = TestChecks(resolve_options(("test", {"backend": backend(strict), "dynamic": dynamic})))
    outputs = []
    with recording(checks.observer_for, checks.internal_error):
        for args, kwargs in calls:
            outputs.append(model(*args, **kwargs))
    (report,) = checks.finish()
    return report, outputs


def at(report, marker: str) -> None:
    assert report.location is not None, report.describe()
    assert report.location.path.endswith(MODELS_FILE), report.location
    assert report.location.line == m.line_of(marker), report.describe()


# --- categories, with the user's statement ------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["export", "export-strict"])
def test_a_branch_on_tensor_data_is_control_flow_at_the_user_s_if(strict: bool) -> None:
    report = check(m.Branch(), torch.randn(4, 4), strict=strict)
    assert (report.status, report.category) == ("untraceable", "control-flow")
    at(report, "DATA-BRANCH")
    first = report.message.splitlines()[0]
    assert first.startswith(f"Branch is not exportable ({'export-strict' if strict else 'export'}): `if x.sum() > 0:`")
    assert "torch.cond" in report.suggestion.text
    if strict:
        assert "GB0170" in first and "GB0170" in report.error  # dynamo's graph-break id


def test_a_size_read_from_tensor_data_is_data_dependent_with_torch_s_check() -> None:
    report = check(m.CountedView(), torch.ones(4, 4))
    assert (report.status, report.category) == ("untraceable", "data-dependent")
    at(report, "DATA-SIZE")
    assert "torch._check((idx.shape[0] // 2)" in report.suggestion.text  # in the user's variables
    assert SIZE_CHECK in report.suggestion.text
    assert "int(t)" not in report.suggestion.text  # the statement converts nothing with int()


def test_int_of_tensor_data_is_data_dependent_and_strict_export_is_the_verified_fix() -> None:
    report = check(m.IntOfData(), torch.ones(4, 4))
    assert report.category == "data-dependent"
    at(report, "INT-OF-DATA")
    assert "int()" in report.message
    assert report.suggestion.verified and dict(report.suggestion.options) == {"backend": "export-strict"}
    assert check(m.IntOfData(), torch.ones(4, 4), strict=True).ok


class EncoderState:  # a plain class: not a pytree export can flatten
    def __init__(self, hidden):
        self.hidden = hidden


class ReturnsEncoderState(torch.nn.Module):
    def forward(self, x):
        return EncoderState(x + 1)


def test_an_output_export_cannot_flatten_is_named_with_its_class_and_how_to_register_it(monkeypatch) -> None:
    modes = []
    export = torch.export.export

    @functools.wraps(export)  # its signature too: the backend reads it to know what torch offers
    def spy(*args, strict=False, **kwargs):
        modes.append(strict)
        return export(*args, strict=strict, **kwargs)

    monkeypatch.setattr(torch.export, "export", spy)
    report = check(ReturnsEncoderState(), torch.ones(2))
    assert (report.status, report.category) == ("untraceable", "unsupported"), report.describe()
    assert "returns an EncoderState object (test_export_engine.EncoderState)" in report.message, report.message
    assert "torch.export.register_dataclass" in report.message
    assert report.suggestion.text == (
        "in code: register EncoderState as a pytree node: torch.export.register_dataclass(EncoderState) for a "
        "dataclass, torch.utils._pytree.register_pytree_node(EncoderState, flatten_fn, unflatten_fn) otherwise; "
        "or pass its tensors in a tuple or dict"
    )
    # both modes flatten with the same pytree registry: strict export is not tried on it
    assert modes and True not in modes, modes


class AttentionWithCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = torch.nn.Linear(2, 2)

    def forward(self, x, state):
        state.hidden = self.k(x)
        return state.hidden


class DecoderReturningItsCache(torch.nn.Module):
    """A transformers decoder in miniature: its cache object made in forward, filled by a
    layer, returned beside the output."""

    def __init__(self):
        super().__init__()
        self.attn = AttentionWithCache()

    def forward(self, x):
        state = EncoderState(None)
        return self.attn(x, state), state


@pytest.mark.parametrize("strict", [False, True], ids=["export", "export-strict"])
def test_a_cache_output_is_unsupported_at_the_root_in_both_modes(strict) -> None:
    report = check(DecoderReturningItsCache(), torch.ones(2), strict=strict)
    assert (report.status, report.category, report.module) == ("untraceable", "unsupported", ""), report.describe()
    assert "returns an EncoderState object" in report.message, report.message  # strict said 'other', at attn
    assert report.suggestion.text.startswith("in code: register EncoderState as a pytree node")


def test_int_of_tensor_data_is_told_to_read_the_number_with_item() -> None:
    report = check(m.IntOfData(), torch.ones(4, 4))
    assert report.location.source == "n = int((x > 0).sum())"
    assert f"in code: use t.item() instead of int(t), then tell export what the value can be right after reading it: n = t.item(); {SIZE_CHECK} for a size" in report.describe()


def test_size_advice_is_what_the_running_torch_recommends(monkeypatch) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch._check_is_size(3)
    warned = any("_check_is_size" in str(warning.message) for warning in caught)
    assert export_compat.check_is_size_deprecated() == warned
    assert (SIZE_CHECK == "torch._check(n >= 0)") == warned
    from pytest_fxtrace.backends.export import diagnose

    monkeypatch.setattr(diagnose, "check_is_size_deprecated", lambda: False)  # a torch before 2.14
    assert "n = t.item(); torch._check_is_size(n) for a size" in check(m.IntOfData(), torch.ones(4, 4)).describe()
    monkeypatch.setattr(diagnose, "check_is_size_deprecated", lambda: True)
    text = check(m.IntOfData(), torch.ones(4, 4)).describe()
    assert "n = t.item(); torch._check(n >= 0) for a size" in text and "_check_is_size" not in text
    # torch's own suggestion of torch._check_is_size (older releases make it) is written anew
    suggested = RuntimeError("insert one of the following checks before this call:\n  1. torch._check_is_size(u0)\n")
    assert diagnose.torch_checks(suggested) == ["torch._check(u0 >= 0)"]


def test_a_strict_only_failure_keeps_dynamo_s_id_and_verifies_non_strict() -> None:
    report = check(m.Clock(), torch.randn(2, 2), strict=True)
    assert (report.status, report.category) == ("untraceable", "unsupported")
    at(report, "CLOCK")
    assert export_compat.graph_break_id(_raise_strict(m.Clock())) in report.message
    assert report.suggestion.verified
    assert dict(report.suggestion.options) == {"backend": "export"}
    assert check(m.Clock(), torch.randn(2, 2)).ok


def _raise_strict(model):
    with quiet_torch():
        try:
            torch.export.export(model, (torch.randn(2, 2),), strict=True)
        except Exception as exc:
            return exc
    raise AssertionError("exported")


def test_numpy_on_tensor_data_is_unsupported_in_non_strict_and_strict_is_verified() -> None:
    report = check(m.NumpyRoundTrip(), torch.randn(3))
    assert (report.status, report.category) == ("untraceable", "unsupported")
    at(report, "NUMPY")
    assert "NumPy" in report.message
    assert report.suggestion.verified and dict(report.suggestion.options) == {"backend": "export-strict"}


@pytest.mark.skipif(not hasattr(torch.ops.fxtrace_tests, "no_fake"), reason="torch.library.custom_op")
@pytest.mark.parametrize("strict", [False, True], ids=["export", "export-strict"])
def test_an_operator_without_fake_kernel_is_unsupported(strict: bool) -> None:
    report = check(m.NoFakeKernel(), torch.randn(3), strict=strict)
    assert (report.status, report.category) == ("untraceable", "unsupported")
    at(report, "NO-FAKE")
    assert "register_fake" in report.suggestion.text
    assert not report.suggestion.verified


def test_a_model_fx_cannot_trace_exports() -> None:
    from pytest_fxtrace import check_traceable

    assert check_traceable(m.UsesLen(), (torch.randn(2, 3),)).category == "len"
    report = check(m.UsesLen(), torch.randn(2, 3))
    assert report.ok and report.status == "passed", report.describe()
    assert report.calls == 1 and report.code


@pytest.mark.parametrize(
    "source, control",
    [
        ("if x.sum() > 0:", True),
        ("elif n:", True),
        ("while k > 0:", True),
        ("assert x.all()", True),
        ("y = a if x.any() else b", True),
        ("ok = bool(x.max())", True),
        ("n = int(x.sum())", False),
        ("return x.view(n, -1)", False),
    ],
)
def test_a_statement_decides_control_flow_by_its_construct(source: str, control: bool) -> None:
    assert decides_control_flow(source) is control


# --- torch's output -----------------------------------------------------------------------------


def test_torch_s_partial_graph_and_logs_do_not_reach_the_test_output(capfd, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    torch_logger = logging.getLogger("torch")
    before = (list(torch_logger.handlers), torch_logger.propagate)
    report = check(m.Branch(), torch.randn(4, 4))
    assert report.category == "control-flow"
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # torch prints the partial graph to stderr on failure
    assert not [r for r in caplog.records if r.name.startswith("torch")]
    assert (list(torch_logger.handlers), torch_logger.propagate) == before


def test_quiet_torch_keeps_what_it_held_back() -> None:
    import sys

    with quiet_torch() as held:
        print("partial graph", file=sys.stderr)
        logging.getLogger("torch.export").warning("a torch warning")
    assert "partial graph" in held.lines() and "a torch warning" in held.lines()


# --- dynamic shapes -------------------------------------------------------------------------------


def test_two_batch_sizes_give_one_program_with_a_dynamic_batch() -> None:
    model = m.Block()
    report, _ = check_calls(model, [((torch.randn(2, 4),), {}), ((torch.randn(5, 4),), {}), ((torch.randn(3, 4),), {})])
    assert report.ok, report.describe()
    assert report.calls == 3
    assert re.search(r"#   x: user input f32\[s\d+, 4\]", report.code)  # the batch is a symbol
    assert "# dynamic dimensions" in report.code


def test_two_image_sizes_make_both_spatial_dimensions_dynamic() -> None:
    model = m.Conv().eval()
    calls = [((torch.randn(1, 3, 16, 16),), {}), ((torch.randn(1, 3, 24, 20),), {})]
    report, _ = check_calls(model, calls)
    assert report.ok, report.describe()
    assert re.search(r"#   images: user input f32\[1, 3, s\d+, s\d+\]", report.code)


def test_nested_inputs_by_keyword_vary_and_share_a_program() -> None:
    model = m.Pair()
    calls = [
        ((), {"inputs": {"a": torch.randn(2, 2), "b": torch.randn(3)}, "extra": [torch.randn(4)]}),
        ((), {"inputs": {"a": torch.randn(5, 2), "b": torch.randn(6)}, "extra": [torch.randn(7)]}),
    ]
    report, _ = check_calls(model, calls)
    assert report.ok, report.describe()
    assert re.search(r"#   inputs_a: user input f32\[s\d+, 2\]", report.code)
    assert re.search(r"#   inputs_b: user input f32\[s\d+\]", report.code)
    assert re.search(r"#   extra_0: user input f32\[s\d+\]", report.code)


def test_a_dimension_export_fixes_anyway_is_specialization_naming_input_and_dimension() -> None:
    report, _ = check_calls(m.UsesLen(), [((torch.randn(2, 3),), {}), ((torch.randn(5, 3),), {})])
    assert (report.status, report.category) == ("mismatch", "specialization")
    assert "dimension 0 of `x`" in report.message and "(2, 5)" in report.message
    at(report, "LEN")
    assert report.suggestion.verified
    assert dict(report.suggestion.options) == {"backend": "export", "dynamic": False}


def test_a_program_that_refuses_an_earlier_size_is_specialization_at_the_size_branch() -> None:
    report, _ = check_calls(m.BatchOfFour(), [((torch.randn(4, 2),), {}), ((torch.randn(6, 2),), {})])
    assert (report.status, report.category) == ("mismatch", "specialization")
    assert "dimension 0 of `x`" in report.message
    at(report, "SIZE-BRANCH")


def test_static_export_takes_each_size_on_its_own() -> None:
    report, _ = check_calls(
        m.BatchOfFour(), [((torch.randn(4, 2),), {}), ((torch.randn(6, 2),), {})], dynamic=False
    )
    assert report.ok and report.calls == 2, report.describe()


def test_dynamic_true_asks_every_dimension_to_be_dynamic() -> None:
    report, _ = check_calls(m.UsesLen(), [((torch.randn(2, 3),), {})], dynamic=True)
    assert report.category == "specialization"
    assert "dynamic=True" in report.message


# --- replay: the model as each call saw it ------------------------------------------------------


def _run_unchecked(calls):
    torch.manual_seed(7)
    model = m.Counter().train()
    outputs = [model(*args, **kwargs) for args, kwargs in calls]
    return model, outputs, torch.rand(3)


def test_a_buffer_updated_in_forward_is_judged_per_call_and_the_model_is_untouched() -> None:
    calls = [((torch.randn(3, 4),), {"scale": torch.tensor(2.0)}), ((torch.randn(5, 4),), {"scale": torch.tensor(3.0)})]
    plain, plain_outputs, plain_next = _run_unchecked(calls)
    torch.manual_seed(7)
    model = m.Counter().train()
    report, outputs = check_calls(model, calls)
    assert report.ok and report.calls == 2, report.describe()
    torch.testing.assert_close(outputs, plain_outputs)  # dropout drew the same numbers
    torch.testing.assert_close(torch.rand(3), plain_next)  # the test's RNG stream is as unmarked
    assert model.seen.item() == 2 and model.norm.num_batches_tracked.item() == 2
    torch.testing.assert_close(model.state_dict(), plain.state_dict())


def test_a_buffer_rebound_in_forward_is_lost_by_strict_export_and_named() -> None:
    model = m.RebindsCounter()
    report = check(model, torch.randn(3), strict=True)
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    at(report, "REBINDS-BUFFER")
    assert report.message.startswith(
        "RebindsCounter exported, but the exported program's buffer self.calls differs from eager after "
        "recorded call 1: forward rebinds the buffer self.calls to a new tensor, which strict export "
        "(TorchDynamo) leaves out of the program"
    ), report.message
    assert report.message.endswith(f"`self.calls = self.calls + 1` at {report.location}")
    assert "@pytest.mark.traceable(backend='export')" in report.message
    assert model.calls.item() == 0  # the check leaves the model as it was
    assert check(m.RebindsCounter(), torch.randn(3)).ok  # non-strict export records the rebinding


def test_a_failed_export_leaves_no_hook_behind_for_the_model_or_the_next_check() -> None:
    """torch 2.12's non-strict export registers a global buffer hook and keeps it when the
    export fails: the user's model then failed in eager ("expected FakeTensor") and a later
    strict check of any model that rebinds a buffer stopped at GB0007 (tox env tests-torch212)."""
    from torch.nn.modules import module as nn_module

    hooks = dict(getattr(nn_module, "_global_buffer_registration_hooks", {}))
    failing = m.Branch()
    assert not check(failing, torch.randn(3)).ok  # a data-dependent branch: export fails
    assert dict(getattr(nn_module, "_global_buffer_registration_hooks", {})) == hooks
    counter = m.RebindsCounter()
    counter(torch.randn(3))  # eager, as the test goes on
    assert counter.calls.item() == 1
    report = check(m.RebindsCounter(), torch.randn(3), strict=True)
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()


@pytest.mark.parametrize("strict", [False, True], ids=["export", "export-strict"])
def test_a_buffer_counter_the_program_updates_is_judged_equal_to_eager(strict: bool) -> None:
    model = m.InPlaceCounter()
    report, _ = check_calls(model, [((torch.randn(3),), {}), ((torch.randn(3),), {})], strict=strict)
    assert report.ok and report.calls == 2, report.describe()
    assert model.calls.item() == 2  # the test's own two calls


def test_train_and_eval_calls_get_a_program_each() -> None:
    model = m.Counter()
    x = torch.randn(3, 4)
    report, (train, evaluated) = check_calls_switching(model, x)
    assert report.ok and report.calls == 2, report.describe()
    assert not torch.equal(train["out"], evaluated["out"])  # dropout and batch statistics only in train mode


def check_calls_switching(model, x):
    checks = TestChecks(resolve_options(("test", {"backend": "export"})))
    with recording(checks.observer_for, checks.internal_error):
        train = model.train()(x)
        evaluated = model.eval()(x)
    (report,) = checks.finish()
    return report, (train, evaluated)


def test_new_weights_bound_between_calls_are_exported_again() -> None:
    model = m.Block().eval()
    checks = TestChecks(resolve_options(("test", {"backend": "export"})))
    x = torch.randn(2, 4)
    with recording(checks.observer_for, checks.internal_error):
        first = model(x)
        model.lin = torch.nn.Linear(4, 4)
        second = model(x)
    (report,) = checks.finish()
    assert report.ok and report.calls == 2, report.describe()
    assert not torch.equal(first, second)


def test_exported_code_is_stable_between_exports() -> None:
    texts = {export_code(torch.export.export(m.Counter().eval(), (torch.randn(3, 4),))) for _ in range(2)}
    (text,) = texts
    assert "b_seen: buffer seen f32[]" in text and "x: user input f32[3, 4]" in text and "def forward(" in text and " at 0x" not in text


# --- localization --------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["export", "export-strict"])
def test_a_failing_head_leaves_the_backbone_exportable(strict: bool) -> None:
    report = check(m.Detector(), torch.randn(2, 4), strict=strict)
    assert report.category == "control-flow"
    assert report.module == "head.1" and report.module_type == "Gate"
    at(report, "GATE")
    collection = report.localization
    assert collection.records["backbone"].status == "traced"
    assert collection.records["head.0"].status == "traced"
    assert [r.path for r in collection.deepest_failures()] == ["head.1"]
    assert 0.7 < report.coverage < 1.0  # the Gate has no parameters; head.0 is exported alone
    assert "backbone (Sequential)" in report.describe()


def test_a_strict_failure_in_one_of_two_siblings_of_a_class_is_found() -> None:
    report = check(m.Twins(), torch.randn(2, 4), strict=True)
    assert report.module == "second.0", report.describe()


@pytest.mark.parametrize("backend", ["export", "export-strict"])
def test_a_data_read_in_forward_is_unsupported_at_its_statement_with_the_fix(backend):
    # plain torch: non-strict raises, strict exports a program that returns fake tensors
    if backend == "export":
        with pytest.raises(RuntimeError, match="fake tensor in the exported program constant"):
            torch.export.export(m.DataRead(), (torch.randn(2, 4),), strict=False)
    else:
        out = torch.export.export(m.DataRead(), (torch.randn(2, 4),), strict=True).module()(torch.randn(2, 4))
        assert type(out).__name__ == "FakeTensor"
    report = check_traceable(m.DataRead().eval(), (torch.randn(2, 4),), backend=backend)
    assert (report.status, report.category) == ("untraceable", "unsupported"), report.describe()
    assert report.location.line == m.line_of("# DATA-READ")
    assert "reads a tensor's .data, which export cannot trace through" in report.message
    assert "use the tensor itself instead of .data" in report.describe()
