"""The custom tracer: each option fails without it and passes with it."""

import builtins
import math

import models
import pytest
import torch
import torch.fx

import pytest_fxtrace
from pytest_fxtrace import Tracer, _compat, register_leaf, symbolic_trace, unregister_leaf
from pytest_fxtrace.backends.fx.tracer import build_tracer
from pytest_fxtrace.options import OptionError, TraceOptions


def call_modules(gm: torch.fx.GraphModule) -> list[str]:
    return [n.target for n in gm.graph.nodes if n.op == "call_module"]


def test_plain_fx_fails_on_data_dependent_branch():
    with pytest.raises(torch.fx.proxy.TraceError):
        symbolic_trace(models.Outer())


@pytest.mark.parametrize(
    "leaf",
    [models.Branchy, "Branchy", "models.Branchy", "block"],
    ids=["class", "class-name", "dotted-class", "submodule-path"],
)
def test_leaf_module_spec_makes_failing_submodule_a_call(leaf):
    gm = symbolic_trace(models.Outer(), leaf_modules=[leaf])
    assert "block" in call_modules(gm)


def test_leaf_by_class_covers_subclasses():
    class Special(models.Branchy):
        pass

    outer = models.Outer()
    outer.block = Special()
    gm = symbolic_trace(outer, leaf_modules=[models.Branchy])
    assert "block" in call_modules(gm)


def test_registered_leaf_applies_to_every_trace_until_unregistered():
    register_leaf(models.Branchy)
    try:
        gm = symbolic_trace(models.Outer())
        assert "block" in call_modules(gm)
    finally:
        unregister_leaf(models.Branchy)
    with pytest.raises(torch.fx.proxy.TraceError):
        symbolic_trace(models.Outer())


def test_register_leaf_rejects_non_modules():
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_leaf(int)


def test_autowrap_function_records_helper_as_call():
    with pytest.raises(TypeError, match="Proxy"):
        symbolic_trace(models.Heads())
    gm = symbolic_trace(models.Heads(), autowrap_functions=(models.head_dim,))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert models.head_dim in targets
    x = torch.randn(3, 8)
    torch.testing.assert_close(gm(x), models.Heads()(x))


def test_param_shapes_constant_resolves_parameter_shape_branch():
    with pytest.raises(torch.fx.proxy.TraceError):
        symbolic_trace(models.ShapeGate())
    model = models.ShapeGate()
    gm = symbolic_trace(model, param_shapes_constant=True)
    x = torch.randn(2, 4)
    torch.testing.assert_close(gm(x), model(x))


def test_unregistered_parameter_free_module_is_traced_inline():
    with pytest.raises(NameError, match="not installed as a submodule"):
        torch.fx.symbolic_trace(models.InlineAct())
    gm = symbolic_trace(models.InlineAct())
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), torch.relu(x) + 1)


def test_a_check_that_passes_only_by_inlining_says_plain_torch_fx_refuses_the_model():
    report = pytest_fxtrace.check_traceable(models.InlineAct(), (torch.randn(3),))
    assert report.ok and report.notes == (
        "torch.fx.symbolic_trace refuses this model: nn.ReLU at tests/models.py:167 is a module created inside "
        "forward, not a registered submodule; pytest-fxtrace's tracer inlines its ops, as it holds no parameters "
        "or buffers (register it in __init__, or call torch.nn.functional, for plain torch.fx)",
    )
    assert report.message.endswith("\n  note: " + report.notes[0])  # the record's message
    assert pytest_fxtrace.check_traceable(torch.nn.Linear(4, 4), (torch.randn(2, 4),)).notes == ()


def test_unregistered_module_with_fx_path_uses_it():
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.hidden = [torch.nn.Linear(2, 2)]  # not registered
            self.hidden[0]._fx_path = "lin"

        def forward(self, x):
            return self.hidden[0](x)

    gm = symbolic_trace(Holder())
    assert call_modules(gm) == ["lin"]


class Pending:
    """A torchrec NoWait-like generic passed around by a model."""

    def __init__(self, value):
        self.value = value


