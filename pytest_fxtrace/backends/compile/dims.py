"""The requested dynamic dimensions of a compiled model, judged (issue 39).

The compile backend marks each dimension ``dynamic=`` asked for with
``torch._dynamo.mark_dynamic`` on every recorded call's inputs (``DimMarks``; a size of 0 or 1
is left unmarked: Dynamo specializes those). Where the model's code fixes a marked dimension,
Dynamo refuses the compile with a constraint violation that names the dimension, the value
and the user's statement (``violations``): that dimension is ``specialized``, and the check
compiles again without its mark to judge the rest.

Once every recorded call ran, each dimension is tried at sizes no recorded call had
(``probing``), through the check's own compiled model, marked as well: a size the compiled
model refuses where eager runs, or answers otherwise at, makes it ``unsound``; a size at which
Dynamo compiles the model again is counted (``recompiled``), and past size 1 (which Dynamo
always specializes) makes the dimension ``constrained`` to the range the failed guard kept,
with that guard and its statement. A marked range the code narrows (a ``Dim`` with a ``max``
above a table's length) is ``constrained`` too.

Knows no pytest and no checker.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from collections.abc import Sequence

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.backends.compile._compat import constraint_violation
from pytest_fxtrace.backends.compile.recompiles import stack_location
from pytest_fxtrace.backends.compile.session import CompileSession, quiet
from pytest_fxtrace.backends.compile.tally import Tally
from pytest_fxtrace.dims import (
    CONSTRAINED,
    DIFFERS,
    DYNAMIC,
    OK,
    RECOMPILED,
    REFUSED,
    SPECIALIZED,
    UNSOUND,
    DimSpec,
    DimVerdict,
    SizeResult,
)
from pytest_fxtrace.locate import user_location
from pytest_fxtrace.probing import Prober, example_shapes, try_sizes
from pytest_fxtrace.sizes import Call, example_call, forward_parameters, tensors_by_place
from pytest_fxtrace.types import Location

_SOURCE = re.compile(r"(L(?:\[[^\]]+\])+)\.size\(\)\[(\d+)\]")
_CONSTANT = re.compile(r"specialized it to be a constant \((-?\d+)\)")
_GUARD = re.compile(r"satisfy the generated guard (.+)$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Violation:
    """One dimension of a constraint violation Dynamo raised: its source
    (``L['x'].size()[0]``), the constant the code fixed it to, or the range its guard keeps,
    and the user's statement where torch names it."""

    source: str
    text: str  # torch's words, the bullet's first line
    value: int | None = None
    range: tuple[int, int | None] | None = None
    location: Location | None = None


def violations(message: str) -> list[Violation]:
    """The dimensions of torch's "Constraints violated (...)!" message, each bullet parsed."""
    found = []
    for bullet in re.split(r"^\s*- ", message, flags=re.MULTILINE)[1:]:
        source = _SOURCE.search(bullet)
        if source is None:
            continue
        name = _normal(source.group(0))
        constant = _CONSTANT.search(bullet)
        guard = _GUARD.search(bullet)
        span = _guard_range(guard.group(1), name) if guard is not None else None
        _, _, stack = bullet.partition("User stack:")
        found.append(
            Violation(
                name,
                bullet.strip().splitlines()[0],
                int(constant.group(1)) if constant is not None else None,
                span,
                stack_location(stack) if stack else None,
            )
        )
    return found


def _normal(source: str) -> str:
    return re.sub(r"\s+", "", source).replace('"', "'")


def _guard_range(guard: str, source: str) -> tuple[int, int | None] | None:
    """The range a guard keeps ``source`` to (``2 <= L['x'].size()[1] and L['x'].size()[1] <= 32``
    in a violation's words, ``2 <= x.size()[0] <= 15`` in a recompile's)."""
    shown = _bare(source)
    text = _bare(_normal(guard))
    low = re.search(rf"(\d+)<={re.escape(shown)}", text)
    high = re.search(rf"{re.escape(shown)}<=(\d+)", text)
    if low is None and high is None:
        return None
    return (int(low.group(1)) if low else 2, int(high.group(1)) if high else None)


def _guard_multiple(guard: str, source: str) -> int | None:
    """The multiple a guard keeps ``source`` to: ``(x.size()[0] % 4) == 0``."""
    found = re.search(rf"{re.escape(_bare(source))}\)?%(\d+)\)?==0", _bare(_normal(guard)))
    return int(found.group(1)) if found is not None else None


