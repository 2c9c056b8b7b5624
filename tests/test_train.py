"""Train mode (issue 41): each recorded call run forward and backward on the captured program
and on eager, outputs, every parameter's and input's gradient and buffer updates compared
(``train=True``, ini ``fxtrace_train``, ``--fx-train``; a marked test that runs backward on a
recorded output is checked so by itself). Each finding is what plain torch shows: run forward
and ``torch.autograd.grad`` on the model and on the captured program."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import train_models as m

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.compile import problem as compile_problem
from pytest_fxtrace.backends.export import problem as export_problem
from pytest_fxtrace.options import OptionError
from pytest_fxtrace.types import Category, Status

TESTS = Path(__file__).parent
EXPORT = pytest.mark.skipif(export_problem() is not None, reason=str(export_problem()))
COMPILE = pytest.mark.skipif(compile_problem() is not None, reason=str(compile_problem()))


def x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 4)


def model(cls: type[torch.nn.Module], *args: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(*args)


def test_a_custom_backward_that_fx_replaces_is_a_gradient_finding_at_the_apply_line() -> None:
    report = check_traceable(model(m.StraightThrough), (x(),), train=True)
    assert (report.status, report.category) == (Status.MISMATCH, Category.GRADIENT), report.describe()
    assert report.location is not None and report.location.line == m.line_of("STE-APPLY")
    assert "the gradient of fc.weight differs" in report.message and "RoundSTE.backward" in report.message
    assert (report.module, report.module_type) == ("fc", "Linear")
    assert "custom_op" in (report.code_fix or "")
    assert report.train


def test_without_train_mode_the_same_model_passes_its_forward() -> None:
    report = check_traceable(model(m.StraightThrough), (x(),))
    assert report.ok and not report.train, report.describe()


@EXPORT
def test_export_loses_the_custom_backward_too() -> None:
    report = check_traceable(model(m.StraightThrough), (x(),), backend="export", train=True)
    assert report.category == Category.GRADIENT and report.location.line == m.line_of("STE-APPLY"), report.describe()


@COMPILE
def test_compile_runs_the_custom_backward_and_passes() -> None:
    report = check_traceable(model(m.StraightThrough), (x(),), backend="compile", train=True)
    assert report.ok and report.train, report.describe()
    assert "forward and backward" in report.message


def test_a_no_grad_region_fx_loses_is_named_with_its_statement() -> None:
    report = check_traceable(model(m.FrozenEncoder), (x(),), train=True)
    assert report.category == Category.GRADIENT, report.describe()
    assert report.location.line == m.line_of("NO-GRAD")
    assert "eager computes no gradient for encoder.weight" in report.message
    assert report.module == "encoder"


@EXPORT
def test_export_keeps_the_no_grad_region() -> None:
    assert check_traceable(model(m.FrozenEncoder), (x(),), backend="export", train=True).ok


@EXPORT
def test_a_requires_grad_change_export_drops_is_named_with_its_statement() -> None:
    report = check_traceable(model(m.FreezesInForward), (x(),), backend="export", train=True)
    assert report.category == Category.GRADIENT, report.describe()
    assert report.location.line == m.line_of("FREEZE")
    assert "forward changes stem.weight.requires_grad" in report.message
    assert "after forward eager's is False, the exported program's True" in report.message


def test_fx_records_the_requires_grad_change_and_passes() -> None:
    assert check_traceable(model(m.FreezesInForward), (x(),), train=True).ok


@pytest.mark.parametrize("backend", ["fx", pytest.param("export", marks=EXPORT), pytest.param("compile", marks=COMPILE)])
@pytest.mark.parametrize("cls", [m.DropoutNet, m.BatchNormNet])
def test_dropout_and_batch_norm_agree_in_train_mode_on_every_backend(cls, backend) -> None:
    net = model(cls)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    report = check_traceable(net, (x(),), backend=backend, train=True)
    assert report.ok and report.train, report.describe()
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items()), "the check changed the model"


@EXPORT
def test_a_training_only_buffer_update_strict_export_loses_is_found_in_train_mode_only() -> None:
    net = model(m.RunningMean).eval()
    assert check_traceable(net, (x(),), backend="export-strict").ok  # in eval there is no update
    report = check_traceable(net, (x(),), backend="export-strict", train=True)
    assert report.status == Status.MISMATCH and report.location.line == m.line_of("REBIND"), report.describe()
    assert "buffer self.mean differs" in report.message
    assert not net.training, "the check left the model in train mode"


def test_an_in_place_write_to_a_parameter_is_the_model_s_own_error_in_train_mode() -> None:
    net = model(m.ScalesWeightInPlace)
    assert check_traceable(net, (x(),)).ok  # the check's own eager run is under no_grad
    report = check_traceable(net, (x(),), train=True)
    assert report.status == Status.MODEL_ERROR, report.describe()
    assert report.location.line == m.line_of("IN-PLACE-LEAF")
    assert "in train mode" in report.message and "leaf Variable" in report.error


def test_loss_fn_decides_which_outputs_are_differentiated() -> None:
    assert check_traceable(model(m.TwoHeads), (x(),), train=True).category == Category.GRADIENT
    report = check_traceable(model(m.TwoHeads), (x(),), train=True, loss_fn=lambda out: out[0].sum())
    assert report.ok, report.describe()


def test_a_loss_fn_that_returns_no_loss_is_a_usage_error() -> None:
    with pytest.raises(OptionError, match="loss_fn must return a one-element tensor"):
        check_traceable(model(m.TwoHeads), (x(),), train=True, loss_fn=lambda out: out[0])


class Scale(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x * 2
        return y + x


@pytest.mark.parametrize("backend", ["fx", pytest.param("export", marks=EXPORT), pytest.param("compile", marks=COMPILE)])
def test_an_input_that_requires_grad_has_its_gradient_compared_and_agrees(backend: str) -> None:
    inp = x().requires_grad_()
    report = check_traceable(model(torch.nn.Linear, 4, 3), (inp,), train=True, backend=backend)
    assert report.ok, report.describe()
    assert inp.grad is None and inp.is_leaf


def test_an_input_s_gradient_that_differs_is_named() -> None:
    report = check_traceable(Scale(), (x().requires_grad_(),), train=True)  # fx loses the no_grad: 3 against 1
    assert report.category == Category.GRADIENT, report.describe()
    assert "the gradient of input x differs from eager's (max abs error 2)" in report.message


@EXPORT
def test_export_keeps_the_no_grad_region_around_an_input() -> None:
    assert check_traceable(Scale(), (x().requires_grad_(),), train=True, backend="export").ok


def test_gradients_that_differ_by_rounding_of_their_scale_agree() -> None:
    from pytest_fxtrace.compare import compare_outputs
    from pytest_fxtrace.training import Gradients, gradient_differences

    eager = torch.linspace(-300.0, 300.0, 101)
    rounded = eager + torch.where(eager.abs() < 1, 3 * 300 * torch.finfo(torch.float32).eps, 0.0)  # 3 epsilons of the scale
    wrong = eager * 1.01
    same = gradient_differences(Gradients({"w": eager}, {"w": True}), Gradients({"w": rounded}, {"w": True}), compare_outputs, None, None)
    assert same == []
    (found,) = gradient_differences(Gradients({"w": eager}, {"w": True}), Gradients({"w": wrong}, {"w": True}), compare_outputs, None, None)
    assert found.name == "w" and found.difference is not None


def test_a_train_check_leaves_the_model_its_flags_gradients_and_rng_as_they_were() -> None:
    net = model(m.DropoutNet).eval()
    net.fc.weight.requires_grad_(False)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(5)
    rng = torch.get_rng_state()
    report = check_traceable(net, (x(),), train=True)
    torch.manual_seed(5)  # x() reseeds: compare the stream from the same point
    assert report.ok, report.describe()
    assert not any(module.training for module in net.modules())
    assert not net.fc.weight.requires_grad and net.head.weight.requires_grad
    assert all(p.grad is None for p in net.parameters())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.is_grad_enabled()


def test_train_mode_on_onnx_is_a_usage_error_naming_the_backends_that_train() -> None:
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    with pytest.raises(OptionError, match="onnx backend runs no backward"):
        check_traceable(model(m.DropoutNet), (x(),), backend="onnx", train=True)


# -- through pytest ------------------------------------------------------------------------


def _conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n")


def test_a_marked_test_that_runs_backward_is_checked_in_train_mode_by_itself(pytester: pytest.Pytester) -> None:
    _conftest(pytester)
    pytester.makepyfile(
        test_user="""
