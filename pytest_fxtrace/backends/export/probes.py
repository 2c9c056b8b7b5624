"""The requested dynamic dimensions of an exported program, judged (issue 39).

For each dimension ``dynamic=`` asked for (``pytest_fxtrace.dims``): whether the program kept
it a symbol or fixed it (``specialized``, with the statement that did, read from the shape
environment's log), its range and any multiple it requires, and what the program and eager
do at sizes no recorded call had (``dims.probe_sizes``): the inputs resized along the
dimension (cut, or repeated, so token ids and masks stay valid), every input dimension of
the same name together. A size the program refuses where eager runs, or answers otherwise
at, makes the dimension ``unsound`` (with the guard and the statement that added it); a
size eager refuses is the model's own limit. A range or multiple the program keeps, which
eager keeps too, is ``constrained``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.backends.export.captured import ExportCaptured, Program
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.backends.export.shapes import (
    ShapeSites,
    Specialized,
    is_fixed,
    locate_specializations,
    shape_log,
)
from pytest_fxtrace.dims import (
    CONSTRAINED,
    DIFFERS,
    DYNAMIC,
    REFUSED,
    SPECIALIZED,
    UNSOUND,
    DimSpec,
    DimVerdict,
    SizeResult,
)
from pytest_fxtrace.probing import Prober, example_shapes, try_sizes
from pytest_fxtrace.sizes import Call, tensor_inputs
from pytest_fxtrace.state import lend

# -- judging each dimension ---------------------------------------------------------------------

def _symbols(program: Program, model: torch.nn.Module) -> dict[tuple[str, int], object]:
    """``(place, dimension) -> size`` of the program's user inputs: a symbol, or an int
    where the program fixed it."""
    exported = program.exported
    user_inputs = set(getattr(exported.graph_signature, "user_inputs", ()))
    values = [n.meta.get("val") for n in exported.graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    args, kwargs = program.example
    tensors = tensor_inputs(model, args, kwargs)
    flat = [v for v in values if isinstance(v, torch.Tensor)]
    if len(flat) != len(tensors):
        return {}
    return {(leaf.place, d): size for leaf, value in zip(tensors, flat, strict=True) for d, size in enumerate(value.shape)}


def _range(program: Program, symbol: object) -> tuple[int, int | None] | None:
    constraints = getattr(program.exported, "range_constraints", {}) or {}
    for key, value in constraints.items():
        if str(key) == str(symbol):
            low, high = getattr(value, "lower", None), getattr(value, "upper", None)
            try:
                upper = int(high) if high is not None and math.isfinite(float(high)) else None
            except (TypeError, ValueError, OverflowError):
                upper = None
            try:
                return (int(low), upper) if low is not None else None
            except (TypeError, ValueError):
                return None
    return None


def _multiple_of(sites: ShapeSites, at: Callable[[int], dict[tuple[str, int], int]], example: int) -> int | None:
    """The multiple the shape environment's guards keep this dimension to (``view(b, s // 4,
    4, d)`` guards ``Eq(32*s, 128*(s//4))``): the sizes from 2 to four times the example (at
    most 2048; and the example, and twice it) that satisfy every guard on it, when they share a
    divisor above 1 (a guard like ``s // 128 != 1`` drops the smallest multiple: the larger
    ones keep the divisor right)."""
    candidates = dict.fromkeys([*range(2, min(max(4 * example, 16), 2048) + 1), example, 2 * example])
    kept = [size for size in candidates if size >= 2 and sites.failing_guard(at(size)) is None]
    divisor = math.gcd(*kept) if kept else 0
    return divisor if divisor > 1 and len(kept) > 1 else None


def judge_dims(
    specs: Sequence[DimSpec],
    captured: ExportCaptured,
    context: CheckContext,
    run_captured: Callable[[Call], object] | None = None,
) -> list[DimVerdict]:
    """A verdict for each requested dimension of ``captured``'s program; the unseen sizes run
    on ``ep.module()``, or by ``run_captured`` (the ONNX backend: in ONNX Runtime)."""
    program, model = captured.program, context.call.module
    symbols = _symbols(program, model)
    args, kwargs = program.example
    shapes = example_shapes(model, (args, kwargs))
    sites = program.sites  # read during the export itself (non-strict); else one export more
    if sites is None:
        with quiet_torch():
            sites = shape_log(model, args, kwargs, _grouped(specs))
        if context.call.state is not None:
            context.call.state.restore()

    def run_program(inputs: Call) -> object:
        with torch.no_grad(), lend(context.call.state, captured.buffer_places), quiet_torch():
            return captured.program.module(*inputs[0], **inputs[1])

    prober = Prober(context, run_captured or run_program, quiet_torch)

    def run(name: str, inputs: Call, size: int) -> SizeResult:
        return SizeResult(size, *prober.run(inputs))

    tried = try_sizes(specs, model, (args, kwargs), run)
    examples = {(s.input, s.dim): shapes[s.input][s.dim] for s in specs}
    verdicts = []
    for spec in specs:
        sizes = tried[spec.name]
        symbol = symbols.get((spec.input, spec.dim))
        def at(size: int, name: str = spec.name) -> dict[tuple[str, int], int]:
            return {**examples, **{(s.input, s.dim): size for s in specs if s.name == name}}

        verdict = _verdict(spec, symbol, sizes, program, shapes[spec.input][spec.dim], sites, at)
        if verdict.verdict == UNSOUND and verdict.location is None:  # no guard: a condition decided
            with quiet_torch():  # from the range alone (`if x.shape[0] == 1:` with a range from 2)
                decided = shape_log(model, args, kwargs, _grouped(specs), decided=True).decided
            if context.call.state is not None:
                context.call.state.restore()
            if decided:
                verdict = dataclasses.replace(verdict, location=decided[0].location)
        verdicts.append(verdict)
    return spelled_as_dims(verdicts, model, args, kwargs, context)


def spelled_as_dims(
    verdicts: list[DimVerdict], model: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object], context: CheckContext
) -> list[DimVerdict]:
    """Where every dimension holds and some are constrained: each constrained one written as
    ``torch.export.Dim`` would take it (``Dim("seq", min=2, max=32)``; a multiple as a derived
    dimension, ``4 * Dim("_seq", ...)``), what torch's own constraint solver suggests to a
    user who passes a bare ``Dim``, verified by exporting the whole request so (non-strict).
    Dimensions given at a nested place (``images[0]``) are left as they are."""
    if any(v.failing for v in verdicts) or not any(v.verdict == CONSTRAINED for v in verdicts):
        return verdicts
    if any(not v.spec.input.isidentifier() or not v.spec.name.isidentifier() for v in verdicts):
        return verdicts
    texts: dict[str, str] = {}
    made: dict[str, object] = {}
    for verdict in verdicts:
        name = verdict.spec.name
        if name in made:
            continue
        low, high = verdict.range if verdict.range is not None else (2, None)
        if verdict.verdict != CONSTRAINED:
            made[name], texts[name] = torch.export.Dim(name), f'Dim("{name}")'
        elif verdict.multiple_of:
            k = verdict.multiple_of
            inner_low, inner_high = max(1, -(-low // k)), (high // k if high is not None else None)
            bound = f", max={inner_high}" if inner_high is not None else ""
            base = torch.export.Dim(f"_{name}", min=inner_low, max=inner_high) if inner_high else torch.export.Dim(f"_{name}", min=inner_low)
            made[name], texts[name] = k * base, f'{k} * Dim("_{name}", min={inner_low}{bound})'
        else:
            bound = f", max={high}" if high is not None else ""
            made[name] = torch.export.Dim(name, min=low, max=high) if high is not None else torch.export.Dim(name, min=low)
            texts[name] = f'Dim("{name}", min={low}{bound})'
    spec: dict[str, dict[int, object]] = {}
    for verdict in verdicts:
        spec.setdefault(verdict.spec.input, {})[verdict.spec.dim] = made[verdict.spec.name]
    try:
        with quiet_torch():
            torch.export.export(model, tuple(args), dict(kwargs), dynamic_shapes=spec, strict=False)
        verified = True
    except Exception:  # torch would not take the request so: shown, not verified
        verified = False
    finally:
        if context.call.state is not None:
            context.call.state.restore()
    return [
        dataclasses.replace(v, as_dim=texts[v.spec.name], as_dim_verified=verified) if v.verdict == CONSTRAINED else v
        for v in verdicts
    ]


def _grouped(specs: Sequence[DimSpec]) -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        found[spec.input] = tuple(sorted({*found.get(spec.input, ()), spec.dim}))
    return found


def _verdict(
    spec: DimSpec,
    symbol: object,
    sizes: tuple[SizeResult, ...],
    program: Program,
    example: int,
    sites: ShapeSites,
    at: Callable[[int], dict[tuple[str, int], int]],
) -> DimVerdict:
    """``at(size)``: every requested dimension's size when this one's name is at ``size`` (the
    dimensions of its name with it, the others at the example's), as the sizes were tried: a
    guard on two inputs of one name (RAFT's ``image1`` and ``image2`` batches) is only judged
    with both."""
    if symbol is None or is_fixed(symbol):
        value = int(symbol) if symbol is not None else None  # type: ignore[call-overload]  # a SymInt or int
        found = locate_specializations([Specialized(spec.input, spec.dim, value or 0)], sites)[0]
        return DimVerdict(spec, SPECIALIZED, value=value, location=found.location, sizes=sizes)
    span = _range(program, symbol)
    bad = [s for s in sizes if s.result in (REFUSED, DIFFERS)]
    if bad:
        failing = sites.failing_guard(at(bad[0].size))
        location = failing[1].location if failing is not None else None
        guard = next((s.detail for s in bad if s.result == REFUSED), "") or (failing[0] if failing else "")
        return DimVerdict(spec, UNSOUND, range=span, location=location, sizes=sizes, guard=guard)
    multiple = _multiple_of(sites, at, example)
    upper = span[1] if span is not None else None
    if multiple is None and upper is None:
        return DimVerdict(spec, DYNAMIC, range=span, sizes=sizes)
    # the statement behind the constraint: the guard a size past it breaks
    probe = upper + 1 if upper is not None else example + 1
    failing = sites.failing_guard(at(probe))
    return DimVerdict(
        spec,
        CONSTRAINED,
        range=span,
        multiple_of=multiple,
        location=failing[1].location if failing is not None else None,
        sizes=sizes,
        guard=failing[0] if failing is not None else "",
    )
