"""Bad input and runaway checks: one clear error each, and the user's model untouched.

Engine tests run in-process on tiny models; the plugin's side (usage errors at
collection, the fixture's messages, the time limit from the ini file) runs through
``pytester`` in a subprocess, as users meet it.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import textwrap
import time

import pytest
import torch
import torch.nn as nn

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.compare import compare_outputs
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import OptionError, TraceOptions, resolve_options
from pytest_fxtrace.timelimit import CheckTimeout, time_limit


def snapshot(model: nn.Module) -> dict:
    """Everything a check must leave alone: values, the objects themselves, flags, hooks."""
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "tensors": {k: id(v) for k, v in model.state_dict(keep_vars=True).items()},
        "modules": [(name, type(m), m.training, dict(m.__dict__).keys()) for name, m in model.named_modules()],
        "hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()],
    }


def assert_unchanged(model: nn.Module, before: dict) -> None:
    after = snapshot(model)
    assert after["tensors"] == before["tensors"]
    assert after["modules"] == before["modules"]
    assert after["hooks"] == before["hooks"]
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), key
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl  # nothing left patched


def run_marked(model: nn.Module, *inputs: torch.Tensor, **options) -> list:
    """The zero-code path without pytest: record the calls a test body makes, then check."""
    checks = TestChecks(TraceOptions(**options))
    with recording(checks.observer_for):
        model(*inputs)
    return checks.finish()


# -- what is handed to the check ------------------------------------------------------


def resnet_builder() -> nn.Module:
    return nn.Linear(2, 2)


@pytest.mark.parametrize(
    ("thing", "says"),
    [
        (resnet_builder, "got the function resnet_builder: pass the model it builds (resnet_builder())"),
        (nn.Linear, "got the class Linear: pass an instance, e.g. Linear()"),
        (None, "got NoneType None: pass the model first, then its inputs, e.g. fxtrace(model, x)"),
        (3, "got int 3: pass the model first"),
        ("resnet18", "got str 'resnet18': pass the model first"),
    ],
)
def test_a_non_module_is_one_type_error_saying_what_to_pass(thing, says):
    with pytest.raises(TypeError) as info:
        check_traceable(thing, (torch.randn(1, 2),))
    assert str(info.value).startswith("expected a torch.nn.Module to check, ")
    assert says in str(info.value)


class Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).view(3, -1)  # EAGER-FAILS: 2x4 does not view as 3 rows


def test_eager_forward_raising_is_model_error_not_untraceable():
    model = Raises()
    before = snapshot(model)
    report = check_traceable(model, (torch.randn(2, 4),))
    assert (report.status, report.category, report.ok) == ("model-error", None, False)
    assert report.message.startswith(
        f"Raises raised when run eagerly at {report.location}: not a traceability problem"
    )
    assert report.location.source.startswith("return self.lin(x).view(3, -1)")
    assert report.error.startswith("RuntimeError: shape '[3, -1]' is invalid")
    assert_unchanged(model, before)


# -- outputs ----------------------------------------------------------------------------


class Point:
    def __init__(self, x):
        self.x = x


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    n: int


class Returns(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return {
            "none": None,
            "int": 3,
            "size": y.shape[0],
            "str": "logits",
            "dataclass": Pair(y, 2),
            "mix": {"a": [y, None, (1, "s", 2.5)], "b": {"c": y * 2, "d": (None,)}},
            "object": Point(y),
            "nested-object": [y, {"p": Point(y)}],
        }[self.kind]


@pytest.mark.parametrize("kind", ["none", "int", "size", "str", "dataclass", "mix"])
def test_plain_python_outputs_and_nested_mixes_are_compared_and_pass(kind):
    model = Returns(kind)
    before = snapshot(model)
    report = check_traceable(model, (torch.randn(2, 4),))
    assert report.ok, report.describe()
    assert report.message.startswith("Returns traced (")
    assert_unchanged(model, before)


@pytest.mark.parametrize("kind", ["object", "nested-object"])
def test_a_custom_object_output_is_untraceable_naming_its_type_and_the_fix(kind):
    model = Returns(kind)
    before = snapshot(model)
    report = check_traceable(model, (torch.randn(2, 4),))
    assert report.status == "untraceable"
    assert report.error == (
        "TypeError: torch.fx cannot record a test_hardening.Point object in the graph (as an output or "
        "an argument); use tensors, numbers, strings, None, or tuples, lists, dicts, dataclasses and "
        "namedtuples of them, or teach the tracer the type with pytest_fxtrace.Tracer.register_arg_type"
    )
    assert report.message.startswith("Returns is not traceable")
    assert "NotImplementedError" not in report.describe()
    assert_unchanged(model, before)


class NonFinite(nn.Module):
    def forward(self, x):
        return torch.stack([x / 0.0, x * float("nan"), x])


def test_nan_and_inf_outputs_in_the_same_places_pass():
    model = NonFinite()
    report = check_traceable(model, (torch.tensor([1.0, -1.0, 0.5]),))
    assert report.ok, report.describe()


class NanWhenTraced(nn.Module):
    """Computes NaN only in the graph (its Python sees a Proxy while tracing)."""

    def forward(self, x):
        if isinstance(x, torch.fx.Proxy):
            return x * float("nan")
        return x * 1.0


def test_nan_where_eager_is_finite_is_a_mismatch_that_says_so():
    model = NanWhenTraced()
    report = check_traceable(model, (torch.ones(2, 4),))
    assert report.status == "mismatch"
    assert report.difference.message == "output: traced gives NaN at 8 of 8 positions where eager gives a finite value"
    assert "max abs error" not in report.describe()  # no finite error to quote


def quantized(values: list[float], scale: float = 0.1, zero_point: int = 0) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.tensor(values), scale, zero_point, torch.quint8)


def test_quantized_outputs_are_compared_dequantized_and_quote_the_error():
    difference = compare_outputs(quantized([0.0, 1.0, 2.5, 3.0]), quantized([0.0, 1.0, 2.0, 3.0]))
    assert difference.message.startswith("output: dequantized: Tensor-likes are not close!"), difference.message
    assert (difference.max_abs_error, difference.max_rel_error) == pytest.approx((0.5, 0.25))
    assert compare_outputs(quantized([0.0, 1.0]), quantized([0.0, 1.0])) is None


@pytest.mark.parametrize(
    ("traced", "said"),
    [
        (dict(scale=0.05), "scale 0.05 and zero_point 0, eager with scale 0.1 and zero_point 0"),
        (dict(zero_point=3), "scale 0.1 and zero_point 3, eager with scale 0.1 and zero_point 0"),
    ],
    ids=["scale", "zero_point"],
)
def test_quantized_outputs_equal_in_value_but_quantized_otherwise_differ_and_say_how(traced, said):
    # the same values: the graph computed other quantization parameters than eager did
    difference = compare_outputs(quantized([0.0, 1.0, 2.0], **traced), quantized([0.0, 1.0, 2.0]))
    assert difference is not None and difference.message == f"output: traced is quantized with {said}"
    assert difference.max_abs_error == 0.0


def test_quantized_outputs_per_tensor_and_per_channel_differ_naming_both_schemes():
    values = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    per_channel = torch.quantize_per_channel(values, torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0, torch.quint8)
    per_tensor = torch.quantize_per_tensor(values, 0.1, 0, torch.quint8)
    difference = compare_outputs(per_tensor, per_channel)
    assert difference.message.startswith(
        "output: traced is quantized per_tensor_affine, eager per_channel_affine"
    ), difference.message
    other = torch.quantize_per_channel(values, torch.tensor([0.1, 0.4]), torch.tensor([0, 1]), 0, torch.quint8)
    assert compare_outputs(other, per_channel).message.startswith(
        "output: traced is quantized per channel (axis 0) with other parameters than eager at 1 of 2 channels; "
        "channel 1: scale 0.4 and zero_point 1, eager scale 0.2 and zero_point 1"
    ), compare_outputs(other, per_channel).message


def test_complex_outputs_error_figures_count_the_imaginary_part():
    eager = torch.tensor([1 + 1j, 2 + 2j])
    difference = compare_outputs(eager + torch.tensor([0, 1j]), eager)
    assert difference.max_abs_error == pytest.approx(1.0)
    assert difference.max_rel_error == pytest.approx(1 / abs(2 + 2j))


class ImaginaryNoise(nn.Module):
    def forward(self, x):
        return x + 1j * torch.randn(4)  # drawn once while tracing: a constant in the graph


def test_a_complex_mismatch_in_the_imaginary_part_quotes_its_size():
    report = check_traceable(ImaginaryNoise(), (torch.zeros(4, dtype=torch.cfloat),))
    assert report.status == "mismatch"
    assert report.difference.max_abs_error > 0.01, report.describe()


# -- devices and structure ---------------------------------------------------------------


def test_inputs_on_another_device_than_the_model_is_model_error_naming_both_devices():
    model = nn.Sequential(nn.Linear(4, 4)).to("meta")
    before_devices = {p.device for p in model.parameters()}
    report = check_traceable(model, (torch.randn(2, 4),))
    assert report.status == "model-error"
    assert report.message.endswith(
        "its inputs are on cpu but its parameters and buffers are on meta: move the inputs to the "
        "model's device (x.to('meta')) or the model to the inputs'"
    )
    assert {p.device for p in model.parameters()} == before_devices


class Grows(nn.Module):
    """Registers a submodule on its first call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if not hasattr(self, "extra"):
            self.extra = nn.Linear(4, 4)
        return self.extra(self.lin(x))  # GROWS


