"""The torch.export check of one model: export once per kind of call, replay every
recorded call on ``ep.module()``, compare with eager.

Like the FX check (``check.ModelChecker``) it is fed the test's recorded calls one by
one, right after each eager call, and judges each against the model as it was then.
What is particular to export:

* calls of one kind (same structure, dtypes, ranks, non-tensor values) share one
  program; a call whose size the program fixed differently gets a new export in which
  the dimensions that varied between the recorded calls are dynamic;
* ``ep.module()`` holds the model's own parameter and buffer tensors: each replay gets
  copies of the buffers as they were before that call (a forward that updates a buffer
  must not write the user's), and the export itself never writes them;
* the mode is part of the program (a train-mode export records dropout and batch-norm
  updates): train- and eval-mode calls get a program each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .capture import CallObserver, CapturedCall, ModelState, RngState, buffer_places, suspended
from .check import Suggestion, TraceReport, internal_error_report, model_error_report
from .compare import Difference, compare_outputs
from .diagnose import Diagnosis, Location
from .export_diagnose import EXPORT_FIXES, diagnose_export_failure, export_error, quiet_torch
from .export_shapes import (
    Leaf,
    Specialized,
    dynamic_shapes,
    is_fixed,
    leaves,
    locate_specializations,
    shape_log,
    specialized_dims,
    varying_dims,
)
from .guards import CheckTimeout, collection_paused, time_limit
from .options import OptionError, TraceOptions

Comparator = Callable[..., "Difference | None"]
MODES = {False: "export", True: "export-strict"}  # strict -> the backend's name


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """How a model is exported: ``strict`` (TorchDynamo) or not, and which dimensions are
    dynamic -- ``None``: those that vary between the recorded calls; ``False``: none (a
    program per input size); ``True``: every dimension of every tensor input."""

    strict: bool = False
    dynamic: bool | None = None

    @property
    def backend(self) -> str:
        return MODES[self.strict]


@dataclasses.dataclass(eq=False)
class Program:
    """One export of the model, for the calls of one kind."""

    exported: Any  # torch.export.ExportedProgram
    module: torch.nn.Module  # exported.module(), built once
    places: list[tuple[torch.nn.Module, str]]  # where its buffers are (lent a copy at each replay)
    fixed: dict[str, dict[int, int]]  # input place -> {dimension: the size the program takes}
    held: list[tuple[str, torch.Tensor]]  # the model's parameters and buffers it was exported with

    def serves(self, call_leaves: Sequence[Leaf]) -> bool:
        """Whether every dimension this program fixed has the call's size."""
        for leaf in call_leaves:
            for dim, size in self.fixed.get(leaf.name, {}).items():
                if leaf.shape is None or dim >= len(leaf.shape) or leaf.shape[dim] != size:
                    return False
        return True

    def holds_what(self, model: torch.nn.Module) -> bool:
        """Whether the model still holds the tensors the program was exported with (a test
        may load other weights by rebinding, or swap a submodule, between calls)."""
        now = dict(_tensors(model))
        return len(now) == len(self.held) and all(now.get(name) is tensor for name, tensor in self.held)


def _tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]


def _fixed_sizes(exported: Any, call_leaves: Sequence[Leaf]) -> dict[str, dict[int, int]]:
    """Each tensor input's dimensions that ``exported`` takes at one size only."""
    from ._compat import placeholders

    user_inputs = set(getattr(exported.graph_signature, "user_inputs", ()))
    values = [node.meta.get("val") for node in placeholders(exported.graph) if node.name in user_inputs]
    if len(values) != len(call_leaves):  # read otherwise: every recorded size is fixed
        return {leaf.name: dict(enumerate(leaf.shape)) for leaf in call_leaves if leaf.shape is not None}
    fixed: dict[str, dict[int, int]] = {}
    for leaf, value in zip(call_leaves, values, strict=True):
        shape = getattr(value, "shape", None)
        if leaf.shape is None or shape is None:
            continue
        fixed[leaf.name] = {d: int(size) for d, size in enumerate(shape) if is_fixed(size)}
    return fixed


