"""recursive_trace / GraphCollection: tracing goes on past failing submodules, and
when a module's own forward fails its children are traced with their real inputs."""

from __future__ import annotations

import diag_models as m
import optional
import pytest
import torch
from torch import nn

import pytest_fxtrace
from pytest_fxtrace import _compat
from pytest_fxtrace.backends.fx.localize import GraphCollection, ModuleRecord

BACKENDS = [
    "fx",
    pytest.param("export", marks=pytest.mark.skipif(
        _compat.export_problem() is not None, reason=str(_compat.export_problem())
    )),
]  # fmt: skip


class RootFails(nn.Module):
    """The root's own forward fails before any child runs."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
        self.pad = m.DynamicPad()

    def forward(self, x):
        if x.mean() > 0:
            x = -x
        return self.pad(self.backbone(x))


class FailsLate(nn.Module):
    """The root's own forward fails after its children ran: they count as traced."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())

    def forward(self, x):
        features = self.backbone(x)
        if features.mean() > 0:
            return features
        return -features


def test_failing_submodules_become_leaves_and_the_root_traces_around_them():
    collection = pytest_fxtrace.recursive_trace(m.Nested(), args=(torch.randn(1, 3, 8, 10),))
    assert collection.is_failed("first.pad") and collection.is_failed("second.pad")
    assert not collection.is_failed("")
    code = collection[""].code
    assert "self.first.pad(" in code and "self.second.pad(" in code  # leaves in the root's graph
    assert "first_conv = self.first.conv(" in code
    assert collection.coverage == 1.0 and collection.coverage_basis == "parameters"
    assert "int(x.shape[-1])" in collection.failure_msg("first.pad") or "int()" in collection.failure_msg(
        "first.pad"
    )


def test_root_failure_still_traces_children_with_recorded_inputs():
    model = RootFails()
    collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 8, 8),))
    assert collection.is_failed(model)  # modelopt style: the module itself as key
    assert "" not in collection  # no graph for the root
    assert collection.records["backbone"].status == "traced"
    assert "backbone" in collection and "getattr(self, \"0\")" in collection["backbone"].code
    assert [r.path for r in collection.deepest_failures()] == ["pad"]
    assert collection.records[""].diagnosis.category == "control-flow"
    # the conv's parameters are all the parameters there are
    assert collection.coverage == 1.0
    assert "backbone (Sequential)" in collection.summary()


def test_children_that_traced_before_the_root_failed_are_not_traced_again():
    collection = pytest_fxtrace.recursive_trace(FailsLate(), args=(torch.randn(1, 3, 8, 8),))
    assert collection.is_failed("")
    assert collection.records["backbone"].status == "traced"
    assert collection.records["backbone.0"].status == "leaf"
    assert list(collection) == []  # no region of its own was needed
    assert collection.coverage == 1.0


def test_without_inputs_children_are_traced_symbolically():
    collection = pytest_fxtrace.recursive_trace(RootFails())
    assert collection.is_failed("")
    assert collection.records["backbone"].status == "traced"


