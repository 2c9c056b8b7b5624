"""``recursive_trace``, the public per-submodule trace: the model traced, each failing
submodule's children in turn (``localize``), with the model put back as it was -- its
attributes taken from torch.fx's own listing of the modules where nothing can run first,
else captured before an eager run of sample inputs."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pytest_fxtrace._compat import is_lazy_graph_module
from pytest_fxtrace.backends.fx.localize import localize, plain_trace
from pytest_fxtrace.backends.fx.tracer import Tracer
from pytest_fxtrace.binding import bind_call, record_eager
from pytest_fxtrace.capture import suspended
from pytest_fxtrace.collection import GraphCollection
from pytest_fxtrace.gcpause import collection_paused
from pytest_fxtrace.options import TraceOptions, resolve_options
from pytest_fxtrace.state import ModelState, modules_of


def _lists_first(model: torch.nn.Module, options: TraceOptions) -> bool:
    """Whether the root's trace lists every module (torch.fx's ``named_modules``,
    torch's own) before anything can change the model: the tracer's ``trace`` and
    ``create_args_for_root`` are torch.fx's (with ours), and the model is no lazy
    GraphModule (whose trace recompiles it first)."""
    if is_lazy_graph_module(model) or type(model).named_modules is not torch.nn.Module.named_modules:
        return False
    return plain_trace(options.tracer or Tracer)


def recursive_trace(
    model: torch.nn.Module,
    concrete_args: Mapping[str, object] | None = None,
    *,
    args: object = None,
    kwargs: Mapping[str, object] | None = None,
    **options: object,
) -> GraphCollection:
    """Trace ``model`` and every failing submodule's children; never raises for the
    model's own faults. With ``args``/``kwargs`` (sample inputs) the model is run
    once eagerly so each child is traced with the inputs it really receives.

    Options are those of ``@pytest.mark.traceable``. The model is left as it was.

    Example::

        collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 64, 64),))
        print(collection.coverage, collection.table())
    """
    if concrete_args is not None:
        options = {**options, "concrete_args": concrete_args}
    resolved = resolve_options(("recursive_trace()", options))
    with_inputs = args is not None or kwargs is not None
    with collection_paused():
        # buffer values are only lent to the eager run; without inputs, attributes are all
        # to restore, and they are taken from torch.fx's own listing of the modules for
        # the root's trace, before any forward runs (where nothing else can run first)
        captured: list[ModelState] = []
        listed = not with_inputs and _lists_first(model, resolved)
        if not listed:
            captured.append(ModelState.capture(model) if with_inputs else ModelState.attributes_of(modules_of(model)))
        try:
            eager = None
            root_concrete: Mapping[str, object] | None = None
            if with_inputs:
                if not isinstance(args, tuple):
                    args = tuple(args) if isinstance(args, list) else (() if args is None else (args,))
                eager = record_eager(model, args, dict(kwargs or {}), captured[0])
                root_concrete = bind_call(model, args, dict(kwargs or {}), resolved.concrete_args).concrete
            else:
                root_concrete = resolved.concrete_args
            with suspended():
                collection = localize(
                    model, resolved, root_concrete=root_concrete, eager=eager,
                    on_listed=(lambda modules: captured.append(ModelState.attributes_of(list(modules)))) if listed else None,
                )  # fmt: skip
        finally:
            for state in captured:
                state.restore()
            del captured[:]  # the copies go now, not in the collection at the block's end
    return collection


__all__ = ["recursive_trace"]
