"""What a replay starts from and what it leaves, against plain torch: a leaf that rebinds its
own buffer, a forward that writes into its input or into a parameter, and several updates lost
in one call. Each verdict is the one plain torch.fx / torch.compile gives (checked in the test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optional
import pytest
import torch
import torch.fx
import torch.nn as nn

from pytest_fxtrace import TraceReport, _compat, check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import resolve_options

needs_compile = pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem()))
needs_export = pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))


def checked(body: Callable[[], None], backend: str = "fx", **options: Any) -> list[TraceReport]:
    """The marker's reports for the calls ``body`` makes (the engine half, no pytest session)."""
    checks = TestChecks(resolve_options(("test", {"backend": backend, **options})))
    with recording(checks.observer_for):
        body()
    return checks.finish()


class Cache(nn.Module):
    """timm's ConViT GPSA in small: a leaf whose forward rebinds its own buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.zeros(1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.table.shape[1] != x.shape[1]:
            self.table = torch.ones(1, x.shape[1])
        return x * self.table


class CacheNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache = Cache()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cache(self.lin(x))


class RebindingNorm(nn.Module):
    """A batch-norm reimplementation that rebinds its statistics instead of updating them in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.running_mean = 0.9 * self.running_mean + 0.1 * x.mean(0).detach()
        return x - self.running_mean


def plain_fx(model: nn.Module, leaves: tuple[type, ...] = ()) -> torch.fx.GraphModule:
    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, leaves) or super().is_leaf_module(m, qualname)

    return torch.fx.GraphModule(model, Tracer().trace(model))


def test_a_leaf_rebinding_its_own_buffer_is_updated_by_the_graph_module_as_by_eager() -> None:
    x = torch.randn(2, 4)
    # plain torch.fx: the GraphModule calls the leaf, whose forward rebinds the buffer as eager's does
    eager, traced = CacheNet().eval(), CacheNet().eval()
    traced.load_state_dict(eager.state_dict())
    gm = plain_fx(traced, (Cache,))
    assert torch.equal(gm(x), eager(x))
    assert gm.cache.table.shape == eager.cache.table.shape == (1, 4)

    model = CacheNet().eval()
    report = check_traceable(model, (x,), leaf_modules=[Cache])
    assert report.status == "passed", report.describe()
    assert model.cache.table.shape == (1, 1)  # the check leaves the user's model as it was


@pytest.mark.slow
@optional.needs("timm")
def test_timm_convit_with_its_notrace_leaves_passes_as_with_plain_torch_fx() -> None:
    import timm
    from timm.layers import get_notrace_functions, get_notrace_modules

    leaves, functions = tuple(get_notrace_modules()), list(get_notrace_functions())
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))

    def build() -> nn.Module:
        torch.manual_seed(0)
        return timm.create_model("convit_tiny", pretrained=False, img_size=32, num_classes=10).eval()

    eager, traced = build(), build()
    gm = plain_fx(traced, leaves)  # GPSA rebinds rel_indices in its forward, as a leaf in both
    assert torch.allclose(gm(x), eager(x))
    assert gm.get_submodule("blocks.0.attn").rel_indices.shape == eager.blocks[0].attn.rel_indices.shape == (1, 4, 4, 3)
    report = check_traceable(build(), (x,), leaf_modules=list(leaves), autowrap_functions=functions)
    assert report.status == "passed", report.describe()


def test_a_rebinding_the_graph_module_loses_is_still_a_mismatch_naming_the_buffer() -> None:
    x = torch.randn(4, 3)
    eager, traced = RebindingNorm().train(), RebindingNorm().train()
    try:
        gm = plain_fx(traced)
    except TypeError:  # torch 2.1: nn.Module refuses a Proxy as a buffer, so plain torch.fx cannot trace it
        report = check_traceable(RebindingNorm().train(), (x,))
        assert report.status == "untraceable", report.describe()  # as plain torch.fx
        return
    assert torch.equal(gm(x), eager(x))
    assert not torch.equal(gm(x), eager(x))  # plain torch.fx loses the update: the next call differs
    report = check_traceable(RebindingNorm().train(), (x,))
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    assert "buffer self.running_mean differs from eager" in report.message


@needs_compile
def test_compile_keeps_a_rebound_buffer_as_eager_does() -> None:
    x = torch.randn(4, 3)
    eager, compiled_model = RebindingNorm().train(), RebindingNorm().train()
    torch.compiler.reset()
    compiled = torch.compile(compiled_model, backend="eager")
    assert torch.equal(compiled(x), eager(x))
    assert torch.equal(compiled_model.running_mean, eager.running_mean)  # plain torch.compile keeps it
    torch.compiler.reset()

    model = RebindingNorm().train()
    report = check_traceable(model, (x,), backend="compile")
    assert report.status == "passed", report.describe()
    assert torch.equal(model.running_mean, torch.zeros(3))