def test_a_model_that_adds_a_submodule_in_forward_is_untraceable_and_left_as_it_was():
    model = Grows()
    before = snapshot(model)
    report = check_traceable(model, (torch.randn(2, 4),))
    assert (report.status, report.category) == ("untraceable", "unregistered-module")
    assert report.location.source.startswith("return self.extra(self.lin(x))")
    assert "register the module in __init__" in report.describe()
    assert not hasattr(model, "extra")
    assert_unchanged(model, before)


def test_in_zero_code_mode_a_growing_model_keeps_what_its_own_call_added():
    model = Grows()
    (report,) = run_marked(model, torch.randn(2, 4))
    assert report.category == "unregistered-module"
    assert isinstance(model.extra, nn.Linear)  # the test's own eager call added it; it stays


def test_a_lazy_module_initialised_by_the_check_behaves_as_after_its_first_call():
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    x = torch.randn(2, 4)
    report = check_traceable(model, (x,))
    assert report.ok, report.describe()
    assert type(model[0]) is nn.Linear and model[0].weight.shape == (3, 4)
    assert model(x).shape == (2, 3)


# -- the per-check time limit -------------------------------------------------------------


class TracesForever(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        x = self.lin(x)
        while isinstance(x, torch.fx.Proxy):  # LOOPS-WHILE-TRACING
            x = x + 0
        return x


def test_a_trace_that_never_ends_is_stopped_at_the_time_limit_and_named():
    model = TracesForever()
    before = snapshot(model)
    report = check_traceable(model, (torch.randn(2, 4),), timeout=0.3)
    assert (report.status, report.category) == ("timeout", None)
    assert report.message.startswith(
        "TracesForever: tracing did not finish within timeout=0.3 s, interrupted at "
    )
    assert report.location.source.startswith(("while isinstance(x, torch.fx.Proxy)", "x = x + 0"))
    assert "raise the limit (timeout=, --fx-timeout, ini fxtrace_timeout) or make the model a leaf" in report.message
    assert_unchanged(model, before)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


CALLS: list[int] = []  # outside the model: a check restores the model's own attributes


class SpinsOnSecondCall(nn.Module):
    """A leaf that returns on the test's call and spins on the replay's."""

    def forward(self, x):
        CALLS.append(1)
        while len(CALLS) > 1:  # SPINS
            pass
        return x * 2


class Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.spin = SpinsOnSecondCall()

    def forward(self, x):
        return self.spin(x) + 1


def test_a_replay_that_never_ends_is_stopped_at_the_time_limit():
    model = Holder()
    before = snapshot(model)
    CALLS.clear()
    (report,) = run_marked(model, torch.randn(2, 4), timeout=0.3, leaf_modules=("spin",))
    assert (report.status, report.category) == ("timeout", None)
    assert report.message.startswith("Holder: checking the traced module did not finish within timeout=0.3 s")
    assert report.location.source.startswith(("while len(CALLS) > 1", "pass"))
    assert len(CALLS) == 2  # the test's call, then the replay that was stopped
    assert_unchanged(model, before)


def test_a_timeout_speaks_of_the_backend_s_own_capture():
    """An export that never ends is "exporting", not "tracing" (non-strict export runs forward's
    Python: the second call spins)."""
    if _compat.export_problem() is not None:
        pytest.skip(str(_compat.export_problem()))
    model = Holder()
    CALLS.clear()
    (report,) = run_marked(model, torch.randn(2, 4), timeout=0.3, backend=("export",))
    assert report.status == "timeout"
    assert report.message.startswith("Holder: exporting did not finish within timeout=0.3 s"), report.message


def test_no_time_limit_by_default():
    assert TraceOptions().timeout is None
    assert resolve_options(("ini fxtrace_timeout", {"timeout": "2.5"})).timeout == 2.5
    with pytest.raises(OptionError, match=r"ini fxtrace_timeout: timeout: expected a number, got 'soon'"):
        resolve_options(("ini fxtrace_timeout", {"timeout": "soon"}))


def test_time_limit_keeps_an_alarm_armed_by_someone_else():
    fired = []
    outer = signal.signal(signal.SIGALRM, lambda *_: fired.append("outer"))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.4)
        with time_limit(5):  # ours is longer: the outer alarm still fires, through its handler
            deadline = time.monotonic() + 2
            while not fired and time.monotonic() < deadline:
                time.sleep(0.01)
        assert fired == ["outer"]
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with time_limit(0.1), pytest.raises(CheckTimeout):  # ours is shorter: it fires first
            time.sleep(2)
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5  # the outer one is re-armed
        deadline = time.monotonic() + 2
        while len(fired) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fired == ["outer", "outer"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)