def _bare(source: str) -> str:
    """``L['x'].size()[0]`` as a recompile's guard writes it: ``x.size()[0]``."""
    return re.sub(r"L\['([^']+)'\]", r"\1", source)


class DimMarks:
    """The dimensions a compile check marks dynamic on each call's inputs: those asked for,
    less the ones the code fixed (``dropped``), with the ranges the code narrowed.

    Example::

        marks = DimMarks(specs, model)
        with marked_dynamic(marks.on(model, args, kwargs)):
            compiled(*args, **kwargs)
    """

    def __init__(self, specs: Sequence[DimSpec], model: torch.nn.Module) -> None:
        self.specs = list(specs)
        self.dropped: dict[tuple[str, int], Violation] = {}  # specialized: no longer marked
        self.narrowed: dict[tuple[str, int], Violation] = {}  # marked within the range torch keeps
        parameters = forward_parameters(model).parameters
        self._arguments = set(parameters)
        self._var_keyword = next((p.name for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), "kwargs")

    def source(self, spec: DimSpec) -> str:
        """Dynamo's name of the dimension: ``x`` dim 0 is ``L['x'].size()[0]``, ``images[0]``'s
        ``L['images'][0]``, a ``**kwargs`` key's ``L['kwargs']['key']``."""
        head = re.match(r"[^\[.]+", spec.input)
        name, rest = (head.group(0), spec.input[head.end():]) if head else (spec.input, "")
        base = f"L['{name}']" if name in self._arguments else f"L['{self._var_keyword}']['{name}']"
        return _normal(f"{base}{rest}.size()[{spec.dim}]")

    def on(self, model: torch.nn.Module, args: Sequence[object], kwargs: dict[str, object]) -> list[tuple[torch.Tensor, int, int | None, int | None]]:
        """``(tensor, dimension, min, max)`` to mark for one call: each requested dimension not
        dropped, of size 2 or more and inside the range asked."""
        tensors = tensors_by_place(model, args, kwargs)
        marks = []
        for spec in self.specs:
            key = (spec.input, spec.dim)
            tensor = tensors.get(spec.input)
            if key in self.dropped or tensor is None or tensor.dim() <= spec.dim:
                continue
            narrowed = self.narrowed.get(key)
            low, high = narrowed.range if narrowed is not None and narrowed.range else (spec.min, spec.max)
            size = tensor.shape[spec.dim]
            if size < 2 or low is not None and size < low or high is not None and size > high:
                continue
            marks.append((tensor, spec.dim, low, high))
        return marks

    def take(self, message: str) -> bool:
        """Note the dimensions of a constraint violation's ``message`` (``violations``) that are
        ours; True when one is new, so a compile without (or within) its mark can go on."""
        ours = {self.source(spec): spec for spec in self.specs}
        new = False
        for violation in violations(message):
            spec = ours.get(violation.source)
            if spec is None:
                continue
            key = (spec.input, spec.dim)
            if violation.value is not None or violation.range is None:
                new = new or key not in self.dropped
                self.dropped.setdefault(key, violation)
            elif key not in self.narrowed:
                self.narrowed[key], new = violation, True
        return new


