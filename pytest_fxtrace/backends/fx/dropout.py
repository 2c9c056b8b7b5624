"""A functional dropout frozen into a trace (``F.dropout(x, training=self.training)``: the
flag is read once, so one graph cannot follow ``model.train()`` / ``model.eval()``), and the
fix found for it: a dropout submodule, which stays a leaf, checked by tracing a copy of the
graph with the functional calls replaced and replaying it in both modes."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import torch
import torch.fx

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.capture import suspended
from pytest_fxtrace.state import lend
from pytest_fxtrace.types import Suggestion


def _dropout_modules() -> dict[Callable[..., torch.Tensor], type[torch.nn.Module]]:
    F = torch.nn.functional
    return {
        F.dropout: torch.nn.Dropout, F.dropout1d: torch.nn.Dropout1d, F.dropout2d: torch.nn.Dropout2d,
        F.dropout3d: torch.nn.Dropout3d, F.alpha_dropout: torch.nn.AlphaDropout,
        F.feature_alpha_dropout: torch.nn.FeatureAlphaDropout, torch.dropout: torch.nn.Dropout,
    }  # fmt: skip


def with_dropout_modules(
    gm: torch.fx.GraphModule,
) -> tuple[torch.fx.GraphModule, list[torch.nn.Module]] | None:
    """A copy of a graph traced in train mode whose functional dropouts (``F.dropout(x,
    p, training=True)``: the frozen ``self.training``) are calls of ``nn.Dropout``
    submodules instead, as the user's code would be with one: a leaf, whose mode follows
    ``train()`` / ``eval()``. None when the graph holds no such dropout."""
    modules = _dropout_modules()
    graph = copy.deepcopy(gm.graph)
    added: dict[str, torch.nn.Module] = {}
    for node in list(graph.nodes):
        cls = modules.get(node.target) if node.op == "call_function" else None
        if cls is None:
            continue
        try:
            if node.target is torch.dropout:  # torch.dropout(input, p, train)
                values = dict(zip(("input", "p", "training"), node.args, strict=False))
                values.update(node.kwargs)
                values["training"] = values.pop("train", values.get("training"))
                values.setdefault("inplace", False)
            else:
                bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
                bound.apply_defaults()
                values = dict(bound.arguments)
        except (TypeError, ValueError):
            continue
        if values.get("training") is not True or not isinstance(values.get("p"), (int, float)):
            continue
        name = f"fxtrace_dropout_{len(added)}"
        added[name] = cls(p=values["p"], inplace=bool(values.get("inplace")))
        with graph.inserting_before(node):
            replacement = graph.call_module(name, (values["input"],))
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
    if not added:
        return None
    targets: dict[str, object] = dict(added)
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module") and node.target not in targets:
            value: object = gm
            for atom in str(node.target).split("."):
                value = getattr(value, atom)
            targets[str(node.target)] = value
    return torch.fx.GraphModule(targets, graph, type(gm).__name__), list(added.values())


def dropout_fix(context: CheckContext, train_gm: torch.fx.GraphModule) -> Suggestion | None:
    """The code fix for a dropout frozen into the graph (``F.dropout(x, training=
    self.training)``, or one under ``if self.training:``): an ``nn.Dropout`` submodule.
    Verified by replaying the train-mode graph with its dropouts made such submodules
    in both modes against the eager model: the recorded call in its own mode, and the
    model run once more in the other mode on the same inputs (where it runs there).
    The model is left as it was."""
    call, bound = context.call, context.bound
    rewritten = with_dropout_modules(train_gm)
    if rewritten is None:
        return None
    graph_module, dropouts = rewritten
    first = dropouts[0]
    text = (
        "in code: call dropout through a submodule instead of the functional one (the statement above): "
        f"`self.dropout = nn.{type(first).__name__}(p={first.p})` in __init__, `x = self.dropout(x)` in "
        "forward; it stays a leaf, so one graph follows model.train() / model.eval()"
    )
    if call.state is None:
        return Suggestion(text, False)
    model = call.module
    problem = None
    for mode in (call.training, not call.training):
        label = "train" if mode else "eval"
        try:
            call.state.restore()
            if mode == call.training:
                expected = call.output
            else:
                model.train(mode)
                call.rng.restore()
                try:
                    with suspended(), torch.no_grad(), lend(call.state, model):
                        expected = model(*call.args, **call.kwargs)
                except Exception as exc:
                    problem = f"the model does not run in {label} mode on these inputs ({type(exc).__name__})"
                    break
                call.state.restore()
            graph_module.train(mode)
            call.rng.restore()
            with torch.no_grad(), lend(call.state, graph_module):
                actual = bound.call(graph_module)
            difference = context.compare(actual, expected, rtol=context.options.rtol, atol=context.options.atol)
            if difference is not None:
                problem = f"with it the graph still differs from eager in {label} mode"
                break
        except Exception as exc:  # a fix that breaks differently is just not verified
            problem = f"{label} mode: {type(exc).__name__}: {exc}"
            break
        finally:
            call.state.restore()
    if problem is not None:
        return Suggestion(f"{text} (tried: {problem})", False)
    return Suggestion(text, True)