class NoForward(nn.Module):
    """Like raft's CorrBlock: weights and helper methods that its parent calls, no forward."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def lookup(self, x):
        return self.proj(x)


class UsesHelperModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.helper = NoForward()

    def forward(self, x):
        if x.sum() > 0:  # the root fails in its own forward: its children are traced alone
            x = -x
        return self.helper.lookup(self.encoder(x))


def test_a_submodule_without_forward_is_reported_failed_without_tracing_it(monkeypatch):
    traced = []
    trace = torch.fx.Tracer.trace

    def counting(self, root, concrete_args=None):
        traced.append(type(root).__name__)
        return trace(self, root, concrete_args)

    monkeypatch.setattr(torch.fx.Tracer, "trace", counting)
    collection = pytest_fxtrace.recursive_trace(UsesHelperModule())
    assert collection.records["encoder"].status == "traced"
    assert collection.is_failed("helper")
    assert 'Module [NoForward] is missing the required "forward" function' in collection.failure_msg("helper")
    # the helper: torch's error, no trace; its Linear, a leaf, traced on its own (coverage)
    assert traced == ["UsesHelperModule", "Sequential", "Linear"]


def test_parameter_free_models_count_modules():
    collection = pytest_fxtrace.recursive_trace(m.ValueBranch(), args=(torch.randn(2, 4),))
    assert collection.coverage_basis == "modules" and collection.coverage == 0.0


def test_unused_modules_are_left_out_of_coverage():
    model = RootFails()
    model.spare = nn.Linear(1000, 1000)  # never called
    collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 8, 8),))
    assert collection.records["spare"].status == "unused"
    assert collection.coverage == 1.0
    assert [r.path for r in collection.unreached()] == ["spare"]
    assert collection.summary().endswith("; not reached: spare (Linear)")


class BranchesOverAList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return -x if x.sum() > 0 else x


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_container_never_called_itself_is_not_listed_as_unreached(backend):
    report = pytest_fxtrace.check_traceable(BranchesOverAList(), (torch.randn(2, 4),), backend=backend)
    collection = report.localization
    assert collection.records["layers"].status == "unused"  # a ModuleList is never called
    assert collection.records["layers.0"].status in ("leaf", "traced")
    assert collection.unreached() == [] and report.coverage == 1.0


def test_recursive_trace_leaves_the_model_unchanged():
    model = m.Nested().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = {name: dict(vars(sub)) for name, sub in model.named_modules()}
    pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 8, 10),))
    assert model.training
    assert {k: v for k, v in model.state_dict().items()}.keys() == before.keys()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert {name: dict(vars(sub)) for name, sub in model.named_modules()}.keys() == attrs.keys()
    assert not any(sub._forward_hooks or sub._forward_pre_hooks for sub in model.modules())


class Mutates(nn.Module):
    """Its forward, traced, writes all over the model before it fails."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.other = nn.Linear(2, 2)  # never called
        self.block = nn.Sequential(nn.ReLU())

    def forward(self, x):
        self.calls = getattr(self, "calls", 0) + 1
        self.other.scale = x  # a Proxy on a module whose forward never runs
        del self.other.bias
        self.register_buffer("seen", torch.zeros(1))
        self.block.add_module("extra", nn.Identity())
        self.conv.weight = nn.Parameter(torch.ones(3, 3, 1, 1))
        self.training = not self.training
        y = self.block(self.conv(x))
        if y.sum() > 0:
            return y
        return -y


class OwnTrace(pytest_fxtrace.Tracer):
    """A tracer with a trace of its own: localization cannot rely on torch.fx's listing."""

    def trace(self, root, concrete_args=None):
        return super().trace(root, concrete_args)


def _held(model):
    """Every module's __dict__ and stores, and the objects they hold."""
    return [
        (store, list(store.items()))
        for sub in model.modules()
        for store in (vars(sub), sub._parameters, sub._buffers, sub._modules)
    ]


@pytest.mark.parametrize("tracer", [None, OwnTrace], ids=["fx-listing", "own-trace"])
@pytest.mark.parametrize("with_inputs", [False, True], ids=["symbolic", "inputs"])
def test_whatever_a_traced_forward_writes_is_undone(tracer, with_inputs):
    model = Mutates().eval()
    before = _held(model)
    options = {"tracer": tracer} if tracer else {}
    collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 4, 4),) if with_inputs else None, **options)
    assert collection.is_failed("")  # the root's forward failed; its writes happened first
    after = _held(model)
    assert len(after) == len(before)
    for (store, items), (store_now, items_now) in zip(before, after, strict=True):
        assert store_now is store
        assert len(items_now) == len(items) and all(
            k == k_now and v is v_now for (k, v), (k_now, v_now) in zip(items, items_now, strict=True)
        )


def test_table_lists_every_module_with_its_status():
    collection = pytest_fxtrace.recursive_trace(m.Nested(), args=(torch.randn(1, 3, 8, 10),))
    table = collection.table()
    assert "<root> (Nested): traced" in table
    assert f"first.pad (DynamicPad): failed [type-conversion] at tests/diag_models.py:{m.line_of('dynamic-pad')}" in table
    assert "first.conv (Conv2d): leaf" in table



class Point:
    def __init__(self, x):
        self.x = x