# -- through pytest ----------------------------------------------------------------------

USER_TESTS = """
import pytest, torch, torch.nn as nn


class Point:
    def __init__(self, x):
        self.x = x


class ReturnsPoint(nn.Module):
    def forward(self, x):
        return Point(x * 2)


class Spins(nn.Module):
    def forward(self, x):
        while isinstance(x, torch.fx.Proxy):
            x = x + 0
        return x


def make_model():
    return nn.Linear(4, 4)


def test_fixture_given_the_builder(fxtrace):
    fxtrace(make_model, torch.randn(2, 4))


def test_fixture_given_none(fxtrace):
    fxtrace(None, torch.randn(2, 4))


def test_fixture_on_another_device(fxtrace):
    fxtrace(nn.Linear(4, 4).to("meta"), torch.randn(2, 4))


@pytest.mark.traceable
def test_custom_output():
    ReturnsPoint()(torch.randn(2, 4))


@pytest.mark.traceable
def test_spins_under_the_ini_limit():
    Spins()(torch.randn(2, 4))
"""


def test_bad_input_through_pytest_gives_one_clear_failure_each(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nfxtrace_timeout = 0.5\n")
    pytester.makepyfile(test_bad=USER_TESTS)
    result = pytester.runpytest_subprocess("--fx-report=report.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=5)
    out = result.stdout.str()
    for line in (
        "*test_fixture_given_the_builder*",
        "*pytest-fxtrace: expected a torch.nn.Module to check, got the function make_model: pass the "
        "model it builds (make_model()), or wrap a plain function in an nn.Module",
        "*test_fixture_given_none*",
        "*pytest-fxtrace: expected a torch.nn.Module to check, got NoneType None: pass the model first*",
        "*Linear raised when run eagerly: not a traceability problem, the model itself fails: its inputs "
        "are on cpu but its parameters and buffers are on meta*",
        "*ReturnsPoint is not traceable*",
        "*error: TypeError: torch.fx cannot record a test_bad.Point object in the graph*",
        "*Spins: tracing did not finish within timeout=0.5 s, interrupted at test_bad.py:*",
    ):
        result.stdout.fnmatch_lines([line])
    assert "Traceback" not in out and "site-packages/torch" not in out
    report = json.loads((pytester.path / "report.json").read_text())
    statuses = {r["nodeid"].rpartition("::")[2]: r["status"] for r in report["results"]}
    assert statuses == {
        "test_fixture_on_another_device": "model-error",
        "test_custom_output": "untraceable",
        "test_spins_under_the_ini_limit": "timeout",
    }


def test_fx_timeout_on_the_command_line_must_be_a_number(pytester: pytest.Pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--fx-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-fxtrace: command line: timeout: expected a number, got 'soon'*"])


MODELS_WITH_LEAF = """
import torch.nn as nn


class DynamicPad(nn.Module):
    def forward(self, x):
        return x
"""


def test_a_leaf_name_that_matches_no_class_is_a_usage_error_naming_the_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        mymodels=MODELS_WITH_LEAF,
        test_leaf=textwrap.dedent(
            """
            import pytest
            from mymodels import DynamicPad

            @pytest.mark.traceable(leaf_modules=["DynamicPadd", "backbone.body"])
            def test_typo():
                DynamicPad()
            """
        ),
    )
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_leaf.py::test_typo: @pytest.mark.traceable: leaf_modules: 'DynamicPadd' matches no "
            "nn.Module class (did you mean 'DynamicPad'*)? Write the class name as defined*"
        ]
    )


