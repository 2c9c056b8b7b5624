"""ModelState: what a check saves of a model and puts back, and how it lends buffer
values without ever writing the user's tensors; and the marker path's guarantees
that rest on it (each replay under its own call's state, the user's buffers written
only by the user's own calls)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import ModelState


class Accumulates(nn.Module):
    """Writes its buffer in place on every call, in eval mode too; its output depends
    on the value from before the call. The update takes a traced value, so the graph
    records it (``self.total.add_(1)`` would run once while tracing: a lost update)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        y = self.lin(x) + self.total
        self.total.add_(x.new_ones(4))
        return y


class WritesWhileTracing(nn.Module):
    """``self._buffers[...]`` is the real tensor even while tracing: the trace itself
    writes it, and the graph keeps only ``x + self.b`` -- so the traced module must
    differ from eager (its replay must see the value from before the call)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2))

    def forward(self, x):
        self._buffers["b"].add_(1)
        return x + self.b


def run_recorded(body, **options) -> list:
    checks = TestChecks(TraceOptions(**options))
    with recording(checks.observer_for):
        body()
    return checks.finish()


def with_buffer(value: torch.Tensor) -> nn.Module:
    module = nn.Module()
    module.register_buffer("b", value)
    return module


# -- lending ----------------------------------------------------------------------------


def test_a_lent_copy_written_in_place_is_copied_again_for_the_next_lending():
    model = with_buffer(torch.zeros(3))
    original, version = model.b, model.b._version
    state = ModelState.capture(model)
    with state.lending(state.places, reuse=True):
        assert model.b is not original
        model.b.add_(5)
    assert model.b is original and original._version == version
    with state.lending(state.places, reuse=True):
        assert torch.equal(model.b, torch.zeros(3))
    assert torch.equal(original, torch.zeros(3)) and original._version == version


def test_a_buffer_written_after_the_capture_is_lent_as_fresh_copies_of_its_saved_value():
    model = with_buffer(torch.zeros(3))
    state = ModelState.capture(model)
    model.b.add_(1)  # the user's own call, after the capture
    for _ in range(2):
        with state.lending(state.places, reuse=True):
            assert torch.equal(model.b, torch.zeros(3))
            model.b.mul_(0).add_(7)
    assert torch.equal(model.b, torch.ones(3))


def test_a_buffer_shared_by_two_modules_is_lent_as_one_copy():
    shared = torch.zeros(2)
    model = nn.Sequential(with_buffer(shared), with_buffer(shared))
    state = ModelState.capture(model)
    for reuse in (True, False):
        with state.lending(state.places, reuse=reuse):
            assert model[0].b is model[1].b
            assert model[0].b is not shared
    with state.lent_buffers(model):
        assert model[0].b is model[1].b is not shared


def test_buffers_made_in_inference_mode_are_lent_as_copies():
    with torch.inference_mode():
        model = with_buffer(torch.zeros(2))
    original = model.b
    state = ModelState.capture(model)
    for _ in range(2):
        with torch.inference_mode(), state.lending(state.places, reuse=True):
            assert model.b is not original
            assert torch.equal(model.b, torch.zeros(2))
            model.b.add_(1)
    assert model.b is original and torch.equal(original, torch.zeros(2))


def test_lent_buffers_under_a_submodule_walks_it():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    state = ModelState.capture(model)
    original = model[1].running_mean
    with state.lent_buffers(model[1]) as lent:
        assert model[1].running_mean is not original
        assert lent[id(model[1].running_mean)] is original
    assert model[1].running_mean is original


# -- attributes ---------------------------------------------------------------------------


def test_capture_leaves_every_attribute_as_it_was():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    before = [list(vars(m).items()) for m in model.modules()]
    ModelState.capture(model)
    after = [list(vars(m).items()) for m in model.modules()]
    assert [[k for k, _ in m] for m in after] == [[k for k, _ in m] for m in before]
    pairs = [pair for m_a, m_b in zip(after, before, strict=True) for pair in zip(m_a, m_b, strict=True)]
    assert all(a is b for (_, a), (_, b) in pairs)


def test_restore_undoes_attributes_children_buffers_and_parameters_added_or_rebound():
    model = nn.Sequential(nn.ReLU(), nn.Linear(2, 2))
    relu, linear = model[0], model[1]
    weight, flag = linear.weight, relu.inplace
    state = ModelState.capture(model)
    relu.extra = nn.Linear(1, 1)  # a child where there were none
    relu.register_buffer("seen", torch.zeros(1))  # a buffer where there were none
    relu.register_parameter("scale", nn.Parameter(torch.ones(1)))
    relu.inplace = not flag
    relu.calls = 3
    linear.weight = nn.Parameter(torch.zeros(2, 2))
    model.eval()
    state.restore()
    assert not relu._modules and not relu._buffers and not relu._parameters
    assert relu.inplace is flag and not hasattr(relu, "calls")
    assert linear.weight is weight
    assert model.training and relu.training and linear.training
    assert list(model) == [relu, linear]


def test_a_snapshot_restores_the_state_after_the_call_including_what_it_added():
    model = nn.Sequential(nn.ReLU())
    state = ModelState.capture(model)
    extra = nn.Linear(1, 1)
    model[0].extra = extra  # the call attaches a child
    model[0].calls = 1
    after = state.snapshot()
    state.restore()
    assert not hasattr(model[0], "extra") and not hasattr(model[0], "calls")
    after.restore()
    assert model[0].extra is extra and model[0].calls == 1


# -- the marker path ------------------------------------------------------------------------


@pytest.mark.parametrize("train", [False, True])
def test_the_users_buffers_are_written_only_by_the_users_own_calls(train):
    torch.manual_seed(0)
    model = Accumulates().train(train)
    total, version = model.total, model.total._version

    def body():
        for _ in range(3):
            model(torch.randn(2, 4))

    (report,) = run_recorded(body)
    assert report.ok, report.describe()
    assert report.calls == 3
    assert model.total is total
    assert torch.equal(total, torch.full((4,), 3.0))
    assert total._version == version + 3  # the three add_ of the test's calls, nothing of ours
    assert report.graph_module.total is total  # the GraphModule holds the user's buffer, not a copy


def test_a_replay_lends_the_buffer_the_module_holds_at_that_call():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()

    def body():
        model(torch.randn(3, 4))
        model[1].running_mean = torch.full((4,), 2.0)  # rebound between the calls
        model(torch.randn(3, 4))

    (report,) = run_recorded(body)
    assert report.ok, report.describe()
    assert report.calls == 2


def test_a_write_made_while_tracing_does_not_reach_the_replay():
    model = WritesWhileTracing().eval()
    b, version = model.b, model.b._version
    report = check_traceable(model, (torch.randn(2),))
    assert report.status == "mismatch", report.describe()
    assert model.b is b and b._version == version and torch.equal(b, torch.zeros(2))

    (report,) = run_recorded(lambda: model(torch.randn(2)))
    assert report.status == "mismatch", report.describe()
    assert model.b is b and b._version == version + 1 and torch.equal(b, torch.ones(2))


# -- NumPy's legacy generator ------------------------------------------------------------


def numpy_state() -> tuple:
    state = np.random.get_state()
    return (state[1].tolist(), state[2], state[3], state[4])


def test_numpy_state_is_restored_after_draws():
    np.random.seed(3)
    before = RngState.capture()
    expected = numpy_state()
    np.random.rand(5)
    RngState.capture()  # read while moved
    before.restore()
    assert numpy_state() == expected


def test_a_cached_normal_consumed_without_moving_the_words_is_seen_and_put_back():
    np.random.seed(4)
    np.random.standard_normal()  # draws two, returns one, caches the other (has_gauss)
    cached = RngState.capture()
    assert np.random.get_state()[3] == 1
    value = np.random.standard_normal()  # the cached one: the generator's words do not move
    assert RngState.capture().numpy[3] == 0  # read in full, not taken for the state before
    cached.restore()
    assert np.random.get_state()[3] == 1 and np.random.standard_normal() == value


def test_the_same_words_reached_by_other_draws_are_not_taken_for_a_known_state():
    np.random.seed(5)
    start = RngState.capture()
    np.random.rand(2)  # two doubles: four words
    after = RngState.capture()
    expected = numpy_state()
    start.restore()
    np.random.standard_normal()  # four words too (unless a pair is rejected), and a cached normal
    after.restore()
    assert numpy_state() == expected


def test_a_marked_test_leaves_numpy_as_unmarked_when_the_model_draws_from_it():
    class DrawsNumpy(nn.Module):
        def forward(self, x):
            return x + float(np.random.rand())

    def after(record: bool):
        np.random.seed(6)
        model = DrawsNumpy()
        if record:
            run_recorded(lambda: model(torch.zeros(2)))
        else:
            model(torch.zeros(2))
        return numpy_state()

    assert after(True) == after(False)


# -- what is recorded -------------------------------------------------------------------


def test_a_model_compiled_with_module_compile_is_recorded_as_the_model():
    # Module.compile() routes calls to a compiled _call_impl: the model is still the one
    # call recorded and checked, not its submodules one by one
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    model.compile(backend="eager")
    reports = run_recorded(lambda: model(torch.randn(2, 4)))
    assert [(r.model, r.status, r.calls) for r in reports] == [("torch.nn.modules.container.Sequential", "passed", 1)]


def test_a_model_the_test_traces_itself_is_not_recorded_with_proxies():
    # the test's own symbolic_trace runs the nested Sequential's forward: not a call to record
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2))
    gm = None

    def body():
        nonlocal gm
        gm = torch.fx.symbolic_trace(model)

    assert run_recorded(body) == []
    assert [node.op for node in gm.graph.nodes] == ["placeholder"] + ["call_module"] * 3 + ["output"]
