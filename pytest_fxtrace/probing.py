"""A recorded call run at sizes no recorded call had, by eager and by a captured program, and
compared (issue 39): what the export backend (``backends/export/probes.py``) and the compile
backend (``backends/compile/dims.py``) judge a requested dimension by.

For each name ``dynamic=`` asked for, the sizes of ``dims.probe_sizes`` (1, an odd and an even
size other than the example's, twice the example; inside the range asked), every input
dimension of that name changed together (``sizes.resized``). Each run starts from the model as
it was before the call and its RNG streams as they were, its buffers lent, and leaves the
model as it found it. Knows no pytest and no backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.dims import DIFFERS, MODEL_LIMIT, OK, REFUSED, DimSpec, SizeResult, probe_sizes
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.sizes import Call, resized, tensor_inputs
from pytest_fxtrace.state import lend

Quiet = Callable[[], contextlib.AbstractContextManager[object]]


class Prober:
    """Runs eager and the captured program (``run_program``: the program's output for a call's
    inputs, raising where the program refuses them) at new sizes, and compares.

    Example::

        prober = Prober(context, lambda inputs: program(*inputs[0], **inputs[1]), quiet_torch)
        result, detail = prober.run(resized(model, args, kwargs, {("x", 0): 3}))
    """

    def __init__(self, context: CheckContext, run_program: Callable[[Call], object], quiet: Quiet) -> None:
        self.context, self.run_program, self.quiet = context, run_program, quiet
        self.error: BaseException | None = None  # what the program raised at the latest size it refused

    def run(self, inputs: Call) -> tuple[str, str]:
        """(result, detail) of one resized call: ``OK``, ``REFUSED``, ``DIFFERS`` or ``MODEL_LIMIT``."""
        call, options = self.context.call, self.context.options
        args, kwargs = inputs
        rng = RngState.capture()
        self.error = None
        try:
            if call.state is not None:
                call.state.restore()
            call.rng.restore()  # both runs from the RNG streams as before the recorded call
            try:
                with torch.no_grad(), lend(call.state, call.module), self.quiet():
                    expected = call.module(*args, **kwargs)
            except Exception as exc:
                return MODEL_LIMIT, f"{type(exc).__name__}: {_first_line(exc)}"
            call.rng.restore()
            if call.state is not None:
                call.state.restore()
            try:
                actual = self.run_program(inputs)
            except Exception as exc:
                self.error = exc
                return REFUSED, _first_line(exc) or type(exc).__name__
            difference = self.context.compare(actual, expected, rtol=options.rtol, atol=options.atol)
            if difference is not None:
                return DIFFERS, difference.message
            return OK, ""
        finally:
            rng.restore()
            if call.state is not None:
                call.state.restore()


def try_sizes(
    specs: Sequence[DimSpec],
    model: torch.nn.Module,
    call: Call,
    run: Callable[[str, Call, int], SizeResult],
) -> dict[str, tuple[SizeResult, ...]]:
    """Each requested name's unseen sizes, tried by ``run`` (the name, the resized call, the size),
    every dimension of that name changed together; by name."""
    args, kwargs = call
    shapes = example_shapes(model, call)
    tried: dict[str, tuple[SizeResult, ...]] = {}
    for name in dict.fromkeys(spec.name for spec in specs):
        group = [spec for spec in specs if spec.name == name]
        example = shapes[group[0].input][group[0].dim]
        low = max((s.min for s in group if s.min is not None), default=None)
        high = min((s.max for s in group if s.max is not None), default=None)
        tried[name] = tuple(
            run(name, resized(model, args, kwargs, {(s.input, s.dim): size for s in group}), size)
            for size in probe_sizes(example, low, high)
        )
    return tried


def example_shapes(model: torch.nn.Module, call: Call) -> Mapping[str, tuple[int, ...]]:
    """The shape of each tensor input of ``call``, by place."""
    return {leaf.place: leaf.shape for leaf in tensor_inputs(model, *call)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
