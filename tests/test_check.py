"""check_traceable and the zero-code engine, without pytest in between."""

import copy
import dataclasses
import inspect

import models
import pytest
import torch
import torch.nn as nn

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.binding import bind_call
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import OptionError, TraceOptions


def snapshot_state(model: nn.Module):
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "training": [m.training for m in model.modules()],
        "hooks": [
            (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks)) for m in model.modules()
        ],
        "attrs": [sorted(vars(m)) for m in model.modules()],
        "python": [{k: v for k, v in vars(m).items() if isinstance(v, (int, float, bool, str))} for m in model.modules()],
    }


def assert_unchanged(model: nn.Module, before) -> None:
    after = snapshot_state(model)
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), key
    assert before["training"] == after["training"]
    assert before["hooks"] == after["hooks"]
    assert before["attrs"] == after["attrs"]
    assert before["python"] == after["python"]


def test_traceable_model_passes_and_counts_nodes():
    report = check_traceable(models.Hooked(), (torch.randn(2, 4),))
    assert report.ok and report.status == "passed"
    assert report.nodes and report.nodes >= 3
    assert "def forward" in report.code
    assert report.calls == 1


def test_untraceable_model_points_at_user_line_and_submodule():
    report = check_traceable(models.Outer(), (torch.randn(2, 4),))
    assert not report.ok
    assert report.status == "untraceable"
    assert report.category == "control-flow"
    assert report.module == "block"
    assert report.module_type == "Branchy"
    assert report.location.path.endswith("models.py")
    assert report.location.source.startswith("if x.sum() > 0:")
    assert report.location.line == models.Branchy.forward.__code__.co_firstlineno + 1
    assert "TraceError" in report.error
    first = report.describe().splitlines()[0]
    assert first.startswith("Outer.block (Branchy) is not traceable: `if x.sum() > 0:")
    assert "uses a traced value in control flow" in first


def test_eager_failure_is_model_error_not_untraceable():
    report = check_traceable(models.Hooked(), (torch.randn(2, 3),))  # wrong feature size
    assert report.status == "model-error"
    assert "RuntimeError" in report.error
    assert "not a traceability problem" in report.message


def test_non_module_is_rejected_with_a_clear_error():
    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        check_traceable(lambda x: x, (torch.randn(1),))


@pytest.mark.parametrize("train", [True, False])
def test_check_leaves_model_state_unchanged(train):
    model = models.Noisy().train(train)
    model.net[0].register_forward_hook(lambda m, i, o: None)
    x = torch.randn(5, 4)
    before = snapshot_state(model)
    rng = torch.get_rng_state()
    report = check_traceable(model, (x,))
    assert report.ok, report.describe()
    assert_unchanged(model, before)
    assert torch.equal(torch.get_rng_state(), rng)


def test_failed_check_leaves_model_state_unchanged():
    model = models.Outer()
    before = snapshot_state(model)
    report = check_traceable(model, (torch.randn(2, 4),))
    assert report.status == "untraceable"
    assert_unchanged(model, before)


def test_python_state_changed_by_forward_is_put_back():
    model = models.Counter()
    before = snapshot_state(model)
    check_traceable(model, (torch.randn(2),))
    assert model.calls == 0 and model.seen.item() == 0
    assert_unchanged(model, before)


def test_dropout_in_train_mode_compares_equal_under_same_rng():
    model = models.Noisy().train()
    report = check_traceable(model, (torch.randn(6, 4),))
    assert report.ok, report.describe()


def test_automatic_concrete_args_for_flags_defaults_and_passed():
    model = models.Flagged()
    x = torch.randn(2, 4)
    assert check_traceable(model, (x,)).ok
    report = check_traceable(model, (x,), {"use_bias": False, "scale": 0.5})
    assert report.ok, report.describe()


def test_explicit_concrete_args_make_tensor_argument_concrete():
    x = torch.randn(2, 6)
    k = torch.tensor(3)
    assert check_traceable(models.TopK(), (x, k)).status == "untraceable"
    report = check_traceable(models.TopK(), (x, k), concrete_args={"k": 3})
    assert report.ok, report.describe()