def export_code(exported: Any) -> str:
    """The exported program as reviewable text: each graph input (a parameter, a buffer, a
    user input) with its dtype and shape, the range of each dynamic dimension, then the
    graph module's code. Stable from run to run (no addresses, no object ids, symbols
    named from their inputs by torch)."""
    from ._compat import placeholders

    values = {node.name: node.meta.get("val") for node in placeholders(exported.graph)}
    lines = ["# inputs of the exported graph"]
    for spec in exported.graph_signature.input_specs:
        kind = getattr(spec.kind, "name", str(spec.kind)).lower().replace("_", " ")
        name = getattr(spec.arg, "name", str(spec.arg))
        target = f" {spec.target}" if getattr(spec, "target", None) else ""
        lines.append(f"#   {name}: {kind}{target} {_value_text(values.get(name))}".rstrip())
    constraints = getattr(exported, "range_constraints", {}) or {}
    if constraints:
        lines.append("# dynamic dimensions")
        for symbol, bounds in sorted(constraints.items(), key=lambda item: str(item[0])):
            lines.append(f"#   {symbol} in {_range_text(bounds)}")
    code = exported.graph_module.code.strip("\n")
    return "\n".join(lines) + "\n\n" + code + "\n"


def _value_text(value: Any) -> str:
    """``f32[s34, 2]`` for a (fake) tensor, ``= 3`` for a constant input."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32", "bool": "b8"}
        name = str(dtype).removeprefix("torch.")
        return f"{short.get(name, name)}[{', '.join(str(size) for size in shape)}]"
    return "" if value is None else f"= {value!r}"


def _range_text(bounds: Any) -> str:
    lower, upper = getattr(bounds, "lower", None), getattr(bounds, "upper", None)
    if lower is None or upper is None:
        return str(bounds)
    top = "inf)" if not str(upper).lstrip("-").isdigit() else f"{upper}]"
    return f"[{lower}, {top}"


class ExportChecker(CallObserver):
    """The torch.export check of one model, fed its recorded calls.

    Example::

        checker = ExportChecker(model, TraceOptions(), ExportSettings(strict=False))
        ...feed CapturedCall objects to checker.observe...
        report = checker.finish()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        options: TraceOptions,
        settings: ExportSettings = ExportSettings(),
        compare: Comparator = compare_outputs,
        diagnose: bool = True,
    ) -> None:
        self.model = model
        self.options = options
        self.settings = settings
        self.compare = compare
        self.diagnose = diagnose  # localize and verify fixes on failure (off inside a verification)
        cls = type(model)
        self.report = TraceReport(ok=True, status="passed", model=f"{cls.__module__}.{cls.__qualname__}", options=options)
        self.programs: dict[tuple[bool, str], Program] = {}
        # each kind's recorded calls so far: their leaves, and their inputs (an export's
        # example, and a program made for a later call is run on them once)
        self._calls: dict[tuple[bool, str], list[tuple[list[Leaf], tuple[Any, ...], dict[str, Any]]]] = {}
        self.torch_output: list[str] = []  # what torch printed or logged, held back (-vv)

    @property
    def wants_more(self) -> bool:
        return self.report.ok and self.report.calls < self.options.max_replays

    @property
    def label(self) -> str:
        return self.report.model_name

    def observe(self, call: CapturedCall) -> None:
        """Judge one recorded call; the model and RNG are left as the eager call left them."""
        with collection_paused():
            after = call.state.snapshot() if call.state is not None else ModelState.capture(call.module, values=False)
            rng_after = RngState.capture()
            try:
                with suspended(), time_limit(self.options.timeout), quiet_torch() as held:
                    try:
                        self._check_call(call)
                    finally:
                        self.torch_output += held.lines()
            except CheckTimeout as exc:
                self.report = _timeout_report(self.report, exc)
            except OptionError:
                raise
            except Exception as exc:  # the model's faults are statuses by now: this one is ours
                self.report = internal_error_report(self.model, exc, self.options)
            finally:
                after.restore()
                rng_after.restore()

    # -- one call -------------------------------------------------------------------------

    def _check_call(self, call: CapturedCall) -> None:
        call_leaves = leaves(call.module, call.args, call.kwargs)
        # dynamic=False: a program per input size, so the sizes are part of the kind
        sized = self.settings.dynamic is False
        key = (call.training, repr([(leaf.name, leaf.kind, leaf.shape if sized else None) for leaf in call_leaves]))
        seen = self._calls.setdefault(key, [])
        seen.append((call_leaves, tuple(call.args), dict(call.kwargs)))
        program = self.programs.get(key)
        if program is not None and not program.holds_what(call.module):
            program = None
        if program is None or not program.serves(call_leaves):
            program = self._export(call, key)
            if program is None:
                return
            self.programs[key] = program
        self._replay(call, program, call_leaves, key)

    def _dims(self, key: tuple[bool, str]) -> dict[str, tuple[int, ...]]:
        calls = [call_leaves for call_leaves, _, _ in self._calls[key]]
        if self.settings.dynamic is False:
            return {}
        if self.settings.dynamic is True:
            return {leaf.name: tuple(range(len(leaf.shape))) for leaf in calls[-1] if leaf.shape}
        return varying_dims(calls)

    def _example(self, key: tuple[bool, str], dims: Mapping[str, Sequence[int]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The recorded call to export with: the latest, unless a dynamic dimension has
        size 0 or 1 there (export would fix it) and another call has it larger."""
        calls = self._calls[key]

        def general(call_leaves: Sequence[Leaf]) -> bool:
            return all(
                leaf.shape is None or all(leaf.shape[d] > 1 for d in dims.get(leaf.name, ()) if d < len(leaf.shape))
                for leaf in call_leaves
            )

        for call_leaves, args, kwargs in reversed(calls):
            if general(call_leaves):
                return args, kwargs
        return calls[-1][1], calls[-1][2]

    def _export(self, call: CapturedCall, key: tuple[bool, str]) -> Program | None:
        dims = self._dims(key)
        args, kwargs = self._example(key, dims)
        model = call.module
        spec = dynamic_shapes(model, args, kwargs, dims)
        if call.state is not None:
            call.state.restore()  # export runs forward's Python: as before the call
        start = time.perf_counter()
        try:
            exported = torch.export.export(model, args, kwargs, dynamic_shapes=spec, strict=self.settings.strict)
        except Exception as exc:
            self.report.trace_seconds += time.perf_counter() - start
            self._not_exportable(diagnose_export_failure(exc, model, self.settings.strict), call, key)
            return None
        finally:
            if call.state is not None:
                call.state.restore()
        self.report.trace_seconds += time.perf_counter() - start
        example_leaves = leaves(model, args, kwargs)
        fixed = specialized_dims(exported, model, args, kwargs, dims)
        if fixed:
            self._specialized(call, key, fixed, dims, args, kwargs)
            return None
        module = exported.module()
        program = Program(exported, module, buffer_places(module), _fixed_sizes(exported, example_leaves), _tensors(model))
        code = export_code(exported)
        self.report.code = code
        self.report.nodes = len(exported.graph.nodes)
        self.report.coverage = 1.0
        self.report.graph_module = module  # type: ignore[assignment]
        if not self._serves_earlier(call, program, key, dims, args, kwargs):
            return None
        return program

    def _serves_earlier(
        self,
        call: CapturedCall,
        program: Program,
        key: tuple[bool, str],
        dims: Mapping[str, Sequence[int]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> bool:
        """Run a program made for a new size once on the inputs of the earlier calls of
        its kind (buffers lent, output dropped): each was judged already, but one program
        must serve them all. One that refuses is a specialization."""
        for call_leaves, earlier_args, earlier_kwargs in self._calls[key][:-1]:
            if earlier_args is args and earlier_kwargs is kwargs:
                continue
            rng = RngState.capture()
            try:
                with torch.no_grad(), _lent(call.state, program.places):
                    program.module(*earlier_args, **earlier_kwargs)
            except Exception as exc:
                self._refused(call, key, call_leaves, dims, args, kwargs, exc)
                return False
            finally:
                rng.restore()
        return True

    def _replay(self, call: CapturedCall, program: Program, call_leaves: list[Leaf], key: tuple[bool, str]) -> None:
        if call.state is not None:
            call.state.restore()
        call.rng.restore()
        start = time.perf_counter()
        try:
            with torch.no_grad(), _lent(call.state, program.places):
                output = program.module(*call.args, **call.kwargs)
        except Exception as exc:  # the program refuses or fails where eager ran
            self.report.replay_seconds += time.perf_counter() - start
            args, kwargs = self._example(key, self._dims(key))
            self._refused(call, key, call_leaves, self._dims(key), args, kwargs, exc)
            return
        self.report.replay_seconds += time.perf_counter() - start
        self.report.calls += 1
        difference = self.compare(output, call.output, rtol=self.options.rtol, atol=self.options.atol)
        if difference is not None:
            self._fail(
                "mismatch",
                "numeric",
                f"{self.label} exported ({self.settings.backend}), but the exported program's output differs "
                f"from eager on recorded call {self.report.calls}: {difference.message}",
                difference=difference,
            )

    # -- verdicts ---------------------------------------------------------------------------

    def _fail(self, status: str, category: str | None, message: str, **fields: Any) -> None:
        report = self.report
        report.ok = False
        report.status = status
        report.category = category
        report.message = message
        for name, value in fields.items():
            setattr(report, name, value)

    def inputs(self, key: tuple[bool, str]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """The inputs of the recorded calls of one kind, in order."""
        return [(args, kwargs) for _, args, kwargs in self._calls.get(key, [])]

    def _not_exportable(self, diagnosis: Diagnosis, call: CapturedCall, key: tuple[bool, str]) -> None:
        report = self.report
        report.module, report.module_type, report.location = diagnosis.module, diagnosis.module_type, diagnosis.location
        suggestion = None
        if self.diagnose:
            from .export_localize import explain_unexportable

            collection, suggestion = explain_unexportable(self, call, diagnosis, self.inputs(key))
            report.localization = collection
            report.coverage = collection.coverage if collection is not None else None
        if suggestion is None and diagnosis.code_fix:
            suggestion = Suggestion(f"in code: {diagnosis.code_fix}", False)
        report.suggestion = suggestion
        name = self.label if not diagnosis.module else f"{self.label}.{diagnosis.module} ({diagnosis.module_type})"
        where = f" `{diagnosis.location.source}` at {diagnosis.location}" if diagnosis.location else ""
        self._fail(
            "untraceable",
            diagnosis.category,
            f"{name} is not exportable ({self.settings.backend}):{where} {diagnosis.reason}",
            error=diagnosis.error,
        )

    def _specialized(
        self,
        call: CapturedCall,
        key: tuple[bool, str],
        fixed: list[Specialized],
        dims: Mapping[str, Sequence[int]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """The program fixed a dimension the recorded calls vary."""
        if self.diagnose:
            if call.state is not None:
                call.state.restore()
            try:
                fixed = locate_specializations(fixed, shape_log(call.module, args, kwargs, dims))
            finally:
                if call.state is not None:
                    call.state.restore()
        first = fixed[0]
        what = ", ".join(item.describe() for item in fixed)
        if self.settings.dynamic is True:
            why = "which dynamic=True asks to be dynamic"
        else:
            why = f"which the recorded calls vary ({self._sizes_of(key, first.place, first.dim)})"
        self._specialization_failure(
            call,
            key,
            f"{self.label} exported ({self.settings.backend}), but the program fixes {what}{_where(first.location)}, {why}",
            first.location,
        )

    def _refused(
        self,
        call: CapturedCall,
        key: tuple[bool, str],
        refused: Sequence[Leaf],
        dims: Mapping[str, Sequence[int]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        exc: BaseException,
    ) -> None:
        """The exported program raised on a recorded call the eager model ran."""
        example = leaves(call.module, args, kwargs)
        differ = [
            (leaf.name, d, leaf.shape[d], other.shape[d])
            for leaf, other in zip(refused, example, strict=False)
            if leaf.shape and other.shape and len(leaf.shape) == len(other.shape)
            for d in range(len(leaf.shape))
            if leaf.shape[d] != other.shape[d]
        ]
        if not differ:
            self._fail(
                "mismatch",
                "other",
                f"{self.label} exported ({self.settings.backend}), but the exported program raised on recorded "
                f"call {self.report.calls + 1} where the eager model did not",
                error=export_error(exc),
            )
            return
        location = None
        if self.diagnose:
            if call.state is not None:
                call.state.restore()
            try:
                sites = shape_log(call.module, args, kwargs, dims)
                found = sites.failing_guard({(name, d): size for name, d, size, _ in differ})
                if found is not None:
                    location = found[1]
            finally:
                if call.state is not None:
                    call.state.restore()
        name, dim, size, other = differ[0]
        self._specialization_failure(
            call,
            key,
            f"{self.label} exported ({self.settings.backend}) with dimension {dim} of `{name}` = {other}, but the "
            f"program refuses the recorded call where it is {size}{_where(location)}",
            location,
            error=export_error(exc),
        )

    def _specialization_failure(
        self, call: CapturedCall, key: tuple[bool, str], message: str, location: Location | None, **fields: Any
    ) -> None:
        self.report.location = location
        suggestion = None
        if self.diagnose and self.settings.dynamic is not False:
            from .export_localize import verify_settings

            static = dataclasses.replace(self.settings, dynamic=False)
            if verify_settings(self, call, self.inputs(key), static):
                suggestion = Suggestion(
                    "export each input size on its own (one program per size): "
                    f"@pytest.mark.traceable(backend={self.settings.backend!r}, dynamic=False)",
                    True,
                    {"backend": self.settings.backend, "dynamic": False},
                )
        self.report.suggestion = suggestion or Suggestion(f"in code: {EXPORT_FIXES['specialization']}", False)
        self._fail("mismatch", "specialization", message, **fields)

    def _sizes_of(self, key: tuple[bool, str], place: str, dim: int) -> str:
        sizes: list[int] = []
        for call_leaves, _, _ in self._calls.get(key, []):
            for leaf in call_leaves:
                if leaf.name == place and leaf.shape and dim < len(leaf.shape) and leaf.shape[dim] not in sizes:
                    sizes.append(leaf.shape[dim])
        return ", ".join(map(str, sizes))

    def finish(self) -> TraceReport:
        """The final report; a passing one says how many calls agreed."""
        report = self.report
        if report.ok:
            calls = "call" if report.calls == 1 else "calls"
            report.message = (
                f"{report.model_name} exported ({self.settings.backend}, {report.nodes} nodes) and matched "
                f"eager on {report.calls} recorded {calls}"
            )
        return report


def _where(location: Location | None) -> str:
    if location is None:
        return ""
    return f": `{location.source}` at {location}" if location.source else f" at {location}"


def _lent(state: ModelState | None, places: list[tuple[torch.nn.Module, str]]) -> Any:
    """The program's buffers (the model's own tensors) swapped for copies of their values
    before the call, for the length of the block."""
    if state is None or not state.originals or not places:
        return contextlib.nullcontext({})
    return state.lending(places)


def _timeout_report(report: TraceReport, exc: CheckTimeout) -> TraceReport:
    report.ok = False
    report.status = "timeout"
    report.category = None
    report.message = (
        f"{report.model_name}: the export check did not finish within timeout={exc.seconds:g} s; raise the "
        "limit (timeout=, --fx-timeout, ini fxtrace_timeout)"
    )
    return report


def check_export_call(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    options: TraceOptions,
    settings: ExportSettings = ExportSettings(),
    compare: Comparator = compare_outputs,
) -> TraceReport:
    """Run ``model(*args, **kwargs)`` eagerly and check it with torch.export; the model,
    RNG and autograd state are as before afterwards.

    Example::

        report = check_export_call(model, (x,), {}, TraceOptions(), ExportSettings(strict=True))
    """
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kwargs = dict(kwargs or {})
    before = ModelState.capture(model)
    rng_before = RngState.capture()
    try:
        with suspended(), torch.no_grad(), before.lent_buffers(model):
            try:
                output = model(*args, **kwargs)
            except Exception as exc:
                return model_error_report(model, exc, options)
        checker = ExportChecker(model, options, settings, compare)
        checker.observe(CapturedCall(model, args, kwargs, output, before, rng_before, model.training))
        return checker.finish()
    finally:
        before.restore()
        rng_before.restore()
