"""A recorded call's tensor inputs by place, and the same call at other sizes (issue 39).

A dimension ``dynamic=`` asks for is judged at sizes no recorded call had: the call's inputs
cut or repeated along it (token ids and masks stay ones the model takes), every input
dimension of the same name together. Places are named as the export backend names its
inputs (``x``, ``images[0]``, a ``**kwargs`` key): ``dims.DimSpec.input``. Used by every
backend that judges dimensions (export, compile).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence

import torch

from pytest_fxtrace.binding import static_forward
from pytest_fxtrace.dims import DimRequest, DimSpec, Input, requested_dims

Call = tuple[tuple[object, ...], dict[str, object]]


def forward_parameters(model: torch.nn.Module) -> inspect.Signature:
    """The signature of ``model``'s forward, without ``self``."""
    forward = inspect.unwrap(type(model).forward)
    signature = inspect.signature(forward)
    if static_forward(model):  # no self to drop
        return signature
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def _walk(value: object, name: str, change: Callable[[str, torch.Tensor], torch.Tensor] | None = None) -> object:
    """``value`` with each tensor leaf passed through ``change`` (by its place, named as
    ``shapes.leaves`` names them); without ``change``, the value itself."""
    if isinstance(value, torch.Tensor):
        return change(name, value) if change is not None else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = [_walk(getattr(value, f), f"{name}.{f}", change) for f in value._fields]
        make: Callable[..., object] = type(value)  # a namedtuple: its fields by position
        return make(*fields)
    if isinstance(value, (tuple, list)):
        return type(value)(_walk(item, f"{name}[{i}]", change) for i, item in enumerate(value))
    if isinstance(value, dict):
        return {k: _walk(v, f"{name}[{k!r}]" if name else str(k), change) for k, v in value.items()}
    return value


def _bound(model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> inspect.BoundArguments:
    return forward_parameters(model).bind(*args, **kwargs)


def tensor_inputs(model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> list[Input]:
    """Every tensor input of a call, by place (``x``, ``images[0]``, a ``**kwargs`` key)."""
    found: list[Input] = []

    def note(place: str, tensor: torch.Tensor) -> torch.Tensor:
        found.append(Input(place, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch.")))
        return tensor

    for name, value in _places(model, args, kwargs):
        _walk(value, name, note)
    return found


def tensors_by_place(model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """The tensor inputs of a call themselves, by place (as ``tensor_inputs`` names them)."""
    found: dict[str, torch.Tensor] = {}

    def note(place: str, tensor: torch.Tensor) -> torch.Tensor:
        found[place] = tensor
        return tensor

    for name, value in _places(model, args, kwargs):
        _walk(value, name, note)
    return found


def _places(model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> list[tuple[str, object]]:
    bound = _bound(model, args, kwargs)
    parameters = forward_parameters(model).parameters
    out: list[tuple[str, object]] = []
    for name, value in bound.arguments.items():
        if parameters[name].kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
            out.extend((str(key), item) for key, item in value.items())
        else:
            out.append((name, value))
    return out


def resize(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``tensor`` at ``size`` along ``dim``: its first ``size`` entries, or itself repeated
    and cut (values stay ones the model takes: token ids, masks, positions)."""
    have = tensor.shape[dim]
    if size <= have:
        return tensor.narrow(dim, 0, size).clone()
    repeats = [1] * tensor.dim()
    repeats[dim] = math.ceil(size / max(have, 1))
    return tensor.repeat(*repeats).narrow(dim, 0, size).clone()


def resized(
    model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object], sizes: Mapping[tuple[str, int], int]
) -> Call:
    """The call's inputs with each ``(place, dimension)`` of ``sizes`` at that size."""
    by_place: dict[str, list[tuple[int, int]]] = {}
    for (place, dim), size in sizes.items():
        by_place.setdefault(place, []).append((dim, size))

    def change(place: str, tensor: torch.Tensor) -> torch.Tensor:
        for dim, size in by_place.get(place, ()):
            tensor = resize(tensor, dim, size)
        return tensor

    # passed as the call passed them (a program exported from keywords takes keywords), each
    # value named by its place as ``_places`` names it
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(forward_parameters(model).parameters.values())
    positional = [p.name for p in parameters if p.kind in kinds]
    rest = next((p.name for p in parameters if p.kind is inspect.Parameter.VAR_POSITIONAL), "args")
    new_args = tuple(
        _walk(value, positional[i] if i < len(positional) else f"{rest}[{i - len(positional)}]", change)
        for i, value in enumerate(args)
    )
    return new_args, {key: _walk(value, key, change) for key, value in kwargs.items()}


def resolve(request: DimRequest, model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> list[DimSpec]:
    """The request's dimensions for this call (``dims.requested_dims``; a ``DimError`` names
    an argument or a dimension the call does not have)."""
    arguments = list(forward_parameters(model).parameters)
    return requested_dims(request, tensor_inputs(model, args, kwargs), arguments)


def example_call(specs: Sequence[DimSpec], model: torch.nn.Module, call: Call) -> Call:
    """The call to export with: a requested dimension of size 0 or 1 there (export would fix
    it to that size) is made 2 first, with every dimension of the same name."""
    args, kwargs = call
    shapes = {leaf.place: leaf.shape for leaf in tensor_inputs(model, args, kwargs)}
    small = {spec.name for spec in specs if shapes.get(spec.input, (2,) * (spec.dim + 1))[spec.dim] < 2}
    if not small:
        return call
    grow = {(spec.input, spec.dim): 2 for spec in specs if spec.name in small}
    return resized(model, args, kwargs, grow)