class PassesPoint(nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = nn.Identity()

    def forward(self, x):
        return self.leaf(Point(x))  # a leaf call's argument the graph cannot hold


class HoldsPointPasser(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.sub = PassesPoint()

    def forward(self, x):
        self.sub(x)
        return self.conv(x)


def test_a_submodule_passing_an_unrecordable_object_is_named_in_user_terms():
    collection = pytest_fxtrace.recursive_trace(HoldsPointPasser(), args=(torch.randn(1, 3, 8, 8),))
    assert [r.path for r in collection.deepest_failures()] == ["sub.leaf"]  # the call that got the Point
    message = collection.failure_msg("sub.leaf")
    assert "cannot record a test_localize.Point object" in message
    assert "NotImplementedError" not in message
    assert collection.records["conv"].status == "leaf"


class SharedChild(nn.Module):
    """One module under two paths, inside a failing module: traced once, no crash."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU())
        self.b = self.a

    def forward(self, x):
        y = self.b(self.a(x))
        if y.sum() > 0:  # the root fails after its children ran
            return y
        return -y


def test_a_module_shared_under_two_paths_is_listed_once():
    model = SharedChild()
    collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 8, 8),))
    assert list(collection.records) == [name for name, _ in model.named_modules()]
    assert collection.records["a"].status == "traced"
    assert collection.is_failed(model)


class ListsNoModules(torch.fx.Tracer):
    """A tracer with a trace of its own that fails before torch.fx lists the modules."""

    def trace(self, root, concrete_args=None):
        raise RuntimeError("this tracer traces nothing")


def test_every_module_gets_a_record_when_the_tracer_lists_none():
    model = SharedChild()
    collection = pytest_fxtrace.recursive_trace(model, tracer=ListsNoModules)
    assert list(collection.records) == [name for name, _ in model.named_modules()]
    assert collection.records["a"].status == "failed"  # its own trace failed too
    assert collection.records["a.0"].status == "leaf"  # a leaf by class: nothing to trace
    assert collection.is_failed(model.a) and "traces nothing" in collection.failure_msg(model.a)


@optional.needs("torchvision")
def test_named_modules_matches_torch_order_and_deduplication():
    from pytest_fxtrace.state import named_modules

    model = torchvision.models.mobilenet_v3_small()
    model.extra = model.features[0]  # a second path to a module: torch keeps the first
    assert list(named_modules(model).items()) == list(model.named_modules())



class SeesCollector(nn.Module):
    """Notes whether the cyclic garbage collector was on when its forward ran."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        import gc

        SEEN.append(gc.isenabled())
        return self.conv(x)


SEEN: list[bool] = []


@pytest.mark.parametrize("enabled", [True, False])
def test_localization_holds_off_garbage_collection_and_leaves_it_as_it_was(enabled):
    import gc

    SEEN.clear()
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        pytest_fxtrace.recursive_trace(SeesCollector(), args=(torch.randn(1, 3, 4, 4),))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert SEEN and not any(SEEN)  # the eager record and the trace ran with it paused

# -- real models: torchvision detection and optical flow --------------------------------------

torchvision = optional.module("torchvision")


def _detection(name):
    builder = getattr(torchvision.models.detection, name)
    return builder(weights=None, weights_backbone=None, min_size=64, max_size=64).eval(), ([torch.randn(3, 64, 64)],)


def _raft():
    model = torchvision.models.optical_flow.raft_small(weights=None).eval()
    return model, (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128))


REAL = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": (
        lambda: _detection("fasterrcnn_mobilenet_v3_large_320_fpn"), "len", "generalized_rcnn.py",
        "torch._assert(len(val) == 2",
    ),
    "retinanet_resnet50_fpn": (
        lambda: _detection("retinanet_resnet50_fpn"), "len", "retinanet.py", "torch._assert(len(val) == 2",
    ),
    "raft_small": (_raft, "control-flow", "raft.py", "if (h, w) != image2.shape[-2:]:"),
}


@pytest.mark.slow
@optional.needs("torchvision")
@pytest.mark.parametrize("name", list(REAL))
def test_torchvision_models_are_diagnosed_in_their_own_source(name):
    build, category, filename, source = REAL[name]
    torch.manual_seed(0)
    model, args = build()
    report = pytest_fxtrace.check_traceable(model, args)
    assert report.status == "untraceable", report.describe()
    assert report.category == category
    assert report.module == ""  # the root's own forward
    assert report.location.path.endswith(f"torchvision/models/{'optical_flow' if name == 'raft_small' else 'detection'}/{filename}")
    assert report.location.source.startswith(source), report.location
    collection = report.localization
    traceable = {r.path for r in collection.traceable()}
    backbone = "feature_encoder" if name == "raft_small" else "backbone"
    assert backbone in traceable, collection.summary()
    assert collection.coverage > 0
    # the root's own forward fails: honestly no fix, and says so
    assert report.suggestion.verified is False and report.suggestion.text.startswith("none found")
    text = report.describe()
    assert len(text.splitlines()) <= 40
    assert f"{backbone} (" in text