def test_registered_arg_type_becomes_constructor_call():
    class Returns(torch.nn.Module):
        def forward(self, x):
            return Pending(x + 1)

    class PendingTracer(Tracer):
        pass

    with pytest.raises(TypeError, match="cannot record a .*Pending object"):
        symbolic_trace(Returns())
    PendingTracer.register_arg_type(Pending, lambda p: (p.value,))
    graph = PendingTracer().trace(Returns())
    assert any(n.target is Pending for n in graph.nodes)
    assert Tracer.arg_types == {}  # registered on the subclass only


def test_pytree_concrete_args_compile():
    gm = symbolic_trace(models.ListInput(), concrete_args={"images": [torch.fx.PH, torch.fx.PH], "scale": 2})
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(gm([a, b], 2), torch.stack([a, b]) * 2)


def test_tensor_constants_are_not_left_on_the_traced_model():
    model = models.MakesConstant()
    before = set(model.__dict__)
    gm = symbolic_trace(model)
    assert set(model.__dict__) == before
    assert not hasattr(model, "_tensor_constant0")
    torch.testing.assert_close(gm(torch.zeros(4)), torch.tensor([1.0, 2.0, 3.0, 4.0]))


def test_failed_trace_leaves_no_autowrap_patch_behind():
    original = math.sqrt
    with pytest.raises(torch.fx.proxy.TraceError):
        symbolic_trace(models.Scaled())
    assert math.sqrt is original
    assert models.sqrt is original


def test_foreign_tracer_gets_leaf_modules_mixed_in():
    class Foreign(torch.fx.Tracer):
        def __init__(self):  # accepts none of the tracer options
            super().__init__()

    tracer = build_tracer(TraceOptions(tracer=Foreign, leaf_modules=("Branchy",)))
    assert isinstance(tracer, Foreign)
    graph = tracer.trace(models.Outer())
    assert any(n.op == "call_module" and n.target == "block" for n in graph.nodes)
    with pytest.raises(OptionError, match="does not accept autowrap_functions"):
        build_tracer(TraceOptions(tracer=Foreign, autowrap_functions=(models.head_dim,)))


def test_public_names_match_the_product_contract():
    for name in ("Tracer", "symbolic_trace", "check_traceable", "register_leaf", "unregister_leaf"):
        assert hasattr(pytest_fxtrace, name)
    assert issubclass(pytest_fxtrace.Tracer, torch.fx.Tracer)


class LenInside(torch.nn.Module):
    def forward(self, x):
        return x.reshape(len(x), -1)