def test_an_unimportable_dotted_leaf_in_the_ini_is_a_usage_error_naming_the_ini_line(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nfxtrace_leaf_modules =\n    backbone.body\n    mymodels.DynamicPadd\n")
    pytester.makepyfile(mymodels=MODELS_WITH_LEAF, test_x="def test_x():\n    pass\n")
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*pytest-fxtrace: ini fxtrace_leaf_modules: leaf_modules: 'mymodels.DynamicPadd' matches no nn.Module class*"]
    )


def test_a_dotted_leaf_path_that_imports_is_accepted(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nfxtrace_leaf_modules =\n    mymodels.DynamicPad\n")
    pytester.makepyfile(
        mymodels=MODELS_WITH_LEAF,
        test_x=textwrap.dedent(
            """
            import pytest, torch, torch.nn as nn
            from mymodels import DynamicPad

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.pad = DynamicPad()
                def forward(self, x):
                    return self.pad(x) + 1

            @pytest.mark.traceable(leaf_modules=["DynamicPad"])
            def test_x():
                Net()(torch.ones(2))
            """
        ),
    )
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_an_unimportable_tracer_in_the_marker_is_a_usage_error_naming_the_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        "import pytest\n@pytest.mark.traceable(tracer='nowhere.mod:Tracer')\ndef test_t():\n    pass\n"
    )
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*::test_t: @pytest.mark.traceable: tracer: cannot import module 'nowhere.mod'*Check the spelling*"]
    )