import pytest, torch
import train_models as m

@pytest.mark.traceable
def test_trains():
    net = m.FrozenEncoder()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):
        net(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()

@pytest.mark.traceable
def test_infers():
    net = m.FrozenEncoder()
    net(torch.randn(8, 4))
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-report=fx.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*FrozenEncoder traced and its output matched eager, but in train mode*encoder.weight*",
        "*note: the test ran backward on a recorded output*",
    ])
    assert f"train_models.py:{m.line_of('NO-GRAD')}" in result.stdout.str()
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((pytester.path / "fx.json").read_text())["results"]}
    assert records["test_trains"]["category"] == "gradient" and records["test_trains"]["train"] is True
    assert "train" not in records["test_infers"]


@pytest.mark.parametrize("how", ["--fx-train", "ini"])
def test_fx_train_and_the_ini_option_turn_train_mode_on(pytester: pytest.Pytester, how: str) -> None:
    _conftest(pytester)
    if how == "ini":
        pytester.makeini("[pytest]\nfxtrace_train = true\n")
    pytester.makepyfile(
        test_user="""
import pytest, torch
import train_models as m

@pytest.mark.traceable
def test_eval_call():
    net = m.StraightThrough().eval()
    with torch.no_grad():
        net(torch.randn(8, 4))
    assert not net.training
"""
    )
    args = ["--fx-train"] if how == "--fx-train" else []
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*in train mode*RoundSTE.backward*"])


def test_a_marker_can_turn_train_mode_off_again(pytester: pytest.Pytester) -> None:
    _conftest(pytester)
    pytester.makepyfile(
        test_user="""
import pytest, torch
import train_models as m

@pytest.mark.traceable(train=False)
def test_forward_only():
    m.StraightThrough()(torch.randn(8, 4))
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-train")
    result.assert_outcomes(passed=1)


def test_a_loss_fn_path_that_does_not_exist_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
import pytest

@pytest.mark.traceable(train=True, loss_fn="nowhere.losses:total")
def test_x():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly")
    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    assert "@pytest.mark.traceable: loss_fn: cannot import module 'nowhere.losses'" in output
    assert "Traceback" not in output
