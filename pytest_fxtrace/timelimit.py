"""The per-check time limit (option ``timeout``), so one pathological model cannot hang a
suite: ``time_limit`` raises ``CheckTimeout`` from a SIGALRM on the main thread, never
inside a clean-up marked ``cleanup`` (torch.fx's patch removal, our state restore),
which it waits for.

Imports no torch at import time.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any, TypeVar


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
    alarm = _Alarm(seconds)
    signal.signal(signal.SIGALRM, alarm.on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, alarm.outer_delay or math.inf))
    try:
        try:
            yield
        finally:
            alarm.closing = True
    finally:
        # also reached when the alarm raised before the line above: our timer is
        # one-shot, so nothing interrupts what follows
        alarm.closing = True
        alarm.put_back()
    if alarm.pending:
        raise CheckTimeout(seconds, deferred=True)


class _Alarm:
    """``time_limit``'s SIGALRM handler and what it shares with the block: the outer
    alarm (someone else's, kept), and whether ours fired where it could not raise."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.outer_handler = signal.getsignal(signal.SIGALRM)
        self.outer_delay, self.outer_interval = signal.getitimer(signal.ITIMER_REAL)
        self.outer_due = self.start + self.outer_delay if self.outer_delay else math.inf
        self.outer_fired = False
        self.closing = False  # set first thing when the block is left: from then on, never raise
        self.pending = False  # our alarm fired where it could not raise

    def on_alarm(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if not self.outer_fired and now >= self.outer_due - 1e-3:
            self.outer_fired = True  # the outer alarm's turn; ours is not due yet
            signal.setitimer(signal.ITIMER_REAL, max(self.start + self.seconds - now, 1e-6))
            if callable(self.outer_handler):
                self.outer_handler(signum, frame)
            return
        if self.closing:
            self.pending = True  # raised by time_limit, once everything is back
            return
        if _in_cleanup(frame):
            self.pending = True
            signal.setitimer(signal.ITIMER_REAL, _RETRY_SECONDS)  # again, once it is done
            return
        deferred, self.pending = self.pending, False
        raise CheckTimeout(self.seconds, deferred)

    def put_back(self) -> None:
        """Our timer off, the outer handler and its alarm (what is left of it) back."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.outer_handler)
        if self.outer_delay and not self.outer_fired:
            left = self.outer_due - time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), self.outer_interval)