class ErasesConcretePlaceholders(torch.fx.Tracer):
    """As transformers' HFTracer: the graph keeps placeholders for the traced inputs
    only, so the GraphModule takes fewer arguments than forward."""

    def trace(self, root, concrete_args=None):
        graph = super().trace(root, concrete_args)
        traced = set(inspect.signature(root.forward).parameters) - set(concrete_args or {})
        for node in list(graph.nodes):
            if node.op == "placeholder" and node.target not in traced:
                doomed = [node]  # with torch.fx's check of the concrete value
                for each in doomed:
                    doomed.extend(each.users)
                for each in reversed(doomed):
                    graph.erase_node(each)
        return graph


def test_a_graph_without_placeholders_for_concrete_args_is_replayed_by_name():
    model = models.Flagged()
    x = torch.randn(2, 4)
    report = check_traceable(model, (x,), {"scale": 0.5}, tracer=ErasesConcretePlaceholders)
    assert report.ok, report.describe()
    assert report.code.startswith("\n\n\ndef forward(self, x):"), report.code  # use_bias, scale: erased
    assert report.calls == 1


def test_unknown_concrete_arg_name_is_an_option_error():
    with pytest.raises(OptionError, match="does not take"):
        check_traceable(models.TopK(), (torch.randn(2, 6), torch.tensor(3)), concrete_args={"kk": 3})


def test_list_input_becomes_placeholders():
    images = [torch.randn(3), torch.randn(3)]
    report = check_traceable(models.ListInput(), (images,), {"scale": 3})
    assert report.ok, report.describe()


def test_nested_dict_outputs_are_compared():
    report = check_traceable(models.DictOutput(), (torch.randn(2, 4),))
    assert report.ok, report.describe()


class Cache:
    """An output object as a library writes one (transformers' DynamicCache): tensors in its
    attributes, no ``==`` of its own."""

    def __init__(self, keys, values):
        self.keys, self.values = keys, values


class ReturnsCache(torch.nn.Module):
    def forward(self, x):
        return x.relu(), Cache(x * 2, [x + 1, x.sum()])


@pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem()))
def test_an_object_holding_tensors_is_compared_by_its_attributes():
    # torch.compile rebuilds the object from the graph's tensors: a new object, equal in value
    report = check_traceable(ReturnsCache(), (torch.randn(2, 4),), backend="compile")
    assert report.ok, report.describe()


def test_an_object_holding_a_different_tensor_is_a_mismatch_at_that_attribute():
    from pytest_fxtrace.compare import compare_outputs

    x = torch.ones(2)
    found = compare_outputs(Cache(x, [x, x]), Cache(x, [x, x + 1]))
    assert found is not None and found.path == "output.values[1]"


def test_leaf_modules_option_makes_nested_failure_pass():
    report = check_traceable(models.Outer(), (torch.randn(2, 4),), leaf_modules=["block"])
    assert report.ok, report.describe()


def run_recorded(options: TraceOptions, body) -> list:
    checks = TestChecks(options)
    with recording(checks.observer_for):
        body()
    return checks.finish()


def test_two_batch_sizes_are_both_replayed():
    model = models.PerRow()

    def body():
        model(torch.randn(2, 3), 2)
        model(torch.randn(3, 3), 3)

    (report,) = run_recorded(TraceOptions(), body)
    assert report.ok, report.describe()
    assert report.calls == 2


def test_graph_right_for_one_batch_size_and_wrong_for_another_fails():
    model = models.PerRow()

    def body():
        model(torch.randn(2, 3), 2)
        model(torch.randn(3, 3), 3)

    (report,) = run_recorded(TraceOptions(concrete_args={"n": 2}), body)
    assert report.status == "mismatch"
    assert report.category == "specialization"
    assert "recorded call 2" in report.message
    assert "specialized to have value 2" in report.error


