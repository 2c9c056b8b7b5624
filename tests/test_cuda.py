"""Models on a CUDA device: the marker traces, replays and compares there, under the
CUDA RNG state, autocast and cuDNN settings the test's own call ran with, and leaves the
model and the CUDA RNG stream as they were. Needs a GPU: skipped on machines without one
(CI has none; see README, "On a GPU")."""

from __future__ import annotations

import json

import optional
import pytest
import torch
from torch import nn

from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import TraceOptions

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"), optional.needs("torchvision")]

USER_TESTS = """
import pytest, torch, torchvision
from torch import nn

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))


@pytest.mark.traceable
def test_resnet18_eval():
    model = torchvision.models.resnet18().cuda().eval()
    out = model(X.cuda())
    assert out.device.type == "cuda" and out.shape == (2, 1000)


@pytest.mark.traceable
def test_mobilenet_train_mode():
    model = torchvision.models.mobilenet_v3_small().cuda().train()
    model(X.cuda())
    assert model.features[0][1].num_batches_tracked.item() == 1  # the replay ran on lent buffers


@pytest.mark.traceable
def test_dropout_draws_from_the_cuda_rng():
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5), nn.Linear(64, 8)).cuda().train()
    model(torch.randn(16, 64, device="cuda"))


@pytest.mark.traceable
def test_autocast_bfloat16():
    model = torchvision.models.resnet18().cuda().eval()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(X.cuda())
    assert out.dtype == torch.bfloat16


@pytest.mark.traceable
def test_channels_last_with_cudnn_benchmark():
    torch.backends.cudnn.benchmark = True
    try:
        model = torchvision.models.resnet18().cuda().eval().to(memory_format=torch.channels_last)
        model(X.cuda().to(memory_format=torch.channels_last))
    finally:
        torch.backends.cudnn.benchmark = False


def test_fixture_on_cuda(fxtrace):
    report = fxtrace(torchvision.models.squeezenet1_1().cuda().eval(), X.cuda())
    assert report.ok and report.calls == 1


def test_inputs_left_on_the_cpu(fxtrace):
    fxtrace(torchvision.models.resnet18().cuda().eval(), X)
"""


@pytest.mark.slow
def test_cuda_models_pass_and_cpu_inputs_for_a_cuda_model_are_a_model_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_gpu=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-report=report.json", "-rA")
    result.assert_outcomes(passed=6, failed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    statuses = {r["nodeid"].rpartition("::")[2]: r["status"] for r in report["results"]}
    assert statuses == {
        "test_resnet18_eval": "passed",
        "test_mobilenet_train_mode": "passed",
        "test_dropout_draws_from_the_cuda_rng": "passed",
        "test_autocast_bfloat16": "passed",
        "test_channels_last_with_cudnn_benchmark": "passed",
        "test_fixture_on_cuda": "passed",
        "test_inputs_left_on_the_cpu": "model-error",
    }
    result.stdout.fnmatch_lines(
        [
            "*ResNet raised when run eagerly at *resnet.py:*: not a traceability problem, the model itself fails: its inputs "
            "are on cpu but its parameters and buffers are on cuda:0: move the inputs to the model's device "
            "(x.to('cuda:0')) or the model to the inputs'*"
        ]
    )
    assert "Traceback" not in result.stdout.str()


class DropoutNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.bn = nn.BatchNorm1d(32)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.lin(x)))


def test_a_checked_cuda_call_leaves_model_outputs_and_the_cuda_rng_as_an_unchecked_one():
    torch.manual_seed(0)
    model = DropoutNet().cuda().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(8, 32, device="cuda")

    def run(checked: bool) -> tuple[torch.Tensor, torch.Tensor, dict]:
        model.load_state_dict(state)
        torch.cuda.manual_seed(1234)
        if checked:
            checks = TestChecks(TraceOptions())
            with recording(checks.observer_for):
                out = model(x)
            (report,) = checks.finish()
            assert report.ok and report.calls == 1, report.describe()
        else:
            out = model(x)
        following = torch.rand(4, device="cuda")  # the test's next draw
        return out, following, {k: v.clone() for k, v in model.state_dict().items()}

    plain_out, plain_next, plain_state = run(checked=False)
    out, following, after = run(checked=True)
    assert torch.equal(out, plain_out)  # same dropout mask: the check restored the CUDA RNG
    assert torch.equal(following, plain_next)
    assert plain_state.keys() == after.keys()
    for key, value in plain_state.items():  # BN statistics updated once, by the eager call
        assert torch.equal(after[key], value), key