class TwoUpdates(nn.Module):
    """Two updates of buffers by ops on the buffers alone: torch.fx runs both once while tracing."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.ones(3))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.running_mean.mul_(0.9)
        self.calls += 1
        return x * 2


def test_each_update_a_call_loses_is_named_with_its_statement() -> None:
    x = torch.randn(3)
    eager, traced = TwoUpdates(), TwoUpdates()
    gm = plain_fx(traced)  # the trace ran both updates on `traced`, the GraphModule runs neither
    before = {name: buffer.clone() for name, buffer in gm.named_buffers()}
    gm(x), eager(x)
    assert all(torch.equal(before[name], buffer) for name, buffer in gm.named_buffers())
    assert not torch.equal(eager.running_mean, torch.ones(3)) and eager.calls.item() == 1

    report = check_traceable(TwoUpdates(), (x,))
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    first = report.message.splitlines()[0]
    assert "buffer self.running_mean differs from eager after recorded call 1" in first
    assert "`self.running_mean.mul_(0.9)` at " in first
    assert "also loses the update of the buffer self.calls: `self.calls += 1` at " in first


def test_each_update_lost_before_an_output_differs_is_named() -> None:
    # the same two updates where the output reads the buffers: found by the mismatch's diagnosis
    class Read(TwoUpdates):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.running_mean.mul_(0.9)
            self.calls += 1
            return x * self.running_mean + self.calls

    report = check_traceable(Read(), (torch.randn(3),))
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    first = report.message.splitlines()[0]
    assert "output differs from eager on recorded call 1" in first
    assert report.location is not None and report.location.source == "self.running_mean.mul_(0.9)"
    assert "skips the update of the buffer self.calls too: `self.calls += 1` at " in first


class WritesInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x += 1
        x.mul_(2)
        return x * 3


BACKENDS = ["fx", pytest.param("export", marks=needs_export), pytest.param("compile", marks=needs_compile)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forward_writing_into_its_input_is_replayed_on_the_input_as_it_was(backend: str) -> None:
    x = torch.randn(3)
    # plain torch.fx on a copy of the input eager started from gives eager's output
    assert torch.equal(torch.fx.symbolic_trace(WritesInput())(x.clone()), WritesInput()(x.clone()))

    given = x.clone()
    report = check_traceable(WritesInput(), (given,), backend=backend)
    assert report.status == "passed", report.describe()
    assert torch.equal(given, x)  # the check's own eager run leaves the caller's input as it was

    # the marker: the test's own call wrote into its input; the replay starts from it as it was
    def body() -> None:
        given = x.clone()
        assert torch.equal(WritesInput()(given), (x + 1) * 6)
        assert torch.equal(given, (x + 1) * 2)

    (marked,) = checked(body, backend)
    assert marked.status == "passed", marked.describe()


class MaskedConv(nn.Conv2d):
    """PixelCNN's masked convolution: forward masks its own weight through ``.data``."""

    def __init__(self) -> None:
        super().__init__(1, 2, 3, padding=1)
        self.register_buffer("mask", torch.ones_like(self.weight))
        self.mask[:, :, 2:, :] = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.weight.data *= self.mask
        return super().forward(x)


def masked_pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    first = MaskedConv()
    second = MaskedConv()
    second.load_state_dict(first.state_dict())
    return first, second


def test_a_forward_writing_a_parameter_that_the_graph_drops_is_a_mismatch_naming_it() -> None:
    x = torch.randn(1, 1, 4, 4)
    eager, traced = masked_pair()
    gm = torch.fx.symbolic_trace(traced)  # plain torch.fx drops the statement: on a fresh model the graph differs
    assert not torch.allclose(gm(x), eager(x))

    model, _ = masked_pair()
    weight = model.weight.detach().clone()
    report = check_traceable(model, (x,))
    assert (report.status, report.category) == ("mismatch", "baked-constant"), report.describe()
    first = report.message.splitlines()[0]
    assert "the GraphModule's parameter self.weight differs from eager after recorded call 1" in first
    assert first.endswith("`self.weight.data *= self.mask` at tests/test_replay_state.py:" + str(line_of("*= self.mask")))
    assert torch.equal(model.weight, weight)  # the check never changes the user's model

    # the marker: the test's model keeps the weight its own call masked
    expected, _ = masked_pair()
    expected(x)

    def body() -> None:
        model, _ = masked_pair()
        model(x)
        assert torch.equal(model.weight, expected.weight)

    (marked,) = checked(body)
    assert marked.status == "mismatch" and "parameter self.weight" in marked.message


@needs_compile
def test_compile_writes_a_parameter_as_eager_does() -> None:
    x = torch.randn(1, 1, 4, 4)
    eager, compiled_model = masked_pair()
    torch.compiler.reset()
    assert torch.allclose(torch.compile(compiled_model, backend="eager")(x), eager(x))
    assert torch.equal(compiled_model.weight, eager.weight)  # plain torch.compile masks it too
    torch.compiler.reset()
    model, _ = masked_pair()
    weight = model.weight.detach().clone()
    report = check_traceable(model, (x,), backend="compile")
    assert report.status == "passed", report.describe()
    assert torch.equal(model.weight, weight)


def line_of(text: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if text in line and "line_of" not in line)