def test_each_call_is_judged_against_the_model_as_it_was():
    torch.manual_seed(0)
    model = models.Noisy()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def body():
        for _ in range(3):
            model(torch.randn(5, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        model(torch.randn(5, 4))

    (report,) = run_recorded(TraceOptions(), body)
    assert report.ok, report.describe()
    assert report.calls == 4


def test_training_loop_losses_identical_with_and_without_recording():
    def losses(record: bool):
        torch.manual_seed(0)
        model = models.Noisy()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        out = []

        def body():
            for _ in range(3):
                loss = model(torch.randn(5, 4)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                out.append(loss.item())

        if record:
            run_recorded(TraceOptions(), body)
        else:
            body()
        return out, copy.deepcopy(model.state_dict())

    plain, plain_state = losses(False)
    marked, marked_state = losses(True)
    assert plain == marked
    for key in plain_state:
        assert torch.equal(plain_state[key], marked_state[key]), key


def test_replays_are_capped_per_module():
    model = models.Hooked()

    def body():
        for _ in range(5):
            model(torch.randn(1, 4))

    (report,) = run_recorded(TraceOptions(max_replays=2), body)
    assert report.ok and report.calls == 2


def test_only_outermost_calls_are_recorded():
    model = models.Outer()  # its submodule `block` alone would fail to trace

    def body():
        model.pre(torch.randn(1, 4))
        model(torch.randn(1, 4))

    reports = run_recorded(TraceOptions(leaf_modules=("Branchy",)), body)
    assert sorted(r.model_name for r in reports) == ["Linear", "Outer"]
    assert all(r.ok for r in reports)


class _Scaled(nn.Module):
    """Traced through: its weight is a get_attr the GraphModule holds itself."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.register_buffer("shift", torch.zeros(3))

    def forward(self, x):
        return x * self.weight + self.shift


class _Rebindable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scaled = _Scaled()
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.scaled(x))


@pytest.mark.parametrize("rebind", ["parameter", "buffer", "submodule"])
def test_a_call_after_the_test_rebinds_a_tensor_or_submodule_is_judged_on_the_new_one(rebind):
    model = _Rebindable()

    def body():
        model(torch.randn(4, 3))
        with torch.no_grad():
            if rebind == "parameter":
                model.scaled.weight = nn.Parameter(torch.full((3,), 2.0))
            elif rebind == "buffer":
                model.scaled.shift = torch.full((3,), 5.0)
            else:
                model.head = nn.Linear(3, 2)
        model(torch.randn(4, 3))

    (report,) = run_recorded(TraceOptions(), body)
    assert report.ok, report.describe()
    assert report.calls == 2


@dataclasses.dataclass
class _Prompt:
    bias: torch.Tensor  # its repr elides the middle of a long tensor ("...")


class _Prompted(nn.Module):
    def forward(self, x, prompt):
        return x + prompt.bias.sum()


def test_calls_with_values_that_print_alike_do_not_share_a_graph():
    """Two prompts whose tensors differ only where their repr says '...': each call is
    traced with its own prompt (a graph keyed by repr baked in the first call's)."""
    model = _Prompted()
    first, second = torch.zeros(2000), torch.zeros(2000)
    second[1000] = 5.0
    assert repr(_Prompt(first)) == repr(_Prompt(second))

    def body():
        model(torch.randn(2, 3), _Prompt(first))
        model(torch.randn(2, 3), _Prompt(second))

    (report,) = run_recorded(TraceOptions(), body)
    assert report.ok, report.describe()
    assert report.calls == 2


@pytest.mark.parametrize(
    ("one", "other"),
    [(1, True), (1, 1.0), (0.0, -0.0), ("1", 1), ((1, 2), [1, 2]), ({"a": 1}, {"a": 1.0})],
    ids=["int-bool", "int-float", "signed-zero", "str-int", "tuple-list", "dict-values"],
)
def test_concrete_values_that_compare_equal_but_trace_differently_get_their_own_graph(one, other):
    model = models.Flagged()
    x = torch.randn(2, 4)
    assert bind_call(model, (x,), {"scale": one}, None).key != bind_call(model, (x,), {"scale": other}, None).key


def test_equal_concrete_values_share_a_graph_key():
    model = models.Flagged()
    x = torch.randn(2, 4)
    for value in (0.5, float("nan"), "mode", None, (1, "a"), {"k": [1.0, None]}):
        assert bind_call(model, (x,), {"scale": value}, None).key == bind_call(model, (x,), {"scale": value}, None).key