class RootBranchesOnLeaves(nn.Module):
    """The root's own forward fails between two leaves: ``b`` runs only when the branch
    is taken (``a``'s bias decides it), so the recorded call may never reach it."""

    def __init__(self, take_branch: bool = True):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        with torch.no_grad():
            self.a.weight.zero_()
            self.a.bias.fill_(1.0 if take_branch else -1.0)

    def forward(self, x):
        x = self.a(x)
        if x.sum() > 0:
            x = self.b(x)
        return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_coverage_is_the_share_of_the_reached_parameters_in_graphs_for_every_backend(backend):
    report = pytest_fxtrace.check_traceable(RootBranchesOnLeaves(take_branch=False), (torch.randn(2, 4),), backend=backend)
    assert report.status == "untraceable" and report.module == "", report.describe()
    collection = report.localization
    # a's parameters: the 20 the call reached, in a's graph (traced, or exported, up to the
    # branch); b's were never reached: listed, and out of the share
    assert (report.coverage, collection.coverage_basis) == (1.0, "parameters")
    assert [r.path for r in collection.unreached()] == ["b"]
    verb = "traced" if backend == "fx" else "exported"
    graphs = "graphs that traced" if backend == "fx" else "exported graphs"
    assert collection.summary() == (
        f"100% of the parameters the call reached are in {graphs} (the root's own forward failed); "
        f"{verb}: a (Linear); not reached: b (Linear)"
    )
    assert f"  coverage: {collection.summary()}" in report.describe()


@pytest.mark.parametrize("backend", BACKENDS)
def test_leaves_of_a_root_whose_forward_failed_count_once_in_a_graph(backend):
    """``a`` ran within the failing root's trace, ``b`` (after the branch) is traced or
    exported on its own: both backends read the same figure, and nothing unreached."""
    report = pytest_fxtrace.check_traceable(RootBranchesOnLeaves(take_branch=True), (torch.randn(2, 4),), backend=backend)
    collection = report.localization
    assert collection.is_failed("")
    assert report.coverage == 1.0 and collection.unreached() == []
    assert collection.is_covered("a") and collection.is_covered("b")
    assert "not reached" not in collection.summary()


class ScalesPositive(nn.Module):
    """Holds a parameter and cannot be traced: made a leaf by the options."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.scale if x.sum() > 0 else x


def test_a_leaf_that_cannot_be_traced_on_its_own_is_in_no_graph():
    model = RootBranchesOnLeaves(take_branch=True)
    model.b = ScalesPositive()  # called after the root's failing branch, so no trace reached it
    collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(2, 4),), leaf_modules=[ScalesPositive])
    assert collection.records["b"].status == "leaf" and not collection.is_covered("b")
    assert not collection.is_failed("b")  # a configured leaf: what fails inside it is not reported
    assert collection.coverage == 20 / 24  # a's weight and bias are in a graph, b's scale is not


def test_graph_collection_without_paths_uses_the_models_own_modules():
    model = RootBranchesOnLeaves()
    records = {
        "": ModuleRecord("", "RootBranchesOnLeaves", "traced", ""),
        "a": ModuleRecord("a", "Linear", "leaf", ""),
        "b": ModuleRecord("b", "Linear", "failed", ""),
    }
    collection = GraphCollection(model, records, {})
    assert collection.coverage == 0.5 and collection.coverage_basis == "parameters"
    assert collection.is_failed(model.b) and not collection.is_failed(model.a)
    assert [r.path for r in collection.deepest_failures()] == ["b"]
    assert collection.table().splitlines() == [
        "<root> (RootBranchesOnLeaves): traced",
        "  a (Linear): leaf",
        "  b (Linear): failed",
    ]
    assert collection.summary().startswith(
        "50% of the parameters the call reached are in graphs that traced (the root traced"
    )


def test_coverage_is_shown_rounded_down_so_a_partial_share_never_reads_100_percent():
    from pytest_fxtrace.collection import percent

    assert [percent(x) for x in (0.9968, 1.0, 0.29, 0.0)] == ["99%", "100%", "29%", "0%"]
