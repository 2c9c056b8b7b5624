"""What to say about bad input to a check: something other than an ``nn.Module``
(``NotAModule``), and an eager failure caused by inputs on another device than the
model (``device_mismatch``).

Imports no torch at import time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_fxtrace import _compat

if TYPE_CHECKING:
    import torch


class NotAModule(TypeError):
    """Something other than an ``nn.Module`` was handed over to check (a usage error)."""


def not_a_module(obj: Any) -> str:
    """What to say when something other than an ``nn.Module`` is handed over to check."""
    import torch

    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return f"expected a torch.nn.Module to check, got the class {obj.__qualname__}: pass an instance, e.g. {obj.__name__}()"
    if callable(obj):
        name = getattr(obj, "__qualname__", type(obj).__name__)
        return (
            f"expected a torch.nn.Module to check, got the function {name}: pass the model it builds "
            f"({name}()), or wrap a plain function in an nn.Module"
        )
    shown = repr(obj)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return (
        f"expected a torch.nn.Module to check, got {type(obj).__name__} {shown}: pass the model first, "
        "then its inputs, e.g. fxtrace(model, x)"
    )


def _devices(values: Iterable[Any]) -> set[torch.device]:
    import torch

    return {v.device for v in values if isinstance(v, torch.Tensor)}


def device_mismatch(model: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None) -> str | None:
    """Why an eager call failed when its inputs sit on a device none of the model's
    parameters and buffers are on; None when devices agree (or the model has none)."""
    model_devices = _devices(model.parameters()) | _devices(model.buffers())
    input_devices = _devices(_compat.tree_leaves((args, dict(kwargs or {}))))
    stray = input_devices - model_devices
    if not model_devices or not stray:
        return None
    inputs = ", ".join(sorted(str(d) for d in input_devices))
    params = ", ".join(sorted(str(d) for d in model_devices))
    target = sorted(str(d) for d in model_devices)[0]
    return (
        f"its inputs are on {inputs} but its parameters and buffers are on {params}: "
        f"move the inputs to the model's device (x.to({target!r})) or the model to the inputs'"
    )
