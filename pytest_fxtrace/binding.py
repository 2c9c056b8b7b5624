"""A recorded call bound to ``forward``'s signature (what a capture and a replay take),
and an eager run recorded submodule by submodule (what localization and divergence
compare against).

Knows the model and its calls; knows nothing of graphs, backends, the check's verdict
or pytest.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import inspect
import numbers
import weakref
from collections.abc import Callable, Hashable, Mapping

import torch
import torch.fx

from pytest_fxtrace import _compat
from pytest_fxtrace.capture import suspended
from pytest_fxtrace.options import OptionError
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import ModelState, named_modules


@dataclasses.dataclass(frozen=True)
class BoundInputs:
    """One recorded call, as the tracer and the GraphModule want it."""

    concrete: dict[str, object]  # for Tracer.trace(concrete_args=)
    positional: list[object]  # for GraphModule(*positional, **var_kwargs)
    var_kwargs: dict[str, object]
    key: Hashable  # calls with equal keys share one traced graph (graph_key)
    names: tuple[str, ...] = ()  # forward's named parameters, one per leading entry of positional

    def inputs_for(self, gm: torch.fx.GraphModule) -> list[object]:
        """The positional inputs of ``gm``: one per parameter of forward, as torch.fx's
        tracer keeps a placeholder for each (concrete ones included). A tracer that erases
        the placeholders of concrete arguments (HF's ``HFTracer``) gets only the ones its
        graph kept, by name."""
        kept = [n.target for n in _compat.placeholders(gm.graph) if isinstance(n.target, str) and not n.target.startswith("*")]
        if len(kept) == len(self.names) or not set(kept) <= set(self.names):  # (flattened: PH leaves)
            return self.positional
        by_name = dict(zip(self.names, self.positional, strict=False))  # then *args
        return [by_name[name] for name in kept] + self.positional[len(self.names) :]

    def call(self, gm: torch.fx.GraphModule) -> object:
        """Run ``gm`` on this call's inputs."""
        return gm(*self.inputs_for(gm), **self.var_kwargs)


def _has_tensor(value: object) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in _compat.tree_leaves(value))


_SIGNATURES: weakref.WeakKeyDictionary[Callable[..., object], inspect.Signature] = weakref.WeakKeyDictionary()


def _forward_signature(forward: Callable[..., object]) -> inspect.Signature:
    """``inspect.signature`` of an unwrapped ``forward``, once per function (it is
    asked for every recorded call)."""
    try:
        return _SIGNATURES[forward]
    except (KeyError, TypeError):  # TypeError: not weak-referenceable, not hashable
        pass
    signature = inspect.signature(inspect.unwrap(forward))
    with contextlib.suppress(TypeError):
        _SIGNATURES[forward] = signature
    return signature


def _placeholders_in(value: object) -> object:
    """``value`` with ``torch.fx.PH`` for each tensor, as torch.fx's concrete args take it;
    None for a container whose constructor reads its tensors and so cannot be built
    around placeholders (``PackedSequence`` checks ``batch_sizes.device``)."""
    try:
        return _compat.tree_map(lambda leaf: torch.fx.PH if isinstance(leaf, torch.Tensor) else leaf, value)
    except Exception:  # the container's own constructor refused a placeholder
        return None


def static_forward(model: torch.nn.Module) -> bool:
    """Whether ``type(model).forward`` is a ``@staticmethod`` (``def forward(x)``, no self)."""
    return isinstance(inspect.getattr_static(type(model), "forward", None), staticmethod)


def bind_call(
    model: torch.nn.Module,
    args: tuple[object, ...],
    kwargs: Mapping[str, object],
    explicit: Mapping[str, object] | None,
) -> BoundInputs:
    """Automatic concrete args: parameters the call did not pass take their defaults,
    non-tensor values it passed are specialised on, tensors inside lists/dicts become
    placeholders (``torch.fx.PH``), tensors stay symbolic. ``explicit`` wins."""
    signature = _forward_signature(type(model).forward)
    # a @staticmethod forward takes no self: nn.Module.__call__ passes it the inputs alone
    static = static_forward(model)
    bound = signature.bind(*args, **kwargs) if static else signature.bind(model, *args, **kwargs)
    parameters = list(signature.parameters.items())[0 if static else 1 :]
    explicit = dict(explicit or {})
    unknown = set(explicit) - {name for name, _ in parameters}
    if unknown:
        raise OptionError(
            f"concrete_args names {sorted(unknown)}, which {type(model).__name__}.forward does not take; "
            f"its parameters are {[name for name, _ in parameters]}"
        )
    concrete: dict[str, object] = {}
    positional: list[object] = []
    names: list[str] = []
    var_kwargs: dict[str, object] = {}
    for name, param in parameters:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(bound.arguments.get(name, ()))
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_kwargs = dict(bound.arguments.get(name, {}))
            continue
        value = bound.arguments.get(name, param.default)
        positional.append(value)
        names.append(name)
        if name in explicit:
            concrete[name] = explicit[name]
        elif isinstance(value, torch.Tensor):
            continue
        elif _has_tensor(value):
            placed = _placeholders_in(value)
            if placed is not None:
                concrete[name] = placed
            # else one Proxy for the whole value, as torch.fx.symbolic_trace gives every input
        else:
            concrete[name] = value
    key = tuple((name, graph_key(value)) for name, value in concrete.items() if name not in explicit)
    return BoundInputs(concrete, positional, var_kwargs, key, tuple(names))


