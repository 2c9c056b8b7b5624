"""Recording outermost ``nn.Module`` calls, and the state needed to replay one.

While a ``@pytest.mark.traceable`` test runs, ``nn.Module.__call__`` is wrapped:
a call made while no other module call is running (an *outermost* call) is
handed, right after its eager forward, to an observer together with the model's
state and RNG state from just before the call. The observer (the engine) replays
it on the traced module and puts everything back, so the test sees exactly what
it would have seen unmarked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch


@dataclasses.dataclass
class RngState:
    """Every RNG a forward may draw from: torch CPU, initialised CUDA devices, Python, NumPy."""

    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: Any
    numpy: Any

    @classmethod
    def capture(cls) -> RngState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        numpy = sys.modules.get("numpy")
        return cls(
            torch.get_rng_state(),
            cuda,
            random.getstate(),
            numpy.random.get_state() if numpy is not None else None,
        )

    def restore(self) -> None:
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        numpy = sys.modules.get("numpy")
        if self.numpy is not None and numpy is not None:
            numpy.random.set_state(self.numpy)


def modules_of(root: torch.nn.Module) -> list[torch.nn.Module]:
    """``list(root.modules())``: every module once, in the same pre-order, without the
    path strings ``named_modules`` builds (this runs several times per check)."""
    found: list[torch.nn.Module] = []
    seen: set[torch.nn.Module] = set()
    stack = [root]
    while stack:
        module = stack.pop()
        if module in seen:
            continue
        seen.add(module)
        found.append(module)
        children = [child for child in module._modules.values() if child is not None]
        if children:
            stack.extend(reversed(children))
    return found


@dataclasses.dataclass
class ModelState:
    """A model's mutable state: each module's attributes, and its buffer values.

    Restoring puts attributes back (``self.calls += 1``, the training flag, a
    buffer replaced by assignment) without writing into any tensor. Buffer values
    are only ever *lent*: ``lent_buffers`` swaps fresh copies of the saved values
    into a module tree for the length of a block, so a replay (or our own eager
    run) can update running statistics without touching the user's tensors -- an
    in-place write would also break the user's pending ``backward()``.
    """

    attributes: list[tuple[torch.nn.Module, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]]
    buffer_values: dict[int, torch.Tensor]  # id(user's buffer) -> its value when captured

    @classmethod
    def capture(cls, model: torch.nn.Module, values: bool = True) -> ModelState:
        """``values=False``: attributes only, for a state that is only ever restored
        (no buffer is cloned; ``lent_buffers`` then lends nothing)."""
        modules = modules_of(model)
        attributes = [
            (module, dict(module.__dict__), dict(module._parameters), dict(module._buffers), dict(module._modules))
            for module in modules
        ]
        saved: dict[int, torch.Tensor] = {}
        if values:
            with torch.no_grad():
                for module in modules:
                    for buffer in module._buffers.values():
                        if buffer is not None and id(buffer) not in saved:
                            saved[id(buffer)] = buffer.clone()
        return cls(attributes, saved)

    def restore(self) -> None:
        """Put every module's attributes back as captured (no tensor is written)."""
        for module, attrs, params, bufs, mods in self.attributes:
            module.__dict__.clear()
            module.__dict__.update(attrs)
            # attrs hold the very dicts a forward may have changed in place
            for store, saved in (
                (module._parameters, params),
                (module._buffers, bufs),
                (module._modules, mods),
            ):
                if store or saved:  # most modules have no parameters, buffers or children
                    store.clear()
                    store.update(saved)

    @contextlib.contextmanager
    def lent_buffers(self, root: torch.nn.Module) -> Iterator[dict[int, torch.Tensor]]:
        """Within the block, every buffer under ``root`` that was captured is replaced
        by a fresh copy of its captured value; the originals go back afterwards.

        Yields ``{id(copy): original}`` so a GraphModule built inside the block can
        be pointed back at the user's buffers (``return_buffers``).
        """
        swapped = []
        lent: dict[int, torch.Tensor] = {}
        saved = self.buffer_values
        if saved:  # nothing captured (no buffers, or values=False): nothing to lend, no walk
            for module in modules_of(root):
                for name, buffer in module._buffers.items():
                    if buffer is not None and id(buffer) in saved:
                        swapped.append((module, name, buffer))
            with torch.no_grad():
                for module, name, buffer in swapped:
                    copy = saved[id(buffer)].clone()
                    lent[id(copy)] = buffer
                    module._buffers[name] = copy
        try:
            yield lent
        finally:
            for module, name, buffer in swapped:
                module._buffers[name] = buffer


def return_buffers(root: torch.nn.Module, lent: dict[int, torch.Tensor]) -> None:
    """Point buffers of ``root`` that are lent copies back at the originals."""
    if not lent:
        return
    for module in modules_of(root):
        for name, buffer in module._buffers.items():
            if buffer is not None and id(buffer) in lent:
                module._buffers[name] = lent[id(buffer)]


@dataclasses.dataclass
class CapturedCall:
    """One outermost module call: the module, its inputs and its eager output.

    ``state`` and ``rng`` are as they were just before the call, so the call can
    be replayed under the same conditions.
    """

    module: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    state: ModelState | None
    rng: RngState
    training: bool


class _Local(threading.local):
    depth = 0
    suspended = 0


_local = _Local()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Module calls made inside this block (our own traces and replays) are not recorded."""
    _local.suspended += 1
    try:
        yield
    finally:
        _local.suspended -= 1


Observer = Callable[[torch.nn.Module], "CallObserver | None"]


class CallObserver:
    """Told about one outermost call; see ``Recorder``."""

    wants_state: bool = True

    def observe(self, call: CapturedCall) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@contextlib.contextmanager
def recording(observer_for: Observer) -> Iterator[None]:
    """Wrap ``nn.Module.__call__`` so outermost calls reach ``observer_for(module)``.

    ``observer_for`` returns a ``CallObserver`` for modules it wants to see (None
    to let the call run untouched, e.g. once enough calls were checked).
    """
    original = torch.nn.Module.__call__

    def recorded_call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if _local.depth or _local.suspended:
            _local.depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                _local.depth -= 1
        with suspended():
            observer = observer_for(module)
            state = ModelState.capture(module) if observer is not None and observer.wants_state else None
            rng = RngState.capture() if observer is not None else None
        _local.depth += 1
        try:
            output = original(module, *args, **kwargs)
        finally:
            _local.depth -= 1
        if observer is not None and rng is not None:
            with suspended():
                observer.observe(
                    CapturedCall(module, args, kwargs, output, state, rng, module.training)
                )
        return output

    torch.nn.Module.__call__ = recorded_call  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.__call__ = original  # type: ignore[method-assign]