class HoldsLenInside(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = LenInside()

    def forward(self, x):
        return self.inner(x) + 1


def test_builtin_len_autowrap_records_len_calls_in_submodules_and_cleans_up():
    with pytest.raises(RuntimeError, match="'len' is not supported"):
        symbolic_trace(HoldsLenInside())
    gm = symbolic_trace(HoldsLenInside(), autowrap_functions=(len,))
    assert any(n.op == "call_function" and n.target is len for n in gm.graph.nodes)
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(gm(x), HoldsLenInside()(x))
    assert "len" not in globals()  # the shadowing global is gone after the trace


def test_builtin_len_autowrap_leaves_a_module_global_of_that_name_alone(monkeypatch):
    def own_len(x):
        return 2

    monkeypatch.setitem(globals(), "len", own_len)
    gm = symbolic_trace(LenInside(), autowrap_functions=(builtins.len,))
    assert globals()["len"] is own_len
    assert not any(n.target is own_len for n in gm.graph.nodes)


class PlainArguments(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        y = torch.cat([self.lin(x), x], dim=-1).to(torch.float32)
        return torch.flatten(y, 1)[..., :4] * self.scale, {"halves": y.chunk(2, -1)}


def _torch_create_arg_calls(monkeypatch):
    calls = []
    original = torch.fx.Tracer.create_arg

    def counting(self, a):
        calls.append(type(a))
        return original(self, a)

    monkeypatch.setattr(torch.fx.Tracer, "create_arg", counting)
    return calls


@pytest.mark.skipif(
    not _compat.plain_arg_handlers(),
    reason=f"torch {torch.__version__} has no torch.fx.proxy._create_arg_bypass table: every argument "
    "takes torch.fx's create_arg (the same graph, without the shortcut)",
)
def test_plain_arguments_skip_torch_fx_tracers_parameter_and_constant_checks(monkeypatch):
    calls = _torch_create_arg_calls(monkeypatch)

    class SubTracer(Tracer):  # classes made after the patch see it as torch's own create_arg
        pass

    graph = SubTracer().trace(PlainArguments())
    assert {n.target for n in graph.nodes if n.op == "call_function"} >= {torch.cat, torch.flatten}
    # Proxies, tuples, lists, dicts, numbers, dtypes and Ellipsis never reach
    # torch.fx.Tracer.create_arg; the slice (not one of the plain types) does
    assert calls == [slice]


def test_a_tensor_constant_still_takes_torch_fx_tracers_path():
    gm = symbolic_trace(models.MakesConstant())
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == ["_tensor_constant0"]
    torch.testing.assert_close(gm(torch.zeros(4)), torch.tensor([1.0, 2.0, 3.0, 4.0]))


def test_a_user_tracers_own_create_arg_sees_every_argument():
    seen = []

    class Recording(torch.fx.Tracer):
        def create_arg(self, a):
            seen.append(type(a))
            return super().create_arg(a)

    build_tracer(TraceOptions(tracer=Recording)).trace(PlainArguments())
    assert {torch.fx.Proxy, tuple, int} <= set(seen)


def test_our_tracer_records_the_same_graph_as_torch_fx():
    torchvision = pytest.importorskip("torchvision")
    for model in (
        torchvision.models.mobilenet_v3_small(),
        torchvision.models.densenet121(),
        PlainArguments(),
    ):
        ours = symbolic_trace(model.eval())
        theirs = torch.fx.symbolic_trace(model)
        assert ours.code == theirs.code
        assert [n.meta.get("nn_module_stack") for n in ours.graph.nodes] == [
            n.meta.get("nn_module_stack") for n in theirs.graph.nodes
        ]


# -- every public entry point takes the marker's option forms (issue 16, item 1) -----------


@pytest.mark.parametrize(
    "entry",
    [
        lambda model, **options: symbolic_trace(model, **options),
        lambda model, **options: Tracer(**options).trace(model),
    ],
    ids=["symbolic_trace", "Tracer"],
)
def test_autowrap_functions_by_dotted_name_as_the_marker_takes_them(entry):
    entry(HoldsLenInside(), autowrap_functions=["builtins:len"])
    entry(models.Heads(), autowrap_functions=["models:head_dim"])
    entry(models.Heads(), autowrap_functions=["models.head_dim"])
    gm = symbolic_trace(HoldsLenInside(), autowrap_functions=["builtins:len"])
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(gm(x), HoldsLenInside()(x))
    gm = symbolic_trace(models.Heads(), autowrap_functions=["models:head_dim"])
    assert any(n.op == "call_function" and n.target is models.head_dim for n in gm.graph.nodes)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["nope"], r"^symbolic_trace\(\): autowrap_functions: 'nope' is not a dotted path like 'pkg.module:Name'$"),
        (["len"], r"'len' is not a dotted path.*for the builtin len, write 'builtins:len'"),
        (["nowhere.mod:f"], r"autowrap_functions: cannot import module 'nowhere.mod' from 'nowhere.mod:f'"),
        (["models:no_such_helper"], r"autowrap_functions: module 'models' has no attribute 'no_such_helper'"),
    ],
)
def test_symbolic_trace_names_an_autowrap_function_that_does_not_resolve(names, message):
    with pytest.raises(OptionError, match=message):
        symbolic_trace(models.Heads(), autowrap_functions=names)


def test_symbolic_trace_takes_a_tracer_by_dotted_path_and_refuses_check_options():
    gm = symbolic_trace(models.Outer(), tracer="torch.fx:Tracer", leaf_modules=["Branchy"])
    assert call_modules(gm) == ["pre", "block"]
    with pytest.raises(OptionError, match=r"symbolic_trace\(\): rtol is not a tracer option"):
        symbolic_trace(models.Outer(), rtol=1e-3)