def judge_dims(marks: DimMarks, session: CompileSession, context: CheckContext) -> list[DimVerdict]:
    """A verdict for each requested dimension, once the recorded calls ran through ``session``;
    the sizes tried through it too (Dynamo's recompiles there are the dimension's, not the
    recorded calls')."""
    call = context.call
    model = call.module
    tally = Tally(model)
    evidence: dict[tuple[str, int], tuple[Location | None, str]] = {}  # (name, size): statement, guard

    def run_program(inputs: Call) -> object:
        probe = dataclasses.replace(call, args=tuple(inputs[0]), kwargs=dict(inputs[1]), inputs_before=None)
        replay, events = session.run(probe, marks)
        tally.add(events, probe)
        return replay.output

    prober = Prober(context, run_program, quiet)

    def run(name: str, inputs: Call, size: int) -> SizeResult:
        before = len(tally.recompiles)
        result, detail = prober.run(inputs)
        violated = constraint_violation(prober.error) if result == REFUSED and prober.error is not None else None
        if violated is not None and marks.take(violated):  # the code fixes (or narrows) it at this size:
            before = len(tally.recompiles)  # that is the dimension's verdict; the size tried unmarked
            result, detail = prober.run(inputs)
        compiled_again = tally.recompiles[before:]
        if result == REFUSED and prober.error is not None:
            message = str(prober.error)
            found = violations(message)
            location = next((v.location for v in found if v.location), None) or user_location(prober.error)
            evidence[(name, size)] = (location, found[0].text if found else "")
        elif compiled_again:
            first = compiled_again[0]
            evidence[(name, size)] = (first.location, first.guard.partition(" #")[0].strip())
            # torch gives the newest entry's failed guard only, often the size-1 entry's
            # ("expected 1"); the guard the marked entry failed at size 1, where it fails at
            # this size too, is the one that kept it
            at_one = evidence.get((name, 1))
            sources = [marks.source(s) for s in marks.specs if s.name == name]
            if "size mismatch at index" in first.guard and at_one and any(_fails_at(at_one[1], src, size) for src in sources):
                evidence[(name, size)] = at_one
            if result == OK:
                return SizeResult(size, RECOMPILED, first.reason)
        return SizeResult(size, result, detail)

    recorded: Call = (call.args, call.kwargs)
    example = example_call(marks.specs, model, recorded)
    grown: dict[str, SizeResult] = {}
    if example is not recorded:
        # a requested size of 0 or 1 was recorded (left unmarked: Dynamo specializes it), so
        # the compiled model has no entry that keeps the dimension yet: compiled at 2 first,
        # marked, as export exports at 2; that compile is the dimension's first, not a recompile
        shapes = example_shapes(model, recorded)
        small = {s.name for s in marks.specs if s.dim < len(shapes.get(s.input, ())) and shapes[s.input][s.dim] < 2}
        for name in small:
            grown[name] = run(name, example, 2)
    tried = try_sizes(marks.specs, model, example, run)
    for name, first in grown.items():  # the size the model was compiled at, where it failed there
        if first.result in (REFUSED, DIFFERS):
            tried[name] = tuple(sorted((first, *tried[name]), key=lambda s: s.size))
    return [_verdict(spec, tried[spec.name], marks, evidence) for spec in marks.specs]


def _fails_at(guard: str, source: str, size: int) -> bool:
    """Whether ``guard`` (``(x.size()[0] % 4) == 0``, ``2 <= x.size()[0] <= 15``) is false with
    ``source`` at ``size``; False where it names anything else or is not plain arithmetic."""
    text = _bare(_normal(guard.partition(" #")[0])).replace(_bare(source), str(size))
    text = text.replace("and", " and ").replace("or", " or ")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    allowed = (ast.Expression, ast.BoolOp, ast.Compare, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return False
    try:
        return not eval(compile(tree, "<guard>", "eval"), {"__builtins__": {}})  # numbers and operators only (checked above)
    except (ArithmeticError, TypeError, ValueError):
        return False


def _verdict(
    spec: DimSpec,
    sizes: tuple[SizeResult, ...],
    marks: DimMarks,
    evidence: dict[tuple[str, int], tuple[Location | None, str]],
) -> DimVerdict:
    key = (spec.input, spec.dim)
    graph = "the compiled model"
    fixed = marks.dropped.get(key)
    if fixed is not None:
        return DimVerdict(spec, SPECIALIZED, value=fixed.value, location=fixed.location, sizes=sizes, guard=fixed.text, graph=graph)
    bad = [s for s in sizes if s.result in (REFUSED, DIFFERS)]
    if bad:
        location, guard = evidence.get((spec.name, bad[0].size), (None, ""))
        refused = next((s.detail for s in bad if s.result == REFUSED), "")
        return DimVerdict(spec, UNSOUND, location=location, sizes=sizes, guard=guard or refused, graph=graph)
    # the guard a size failed: past 1, the dimension's; at 1 (always specialized), the
    # compiled frame's guard on the size, whose range is the one the compiled model keeps
    again = [s for s in sizes if s.result == RECOMPILED and s.size >= 2]
    first = again[0] if again else next((s for s in sizes if s.result == RECOMPILED), None)
    location, guard = evidence.get((spec.name, first.size), (None, "")) if first is not None else (None, "")
    narrowed = marks.narrowed.get(key)
    span = _guard_range(guard, marks.source(spec)) or (narrowed.range if narrowed is not None else None)
    multiple = _guard_multiple(guard, marks.source(spec))
    if again or narrowed is not None or multiple or span is not None and span[1] is not None:
        guard = guard or (narrowed.text if narrowed is not None else "")
        return DimVerdict(spec, CONSTRAINED, range=span, multiple_of=multiple, location=location, sizes=sizes, guard=guard, graph=graph)
    return DimVerdict(spec, DYNAMIC, range=span or (max(spec.min or 2, 2), spec.max), sizes=sizes, graph=graph)


__all__ = ["DimMarks", "Violation", "judge_dims", "violations"]
