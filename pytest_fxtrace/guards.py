"""Guards against runaway checks and bad input.

* ``time_limit``: the per-check time limit (option ``timeout``), so one pathological
  model cannot hang a suite;
* ``LeafNameCheck``: ``leaf_modules`` entries that name no class, found at
  collection instead of silently tracing through;
* ``device_mismatch``: the sentence that explains an eager failure caused by inputs
  on another device than the model;
* ``collection_paused``: Python's cyclic garbage collector held off during a check.

Imports no torch at import time (the plugin's collection uses ``LeafNameCheck``
before it knows whether the run checks any model); each function that needs torch
imports it, and by then the user's code has.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import gc
import importlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_fxtrace.importing import OptionError, failed_import, is_missing_module

if TYPE_CHECKING:
    import torch


class CheckTimeout(BaseException):
    """A check ran past its time limit.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that a model's, or torch's,
    own ``except Exception`` cannot swallow it halfway through a trace.
    """

    def __init__(self, seconds: float, deferred: bool = False) -> None:
        super().__init__(f"the check did not finish within timeout={seconds:g} s")
        self.seconds = seconds
        # the limit ran out inside clean-up and is raised after it: where it is raised
        # says nothing about what took the time
        self.deferred = deferred


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside the block; the young generation
    is collected once at its end.

    Tracing and replaying allocate many objects that live until the check ends (graph
    nodes, proxies, state copies, tracebacks); with collection on, every few hundred
    allocations the collector walks all of them again (a few per cent of a
    localization). Collecting once at the end frees the same garbage, and the check,
    not the user's next line, pays for it. A collector the user turned off stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


# -- clean-up the time limit must not interrupt -------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])
_CLEANUP: set[CodeType] = set()  # code of functions that put something back (``cleanup``)
_RETRY_SECONDS = 0.005  # an alarm deferred by a clean-up is tried again this much later


def cleanup(function: F) -> F:
    """Mark ``function`` as clean-up (it puts back what a check changed: buffers, an
    autowrapped builtin, the model's attributes): a time limit that fires while it runs
    waits until it has returned, so a timeout never leaves its work half done.

    Call it as the whole body of a ``finally``: the alarm is deferred from the
    function's first instruction on (CPython takes a signal at a call, not between
    loading a name and calling it)."""
    _CLEANUP.add(function.__code__)
    return function


@functools.cache
def _torch_cleanup() -> frozenset[CodeType]:
    """The code of torch.fx's own clean-up in ``Tracer.trace``: the patcher that takes out
    its patches of ``nn.Module.__call__`` / ``__getattr__`` and of autowrapped functions.
    Private names: where a torch lacks one, that clean-up is not protected (the check
    still ends in a timeout)."""
    from pytest_fxtrace._compat import fx_cleanup_codes

    return fx_cleanup_codes()


def _in_cleanup(frame: FrameType | None) -> bool:
    torch_codes = _torch_cleanup()
    while frame is not None:
        if frame.f_code in _CLEANUP or frame.f_code in torch_codes:
            return True
        frame = frame.f_back
    return False


def can_enforce_time_limit() -> bool:
    """A time limit needs SIGALRM, which only the main thread of a POSIX process gets."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``CheckTimeout`` inside the block once it has run ``seconds``.

    Signal-based (``SIGALRM`` / ``setitimer``): it interrupts pure-Python loops and
    returns between torch operators, on the main thread (which is where pytest and
    pytest-xdist workers run tests). Elsewhere (a thread, Windows) it does nothing.
    An alarm already armed by someone else (pytest-timeout's signal method) is kept:
    it still fires at its own time, through its own handler.

    Clean-up is never interrupted: an alarm that fires inside a ``cleanup`` function
    or torch.fx's patcher exit is tried again just after, and one that fires while
    this block itself is being left is raised once the handler and any outer alarm
    are back (``CheckTimeout`` from the ``with`` line: the block ran past its limit).

    Example::

        with time_limit(options.timeout):
            gm = trace_module(model, tracer)
    """
    if not seconds or not can_enforce_time_limit():
        yield
        return
    start = time.monotonic()
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    outer_due = start + outer_delay if outer_delay else math.inf

    outer_fired: list[float] = []
    closing = [False]  # set first thing when the block is left: from then on, never raise
    pending = [False]  # our alarm fired where it could not raise

    def on_alarm(signum: int, frame: Any) -> None:
        now = time.monotonic()
        if not outer_fired and now >= outer_due - 1e-3:
            outer_fired.append(now)  # the outer alarm's turn; ours is not due yet
            signal.setitimer(signal.ITIMER_REAL, max(start + seconds - now, 1e-6))
            if callable(outer_handler):
                outer_handler(signum, frame)
            return
        if closing[0]:
            pending[0] = True  # raised below, once everything is back
            return
        if _in_cleanup(frame):
            pending[0] = True
            signal.setitimer(signal.ITIMER_REAL, _RETRY_SECONDS)  # again, once it is done
            return
        deferred, pending[0] = pending[0], False
        raise CheckTimeout(seconds, deferred)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_delay or math.inf))
    try:
        try:
            yield
        finally:
            closing[0] = True
    finally:
        # also reached when the alarm raised before the line above: our timer is
        # one-shot, so nothing interrupts what follows
        closing[0] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_delay and not outer_fired:
            left = outer_due - time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
    if pending[0]:
        raise CheckTimeout(seconds, deferred=True)


def _module_classes() -> Iterator[type]:
    import torch

    seen: set[type] = set()
    stack = [torch.nn.Module]
    while stack:
        cls = stack.pop()
        for sub in type.__subclasses__(cls):
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                yield sub


def _class_names() -> set[str]:
    names = {"Module"}
    for cls in _module_classes():
        names.update((cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"))
    return names


def _names_a_class(spec: str) -> bool:
    """An entry whose last dotted part starts with a capital letter names a class
    (``FrozenBatchNorm2d``, ``torchvision.ops.misc.FrozenBatchNorm2d``); anything
    else is a submodule path (``backbone.body``, ``layer1.0``)."""
    return spec.rpartition(".")[2][:1].isupper()


def names_a_class_path(spec: Any) -> bool:
    """A string naming a class by its dotted path (``pkg.module.FrozenBatchNorm2d``):
    checking it imports ``pkg.module``."""
    return isinstance(spec, str) and "." in spec.strip() and _names_a_class(spec.strip())


def _importable_class(spec: str, what: str) -> bool:
    """Whether the dotted ``spec`` imports as an ``nn.Module`` class; an ``OptionError``
    naming ``what`` when a module it names exists but fails to import."""
    import torch

    module_name, _, attr = spec.rpartition(".")
    while module_name:
        try:
            obj: Any = importlib.import_module(module_name)
        except Exception as exc:
            if not is_missing_module(module_name, exc):
                raise failed_import(what, module_name, spec, exc) from None
            module_name, _, head = module_name.rpartition(".")
            attr = f"{head}.{attr}"
            continue
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        return isinstance(obj, type) and issubclass(obj, torch.nn.Module)
    return False


class LeafNameCheck:
    """``leaf_modules`` entries that name a class no module class has, as a usage
    error naming where they were written (the marker, the ini line).

    A class-like entry (last dotted part capitalised) must be the name, qualified
    name or dotted path of a loaded ``nn.Module`` subclass, or an importable dotted
    path. Classes (not strings) and submodule paths are not judged: a path can only be
    matched against a model, and one ini line serves many models. Bare class names
    from the ini file are not judged either (``bare_names=False``): a run of a few
    test files need not import every class a project-wide ini line names.

    Example::

        LeafNameCheck().check([("@pytest.mark.traceable", {"leaf_modules": ["FrozenBN"]})])
    """

    def __init__(self) -> None:
        self._names: list[str] | None = None  # loaded nn.Module classes, computed once

    def names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(_class_names())
        return self._names

    def unknown(
        self, specs: Iterable[Any], bare_names: bool = True, what: str = "leaf_modules"
    ) -> list[tuple[str, list[str]]]:
        """``[(entry, close matches)]`` for each entry that names no class; an
        ``OptionError`` naming ``what`` for a module that exists but fails to import."""
        found = []
        for spec in specs:
            if not isinstance(spec, str) or not _names_a_class(spec.strip()):
                continue
            spec = spec.strip()
            if "." not in spec and not bare_names:
                continue
            if spec in self.names() or ("." in spec and _importable_class(spec, what)):
                continue
            found.append((spec, difflib.get_close_matches(spec, self.names(), n=3, cutoff=0.6)))
        return found

    def check(self, layers: Iterable[tuple[str, Mapping[str, Any]]], bare_names: bool = True) -> None:
        """Raise ``OptionError`` for the first layer with an entry that names no class."""
        for where, layer in layers:
            value = layer.get("leaf_modules")
            specs = [value] if isinstance(value, (str, type)) else list(value or ())
            unknown = self.unknown(specs, bare_names, f"{where}: leaf_modules")
            if unknown:
                spec, close = unknown[0]
                hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
                raise OptionError(
                    f"{where}: leaf_modules: {spec!r} matches no nn.Module class{hint}. Write the "
                    "class name as defined ('FrozenBatchNorm2d'), its dotted path "
                    "('pkg.module.FrozenBatchNorm2d'), or a submodule path ('backbone.body')."
                )


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
    from pytest_fxtrace import _compat
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
