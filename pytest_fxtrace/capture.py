"""Recording outermost ``nn.Module`` calls.

While a ``@pytest.mark.traceable`` test runs, ``nn.Module.__call__`` is wrapped:
a call made while no other module call is running (an *outermost* call) is
handed, right after its eager forward, to an observer together with the model's
state and RNG state from just before the call (``state.py``). The observer (the
engine) replays it on the traced module and puts everything back, so the test
sees exactly what it would have seen unmarked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator

import torch

from pytest_fxtrace import _compat
from pytest_fxtrace._compat import compiling_check
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import ModelState


def grad_mode() -> str:
    """The autograd mode in force, as a record names it: ``inference_mode``, ``no_grad``
    or ``grad``. A capture runs forward's Python in it, so a model can capture in one and
    not in another (a branch on ``torch.is_grad_enabled()``, an op export decomposes)."""
    if torch.is_inference_mode_enabled():
        return "inference_mode"
    return "grad" if torch.is_grad_enabled() else "no_grad"


def autocast_mode() -> str | None:
    """The autocast regions in force, as a record names them (``cpu:bfloat16``; several
    comma-separated), or None: a capture, its replay and eager run in them alike."""
    found = _compat.autocast_state()
    return ", ".join(f"{device}:{str(dtype).removeprefix('torch.')}" for device, dtype in found) or None


@dataclasses.dataclass
class CapturedCall:
    """One outermost module call: the module, its inputs and its eager output.

    ``state`` and ``rng`` are as they were just before the call, so the call can
    be replayed under the same conditions.
    """

    module: torch.nn.Module
    args: tuple[object, ...]
    kwargs: dict[str, object]
    output: object
    state: ModelState | None
    rng: RngState
    training: bool
    # eager's after-state of the buffers the call changed (ModelState.buffer_changes)
    buffers_after: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    # the inputs as they were before the call, where its forward wrote into one (x += 1)
    inputs_before: InputsBefore | None = None
    # eager's after-values of the parameters the call changed (ModelState.parameter_changes)
    parameters_after: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)

    def fresh(self) -> CapturedCall:
        """This call with inputs as they were before it: copies where its forward wrote
        into an input (each run writes into its own), else the call itself."""
        if self.inputs_before is None:
            return self
        args, kwargs = self.inputs_before.copies()
        return dataclasses.replace(self, args=args, kwargs=kwargs)


@dataclasses.dataclass(frozen=True)
class InputsBefore:
    """A call's inputs as they were before it; its tensors are never handed to a run
    (``copies`` are), so every check of the call starts where eager started."""

    args: tuple[object, ...]
    kwargs: dict[str, object]

    def copies(self) -> tuple[tuple[object, ...], dict[str, object]]:
        args, kwargs = _compat.tree_map(_copy, (self.args, self.kwargs))
        return tuple(args), dict(kwargs)


class InputWatch:
    """Made just before a call: its tensor inputs' counts of in-place writes, and copies
    of their values (only tensors are copied); ``written()`` after the call says whether
    the forward wrote into one (``x += 1``, ``x.mul_(2)``) and gives the inputs as they
    were before it.

    Example::

        watch = InputWatch(args, kwargs)
        output = model(*args, **kwargs)
        before = watch.written()  # None: no input was written
    """

    def __init__(self, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        self.tensors = _tensors((args, kwargs))
        self.counts = [_write_count(t) for t in self.tensors]
        self.before = InputsBefore(*InputsBefore(args, kwargs).copies()) if self.tensors else None

    def written(self) -> InputsBefore | None:
        if self.before is None:
            return None
        copies = _tensors((self.before.args, self.before.kwargs))
        for tensor, count, copy in zip(self.tensors, self.counts, copies, strict=False):
            now = _write_count(tensor) if count is not None else None
            if now != count if now is not None else not _same_values(tensor, copy):
                return self.before
        return None


def _tensors(tree: object) -> list[torch.Tensor]:
    return [leaf for leaf in _compat.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _copy(value: object) -> object:
    """A copy of a tensor (its own storage, as it requires grad), anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    try:
        if not value.requires_grad:
            return value.detach().clone()
        with torch.enable_grad():  # a non-leaf, as eager's was: a run may write into it
            return value.detach().requires_grad_().clone()
    except RuntimeError:  # a tensor torch cannot copy: kept as it is
        return value


def _write_count(tensor: torch.Tensor) -> int | None:
    try:
        return _compat.write_count(tensor)
    except RuntimeError:  # an inference tensor keeps no count
        return None


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)))
    except RuntimeError:
        return True  # not comparable: taken as unwritten


