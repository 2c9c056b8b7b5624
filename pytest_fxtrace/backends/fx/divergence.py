"""Where a traced graph first diverges: ``first_divergence`` runs the graph node by
node beside the eager run's recorded submodule outputs and names the first submodule
that disagrees; where each node came from (the user's line, the submodule); the node a
failing graph raises on.

Knows FX graphs and an ``EagerRecord``; knows nothing of the check or pytest. The
detectors of named causes are ``detectors.py``'s.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from pytest_fxtrace import _compat
from pytest_fxtrace._compat import flat_inputs, module_stack_entries
from pytest_fxtrace.binding import EagerRecord
from pytest_fxtrace.compare import compare_outputs
from pytest_fxtrace.locate import is_user_frame, node_location
from pytest_fxtrace.types import Divergence, Location

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions

# -- where nodes came from ------------------------------------------------------------

def traced_with_stack_traces(
    module: torch.nn.Module,
    make_tracer: Callable[[TraceOptions], torch.fx.Tracer],
    options: TraceOptions,
    concrete: Mapping[str, object] | None,
) -> torch.fx.GraphModule | None:
    """A second trace recording each node's stack trace (diagnosis only: it costs): the
    user's frames that created it, as ``node_location`` reads them. Not torch.fx's
    ``record_stack_traces``: its ``CapturedTraceback`` imports torch._inductor and
    TorchDynamo on first use (torch 2.14: a process's first mismatch diagnosis 4.6 CPU s,
    of which 4.5 that import)."""
    import warnings

    from pytest_fxtrace.backends.fx.tracer import trace_module

    tracer = make_tracer(options)
    create_node = tracer.create_node

    def create_node_with_stack(*args: Any, **kwargs: Any) -> torch.fx.Node:  # as create_node takes them
        node = create_node(*args, **kwargs)
        if not node.stack_trace:
            node.stack_trace = _user_stack(inspect.currentframe())
        return node

    tracer.create_node = create_node_with_stack  # type: ignore[method-assign]  # this one tracer's
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return trace_module(module, tracer, concrete)
    except Exception:
        return None


def _user_stack(frame: types.FrameType | None) -> str:
    """The user's frames from ``frame`` outwards (``is_user_frame``: not the tracer's, its
    proxies' or a wrapper's), outermost first, as a traceback shows them."""
    lines: list[str] = []
    while frame is not None:
        code = frame.f_code
        if is_user_frame(frame):
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        frame = frame.f_back
    return "\n".join(reversed(lines))


def first_divergence(
    gm: torch.fx.GraphModule,
    inputs: list[object],
    eager: EagerRecord,
    locations: Mapping[str, Location],
    rtol: float | None = None,
    atol: float | None = None,
    before_run: Callable[[], object] | None = None,
) -> Divergence | None:
    """Run ``gm`` node by node; compare each leaf call and each traced-through
    submodule's output with what that submodule returned eagerly; the first that
    differs (in graph order) wins."""
    values = _run_recording(gm, inputs, before_run)
    nodes = list(gm.graph.nodes)
    for _, path, kind, node, expected in _comparison_points(gm, nodes, eager):
        if node.name not in values:
            continue
        difference = compare_outputs(values[node.name], expected, rtol, atol)
        if difference is not None:
            return Divergence(
                path, kind, node.name, locations.get(node.name), difference.max_abs_error, difference.max_rel_error
            )
    # every submodule agrees: the root's own code diverges; name the output's producer
    output = next(n for n in reversed(nodes) if n.op == "output")
    produced = [a for a in _compat.tree_leaves(output.args) if isinstance(a, torch.fx.Node)]
    expected_leaves = [t for t in _compat.tree_leaves(eager.output) if isinstance(t, torch.Tensor)]
    for node, expected in zip(produced, expected_leaves, strict=False):
        if node.name in values:
            difference = compare_outputs(values[node.name], expected, rtol, atol)
            if difference is not None:
                return Divergence(
                    "", type(gm).__name__, node.name, locations.get(node.name), difference.max_abs_error, difference.max_rel_error
                )
    return None


def _run_recording(
    gm: torch.fx.GraphModule, inputs: list[object], before_run: Callable[[], object] | None
) -> dict[str, object]:
    """Each node's value in a run of ``gm``, by node name: those up to the node that
    raised, if one did."""
    values: dict[str, object] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            result = super().run_node(n)
            values[n.name] = result
            return result

    flat = flat_inputs(gm, inputs)
    if before_run is not None:
        before_run()
    try:
        with torch.no_grad():
            Recorder(gm).run(*flat)
    except Exception:
        pass  # compare what ran
    return values


# (graph position, submodule path, its class name, the node, what the submodule returned eagerly)
_Point = tuple[int, str, str | None, torch.fx.Node, object]


def _comparison_points(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], eager: EagerRecord) -> list[_Point]:
    """Where the graph holds a submodule's output: leaf calls, and the nodes a traced-through
    submodule's scope hands on; in graph order, the outer submodule first at one node."""
    order = {n.name: i for i, n in enumerate(nodes)}
    points: list[_Point] = []
    calls: dict[str, int] = {}
    scope_nodes: dict[str, list[torch.fx.Node]] = {}
    scope_type: dict[str, tuple[str, object]] = {}
    for node in nodes:
        if node.op == "call_module":
            path = str(node.target)
            k = calls.get(path, 0)
            calls[path] = k + 1
            outs = eager.outputs.get(path, [])
            if k < len(outs):
                points.append((order[node.name], path, type(gm.get_submodule(path)).__name__, node, outs[k]))
        for key, path, kind in module_stack_entries(node.meta.get("nn_module_stack")):
            scope_nodes.setdefault(key, []).append(node)
            scope_type[key] = (path, kind)
    for key, members in scope_nodes.items():
        path, kind = scope_type[key]
        k = int(key.rpartition("@")[2]) if "@" in key else 0
        outs = eager.outputs.get(path, [])
        if k >= len(outs):
            continue
        inside = {n.name for n in members}
        escaping = [n for n in members if any(u.name not in inside for u in n.users)]
        expected = [t for t in _compat.tree_leaves(outs[k]) if isinstance(t, torch.Tensor)]
        if escaping and len(escaping) == len(expected):
            for node, tensor in zip(escaping, expected, strict=True):
                points.append((order[node.name], path, getattr(kind, "__name__", None), node, tensor))
    points.sort(key=lambda p: (p[0], -p[1].count(".")))
    return points


def graph_node_locations(gm: torch.fx.GraphModule | None) -> dict[str, Location]:
    if gm is None:
        return {}
    found = {}
    for node in gm.graph.nodes:
        location = node_location(node)
        if location is not None:
            found[node.name] = location
    return found


def failing_node(gm: torch.fx.GraphModule, inputs: list[object]) -> tuple[torch.fx.Node | None, BaseException | None]:
    """The node whose execution raises when ``gm`` runs ``inputs`` (replay failures)."""
    current: list[torch.fx.Node] = []

    class Tracking(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            current[:] = [n]
            return super().run_node(n)

    try:
        with torch.no_grad():
            Tracking(gm).run(*flat_inputs(gm, inputs))
    except Exception as exc:
        return (current[0] if current else None), exc
    return None, None


__all__ = ["failing_node", "first_divergence", "graph_node_locations", "node_location"]