def test_check_traceable_with_snapshot_outside_a_test_says_where_snapshots_work():
    where = r"check_traceable\(snapshot=True\).*@pytest.mark.traceable\(snapshot=True\)"
    with pytest.raises(OptionError, match=where):
        check_traceable(nn.Linear(2, 2), (torch.randn(1, 2),), snapshot=True)


# -- a named module that exists but fails to import (issue 16, item 8) ----------------------------


def _acme_models(pytester: pytest.Pytester) -> None:
    """``acme_models`` exists, but its own ``import`` of a missing dependency fails
    (as a model package does when torchvision is not installed)."""
    package = pytester.mkpydir("acme_models")
    (package / "__init__.py").write_text("import torch\nimport not_installed_vision  # torchvision, say\n")
    (package / "segmentation.py").write_text(
        "import torch.nn as nn\n\nclass PadToMultiple(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    (package / "tracers.py").write_text("import torch.fx\n\nclass AcmeTracer(torch.fx.Tracer):\n    pass\n")
    (package / "ops.py").write_text("def helper(x):\n    return x\n")
    pytester.syspathinsert()


@pytest.mark.parametrize(
    ("ini", "option"),
    [
        ("fxtrace_leaf_modules = acme_models.segmentation.PadToMultiple", "leaf_modules"),
        ("fxtrace_tracer = acme_models.tracers:AcmeTracer", "tracer"),
        ("fxtrace_autowrap_functions = acme_models.ops:helper", "autowrap_functions"),
    ],
    ids=["leaf", "tracer", "autowrap"],
)
def test_a_named_module_that_fails_to_import_says_so_with_the_import_error(
    pytester: pytest.Pytester, ini: str, option: str
):
    _acme_models(pytester)
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    module = "acme_models.segmentation" if option == "leaf_modules" else ini.split("= ")[1].split(":")[0]
    result.stderr.fnmatch_lines(
        [
            f"*pytest-fxtrace: ini fxtrace_{ini.split()[0][8:]}: {option}: module '{module}'*failed to import: "
            "ModuleNotFoundError: No module named 'not_installed_vision' (raised at acme_models/__init__.py:2)*"
            "install 'not_installed_vision' in this environment*"
        ]
    )
    err = result.stderr.str()
    assert "matches no nn.Module class" not in err and "Check the spelling" not in err
    assert "Traceback" not in err


def test_a_marker_leaf_in_a_module_that_fails_to_import_says_so(pytester: pytest.Pytester):
    _acme_models(pytester)
    pytester.makepyfile(
        test_x=textwrap.dedent(
            """
            import pytest

            @pytest.mark.traceable(leaf_modules=["acme_models.segmentation.PadToMultiple"])
            def test_x():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_x.py::test_x: @pytest.mark.traceable: leaf_modules: module 'acme_models.segmentation' "
            "(from 'acme_models.segmentation.PadToMultiple') failed to import: ModuleNotFoundError: *"
        ]
    )