class _Local(threading.local):
    # > 0 inside an outermost call being recorded or a ``suspended()`` block: module
    # calls there run untouched. One counter, so an inner call (hundreds per forward)
    # reads one attribute and writes none.
    depth = 0


_local = _Local()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Module calls made inside this block (our own traces and replays) are not recorded."""
    _local.depth += 1
    try:
        yield
    finally:
        _local.depth -= 1


Observer = Callable[[torch.nn.Module], "CallObserver | None"]


class CallObserver:
    """Told about one outermost call; see ``Recorder``."""

    wants_state: bool = True

    def observe(self, call: CapturedCall) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@contextlib.contextmanager
def recording(
    observer_for: Observer, on_error: Callable[[torch.nn.Module, Exception], None] | None = None
) -> Iterator[None]:
    """Wrap ``nn.Module.__call__`` so outermost calls reach ``observer_for(module)``.

    ``observer_for`` returns a ``CallObserver`` for modules it wants to see (None
    to let the call run untouched, e.g. once enough calls were checked).

    ``on_error(module, exc)``, when given, is told about an exception raised by the
    recording itself (``observer_for``, the state capture, the observer): it is a
    pytest-fxtrace bug, so it never surfaces from the test's ``model(x)`` line.

    ``__call__``, not ``_call_impl``: assigning a dunder on ``nn.Module`` is dearer
    (CPython updates the slot of each of its several hundred subclasses, ~0.6 ms per
    assignment against ~0.08 ms; measured 0.9 M of a marked mobilenet_v3_small
    test's 183 M instructions), but a module compiled with ``Module.compile()`` calls
    its compiled ``_call_impl`` directly: it would go unrecorded and its submodules
    be checked as separate models instead.

    Only calls made on the thread that entered the block are recorded: a module
    called on another thread meanwhile (a data-loader or metrics thread) runs
    untouched, as the patch is process-wide but the test, its RNG streams and the
    checker's state belong to this thread.

    On exit ``__call__`` is put back only if it is still ours: if someone wrapped it
    since (and holds our wrapper as their "original"), theirs stays and ours, still in
    their chain, passes every call straight through from then on.
    """
    original = torch.nn.Module.__call__
    active = [True]  # cleared on exit: a wrapper left in someone else's chain is inert
    recorded_call = _recorder(original, observer_for, on_error, active)
    torch.nn.Module.__call__ = recorded_call  # type: ignore[method-assign]  # patched for the block
    try:
        yield
    finally:
        active[0] = False
        if torch.nn.Module.__dict__.get("__call__") is recorded_call:
            torch.nn.Module.__call__ = original  # type: ignore[method-assign]  # put back


def _recorder(
    original: Callable[..., object],
    observer_for: Observer,
    on_error: Callable[[torch.nn.Module, Exception], None] | None,
    active: list[bool],
) -> Callable[..., object]:
    """``recording``'s wrapper of ``original`` (``nn.Module.__call__``), for the calling
    thread; it passes every call straight through once ``active[0]`` is cleared."""
    owner = threading.get_ident()
    is_compiling = compiling_check()

    def recorded_call(module: torch.nn.Module, *args: object, **kwargs: object) -> object:
        # pytest leaves this frame out of a failing test's traceback: a model's own error
        # reads as the model's, with no pytest-fxtrace frame between the test and forward
        __tracebackhide__ = True
        # an inner call or one of ours (the counter is per thread: another thread's
        # outermost call reads 0 here, hence the owner check after it), or one TorchDynamo
        # is compiling (a module compiled with Module.compile() calls its submodules
        # inside the compiled frame)
        if _local.depth or threading.get_ident() != owner or not active[0] or is_compiling():
            return original(module, *args, **kwargs)
        _local.depth += 1
        try:
            try:
                observer = observer_for(module)
                state = ModelState.capture(module) if observer is not None and observer.wants_state else None
                rng = RngState.capture() if observer is not None else None
                inputs = InputWatch(args, kwargs) if observer is not None else None
            except Exception as exc:  # ours, not the model's: the call still runs, unrecorded
                if on_error is None:
                    raise
                on_error(module, exc)
                observer = rng = inputs = None
            output = original(module, *args, **kwargs)  # the model's own errors propagate as they are
            if observer is not None and rng is not None:
                try:
                    after = state.buffer_changes() if state is not None else {}
                    before = inputs.written() if inputs is not None else None
                    params = state.parameter_changes() if state is not None and state.parameters else {}
                    observer.observe(
                        CapturedCall(module, args, kwargs, output, state, rng, module.training, after, before, params)
                    )
                except Exception as exc:
                    if on_error is None:
                        raise
                    on_error(module, exc)
        finally:
            _local.depth -= 1
        return output

    return recorded_call