class _Same:
    """An object that stands for itself in a key: equal only to the same object, which
    it keeps alive (so its address cannot be reused by another while the key is held)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


_PLAIN = (str, bytes, numbers.Number, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format, enum.Enum)
_SEQUENCES = (list, tuple, torch.Size)


def graph_key(value: object) -> Hashable:
    """What a traced graph may have baked in of one concrete value, as a hashable key:
    equal keys trace alike. Plain values by type and value (``1``, ``True`` and ``1.0``
    differ, so do ``0.0`` and ``-0.0``; NaN equals NaN), lists, tuples and dicts by their
    items, ``torch.fx.PH`` (a tensor's place) as itself, and any other object by
    identity: its repr may elide what differs (a long tensor's ``...``) and its ``==``
    may not say what the graph holds.

    Example::

        graph_key({"mode": "fast", "scale": 0.5}) == graph_key({"mode": "fast", "scale": 0.5})
    """
    kind = type(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return (kind, float(value).hex(), repr(value))  # hex: exact, signed zero, NaN equal to NaN
    if isinstance(value, complex):
        return (kind, value.real.hex(), value.imag.hex())
    if isinstance(value, _PLAIN):
        return (kind, value)
    if isinstance(value, (list, tuple)) and (kind in _SEQUENCES or hasattr(kind, "_fields")):  # namedtuples too
        return (kind, tuple(graph_key(item) for item in value))
    if isinstance(value, dict) and kind in (dict, collections.OrderedDict):
        return (kind, tuple((graph_key(k), graph_key(v)) for k, v in value.items()))
    return (kind, _Same(value))


def input_signature(bound: BoundInputs) -> str:
    """Shapes and dtypes of the tensors of one call, and its non-tensor values."""

    def one(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return f"{tuple(value.shape)}"
        return value if isinstance(value, (int, float, bool, str, type(None))) else type(value).__name__

    def described(value: object) -> str:
        try:
            return str(_compat.tree_map(one, value))
        except Exception:  # a container whose constructor reads its tensors (PackedSequence)
            return f"{type(value).__name__}({', '.join(str(one(leaf)) for leaf in _compat.tree_leaves(value))})"

    return ", ".join(described(v) for v in bound.positional)


@dataclasses.dataclass
class EagerRecord:
    """Each submodule's first inputs and every output of one eager call."""

    inputs: dict[str, tuple[tuple[object, ...], dict[str, object]]]
    outputs: dict[str, list[object]]
    output: object = None
    # Python attributes the forward changed: (module path, attribute, before, after)
    changed: list[tuple[str, str, object, object]] = dataclasses.field(default_factory=list)


def record_eager(
    model: torch.nn.Module,
    args: tuple[object, ...],
    kwargs: Mapping[str, object],
    state: ModelState | None = None,
    rng: RngState | None = None,
) -> EagerRecord:
    """Run ``model`` once with hooks on every submodule; the model, its buffers and
    the RNG are as before afterwards.

    Example::

        record = record_eager(model, (x,), {})
        record.outputs["backbone"][0]
    """
    modules = named_modules(model)  # a module under two paths is recorded under its first, as listed
    names = {id(m): name for name, m in modules.items()}
    record = EagerRecord({}, {})

    def pre_hook(module: torch.nn.Module, a: tuple[object, ...], kw: dict[str, object]) -> None:
        record.inputs.setdefault(names[id(module)], (a, dict(kw)))

    def hook(module: torch.nn.Module, a: object, kw: object, output: object) -> None:
        record.outputs.setdefault(names[id(module)], []).append(output)

    before = ModelState.capture(model) if state is None else state
    rng_before = RngState.capture()
    handles = []
    try:
        for module in modules.values():
            handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        before.restore()
        if rng is not None:
            rng.restore()
        scalars = _scalars(model)
        with suspended(), torch.no_grad(), before.lent_buffers(model):
            record.output = model(*args, **kwargs)
        after = _scalars(model)
        record.changed = [
            (p, a, v, after.get((p, a))) for (p, a), v in scalars.items() if after.get((p, a)) != v
        ]
    finally:
        for handle in handles:
            handle.remove()
        before.restore()
        rng_before.restore()
    return record


def _scalars(model: torch.nn.Module) -> dict[tuple[str, str], object]:
    return {
        (path, name): value
        for path, module in model.named_modules()
        for name, value in vars(module).items()
        if not name.startswith("_") and name != "training" and type(value) in (int, float, bool, str)
    }




__all__ = ["BoundInputs", "EagerRecord", "bind_call", "input_signature", "record_eager"]
