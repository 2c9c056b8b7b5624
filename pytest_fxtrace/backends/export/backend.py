"""The torch.export backends: ``"export"`` (``torch.export.export(..., strict=False)``,
torch's default: the model's Python runs for real on fake tensors) and
``"export-strict"`` (``strict=True``: TorchDynamo reads the bytecode).

What is particular to export, against the FX backend:

* calls of one kind (same structure, dtypes, ranks, non-tensor values) share one
  program; a call of a size the program fixed otherwise is exported again, with the
  dimensions that varied between the recorded calls dynamic (``Dim.AUTO``), and a
  dimension export fixes anyway is a ``specialization`` naming the input, the dimension
  and the user's statement (``export_shapes``);
* ``ep.module()`` holds the model's own parameter and buffer tensors: each replay gets
  copies of the buffers as they were before that call, and the export never writes them;
* the mode is part of the program: train- and eval-mode calls get one each;
* failures are diagnosed from the exception and its frames (``export_diagnose``) and
  localized by exporting submodules on their recorded inputs (``export_localize``);
  torch's own output (the partial graph it prints on failure, its logs) is held back.

Knows no pytest and no checker; everything arrives as arguments.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pytest_fxtrace.backends.base import (
    Backend,
    CaptureFailed,
    CheckContext,
    Explanation,
    Recheck,
    Replay,
    Seams,
    Words,
    run_grad,
)
from pytest_fxtrace.backends.export.artifact import artifact_failure, artifact_notes
from pytest_fxtrace.backends.export.captured import (
    ExportCaptured,
    Kind,
    Program,
    as_before,
    fixed_sizes,
    model_tensors,
    module_of,
    refused_earlier,
)
from pytest_fxtrace.backends.export.code import export_code
from pytest_fxtrace.backends.export.diagnose import (
    EXPORT_FIXES,
    diagnose_export_failure,
    export_error,
    fake_constants,
    is_interface_error,
)
from pytest_fxtrace.backends.export.localize import completed_calls, localize_export
from pytest_fxtrace.backends.export.probes import judge_dims
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.backends.export.shapes import (
    Leaf,
    ShapeSites,
    dynamic_shapes,
    leaves,
    locate_specializations,
    reading_specializations,
    shape_log,
    specialized_dims,
    varying_dims,
)
from pytest_fxtrace.backends.spec import get_spec
from pytest_fxtrace.binding import bind_call
from pytest_fxtrace.capture import CapturedCall, suspended
from pytest_fxtrace.diagnose import attribute_write, write_kind
from pytest_fxtrace.dims import DimError, DimRequest, DimSpec, DimVerdict
from pytest_fxtrace.options import OptionError, TraceOptions
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.sizes import example_call, resolve
from pytest_fxtrace.state import buffer_places, lend, lent_values
from pytest_fxtrace.types import Category, Diagnosis, Location, Status, Suggestion

STRICT = "export-strict"


class ExportBackend(Backend[ExportCaptured]):
    """``torch.export.export``; the backend's name in the options (``"export"`` or
    ``"export-strict"``) decides the mode, so a fix search can recheck a call in the
    other mode with the same backend.

    Example::

        checker = ModelChecker(model, resolve_options(("", {"backend": "export"})), ExportBackend())
    """

    name = "export"

    def __init__(self, seams: Seams | None = None) -> None:
        super().__init__(seams)
        self._kinds: dict[tuple[bool, str], Kind] = {}
        # the call being checked and its leaves (the check asks for them several times)
        self._leaves: tuple[CapturedCall | None, list[Leaf]] = (None, [])
        # the call whose export failed last, and the submodules that export got through
        self._completed: tuple[CapturedCall | None, frozenset[str]] = (None, frozenset())

    # -- mode and words -------------------------------------------------------------------

    def mode(self, options: TraceOptions) -> str:
        names = [name for name in options.backend if name in (ExportBackend.name, STRICT)]
        return names[0] if names else self.name

    def strict(self, options: TraceOptions) -> bool:
        return self.mode(options) == STRICT

    def code_fix(self, category: Category) -> str | None:
        return EXPORT_FIXES.get(category) or super().code_fix(category)

    def words(self, options: TraceOptions) -> Words:
        return get_spec(self.mode(options)).words  # "exportable (export-strict)"

    # -- which calls share a program ------------------------------------------------------------

    def _call_leaves(self, call: CapturedCall) -> list[Leaf]:
        noted, found = self._leaves
        if noted is not call:
            found = leaves(call.module, call.args, call.kwargs)
            self._leaves = (call, found)
        return found

    def capture_key(self, context: CheckContext) -> str:
        """Calls of one structure share a program (sizes may differ; with ``dynamic=False``
        each size is its own kind). The call is noted among its kind's calls."""
        call = context.call
        call_leaves = self._call_leaves(call)
        sized = context.options.dynamic is False
        key = repr([(leaf.name, leaf.kind, leaf.shape if sized else None) for leaf in call_leaves])
        kind = self._kinds.setdefault((call.training, key), Kind())
        if not any(noted is call for noted in kind.noted):
            kind.noted.append(call)
            kind.calls.append((call_leaves, tuple(call.args), dict(call.kwargs)))
        return key

    def _kind(self, context: CheckContext) -> Kind:
        return self._kinds[(context.call.training, self.capture_key(context))]

    def serves(self, captured: ExportCaptured, context: CheckContext) -> bool:
        return captured.program.serves(self._call_leaves(context.call))

    def still_holds(self, captured: ExportCaptured, model: torch.nn.Module) -> bool:
        return captured.program.holds_what(model)

    # -- capture and run ------------------------------------------------------------------------

    def _dims(self, kind: Kind, options: TraceOptions) -> dict[str, tuple[int, ...]]:
        calls = [call_leaves for call_leaves, _, _ in kind.calls]
        if options.dynamic is False:
            return {}
        if isinstance(options.dynamic, DimRequest):  # the dimensions asked for, by name
            found: dict[str, tuple[int, ...]] = {}
            for spec in self._requested(kind, options.dynamic):
                found[spec.input] = tuple(sorted({*found.get(spec.input, ()), spec.dim}))
            return found
        if options.dynamic is True:
            return {leaf.name: tuple(range(len(leaf.shape))) for leaf in calls[-1] if leaf.shape}
        return varying_dims(calls)

    def _requested(self, kind: Kind, request: DimRequest) -> list[DimSpec]:
        """The request's dimensions for the kind's latest call; one that names an argument or
        a dimension the call lacks is a usage error."""
        _, args, kwargs = kind.calls[-1]
        model = kind.noted[-1].module
        try:
            return resolve(request, model, args, kwargs)
        except DimError as exc:
            raise OptionError(str(exc)) from None

    def probe_dims(self, captured: ExportCaptured, context: CheckContext) -> tuple[DimVerdict, ...] | None:
        """Each requested dimension judged: kept a symbol or fixed, its range, and the program
        against eager at sizes no recorded call had (``probes.judge_dims``); None when
        ``dynamic=`` asked for no dimension by name."""
        request = context.options.dynamic
        if not isinstance(request, DimRequest):
            return None
        specs = self._requested(self._kind(context), request)
        with as_before(context.call):
            return tuple(judge_dims(specs, captured, context))

    @staticmethod
    def _example(kind: Kind, dims: Mapping[str, Sequence[int]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The recorded call to export with: the latest, unless a dynamic dimension has
        size 0 or 1 there (export would fix it) and another call has it larger."""

        def general(call_leaves: Sequence[Leaf]) -> bool:
            return all(
                leaf.shape is None or all(leaf.shape[d] > 1 for d in dims.get(leaf.name, ()) if d < len(leaf.shape))
                for leaf in call_leaves
            )

        for call_leaves, args, kwargs in reversed(kind.calls):
            if general(call_leaves):
                return args, kwargs
        return kind.calls[-1][1], kind.calls[-1][2]

    def capture(self, context: CheckContext) -> ExportCaptured:
        call, options = context.call, context.options
        model, strict = call.module, self.strict(options)
        kind = self._kind(context)
        dims = self._dims(kind, options)
        args, kwargs = self._example(kind, dims)
        if isinstance(options.dynamic, DimRequest):  # a requested dimension of size 1 is made 2
            args, kwargs = example_call(self._requested(kind, options.dynamic), model, (args, kwargs))
        spec = dynamic_shapes(model, args, kwargs, dims)
        # non-strict export runs forward's Python: the submodules it gets through before a
        # failure need not be exported again to localize it
        watching: contextlib.AbstractContextManager[set[str]] = (
            completed_calls(model) if not strict else contextlib.nullcontext(set())
        )
        # dimensions asked for by name: the shape log read during this export, for judging them
        # without a second one (non-strict: the user's frames are on the stack; measured: the
        # second export made the judged check 2.2-2.9x a one-size one, benchmarks/dims_cost.py)
        reading: contextlib.AbstractContextManager[ShapeSites | None] = (
            reading_specializations() if isinstance(options.dynamic, DimRequest) and not strict else contextlib.nullcontext()
        )
        try:
            with quiet_torch(), watching as completed, reading as sites:
                exported = torch.export.export(model, args, kwargs, dynamic_shapes=spec, strict=strict)
            fake = fake_constants(exported)
            if fake is not None:  # strict export's program of a .data read runs on fake tensors
                raise fake
        except Exception as exc:
            self._completed = (call, frozenset(completed))
            raise CaptureFailed(exc, functools.partial(diagnose_export_failure, exc, model, strict)) from exc
        finally:
            if call.state is not None:
                call.state.restore()  # non-strict export runs forward's Python: attributes as before
        module = exported.module()
        program = Program(
            exported,
            module,
            fixed_sizes(exported, leaves(model, args, kwargs)),
            model_tensors(model),
            (args, kwargs),
            dims,
            specialized_dims(exported, model, args, kwargs, dims),
            sites=sites,
        )
        if not program.specialized:
            program.refused = refused_earlier(program, kind, call)
        return ExportCaptured(
            module, training=call.training, program=program, buffer_places=buffer_places(module),
            notes=artifact_notes(options),
        )

    def replay(self, captured: ExportCaptured, context: CheckContext) -> Replay:
        """The program's output, and its buffers after the run (``ep.module()`` writes the
        mutations export recorded back into them; one it dropped leaves a buffer as it was)."""
        call, places = context.call, captured.buffer_places
        with run_grad(context.options), lend(call.state, places) as lent:
            output = captured.program.module(*call.args, **call.kwargs)
            return Replay(output, lent_values(places, lent))

    def code(self, captured: ExportCaptured) -> str:
        return export_code(captured.program.exported)

    def notes(self, captured: ExportCaptured) -> tuple[str, ...]:
        """A saved form ``artifact=`` asked for that this machine cannot make (``aoti``
        without a C++ compiler): skipped, and said."""
        return captured.notes

    def artifact_failure(self, captured: ExportCaptured, context: CheckContext) -> tuple[Status, Diagnosis] | None:
        """The program saved with ``torch.export.save``, loaded back and run on this call
        (``artifact=("pt2",)``: ``artifact.py``)."""
        return artifact_failure(captured, context)

    # -- explaining ---------------------------------------------------------------------------

    def findings(self, captured: ExportCaptured, context: CheckContext, sibling: ExportCaptured | None) -> Diagnosis | None:
        """A program that fixed a dimension the recorded calls vary, or that refuses an
        earlier call of its kind: ``specialization``, with the statement that fixed it."""
        program = captured.program
        if program.specialized and not isinstance(context.options.dynamic, DimRequest):  # else: probe_dims
            with as_before(context.call), quiet_torch():
                found = locate_specializations(program.specialized, shape_log(context.call.module, *program.example, program.dims))
            first = found[0]
            what = ", ".join(item.describe() for item in found)
            if context.options.dynamic is True:
                why = "which dynamic=True asks to be dynamic"
            else:
                why = f"which the recorded calls vary ({self._sizes(context, first.place, first.dim)})"
            path, kind = module_of(context.call.module, first.module)
            return Diagnosis(
                Category.SPECIALIZATION,
                f"the program fixes {what}, {why}",
                first.location,
                path,
                kind,
                code_fix=EXPORT_FIXES["specialization"],
                fix=self._static_fix(context),
            )
        if program.refused is not None:
            refused, error = program.refused
            return self._refusal(context, program, refused, error)
        return None

    def explain_buffer(
        self, captured: ExportCaptured, context: CheckContext, module: torch.nn.Module, name: str
    ) -> Diagnosis | None:
        """A buffer rebound in forward (``self.calls = self.calls + 1``), which strict export
        leaves out of the program (non-strict export and in-place updates it records)."""
        location = attribute_write(type(module), name)
        if not self.strict(context.options) or location is None or write_kind(location.source) != "assign":
            return None
        path, kind = module_of(context.call.module, module)
        who = f"{path}.{name}" if path else f"self.{name}"
        return Diagnosis(
            Category.BAKED_CONSTANT,
            f"forward rebinds the buffer {who} to a new tensor, which strict export (TorchDynamo) "
            "leaves out of the program: it never updates the buffer, so later calls see another "
            f"buffer than eager. Update it in place (self.{name}.add_(1) or self.{name} += 1), which "
            "export records as a buffer mutation, or export non-strict: @pytest.mark.traceable(backend='export')",
            location,
            path,
            kind or type(module).__name__,
        )

    def explain_run_failure(self, captured: ExportCaptured, context: CheckContext, error: BaseException) -> Diagnosis:
        """The program raised on a call it should serve: a size it guards on
        (``specialization``, at the statement that added the guard), else ``other``."""
        program = captured.program
        found = self._refusal(context, program, self._call_leaves(context.call), error)
        return found or Diagnosis(Category.OTHER, "", error=export_error(error))

    def _refusal(
        self, context: CheckContext, program: Program, refused: Sequence[Leaf], error: BaseException
    ) -> Diagnosis | None:
        example = leaves(context.call.module, *program.example)
        differ = [
            (leaf.name, d, leaf.shape[d], other.shape[d])
            for leaf, other in zip(refused, example, strict=False)
            if leaf.shape and other.shape and len(leaf.shape) == len(other.shape)
            for d in range(len(leaf.shape))
            if leaf.shape[d] != other.shape[d]
        ]
        if not differ:
            return None
        with as_before(context.call), quiet_torch():
            sites = shape_log(context.call.module, *program.example, program.dims)
        found = sites.failing_guard({(name, d): size for name, d, size, _ in differ})
        location: Location | None = found[1].location if found is not None else None
        path, kind = module_of(context.call.module, found[1].module if found is not None else None)
        name, dim, size, other = differ[0]
        return Diagnosis(
            Category.SPECIALIZATION,
            f"the program, exported with dimension {dim} of `{name}` = {other}, refuses a recorded call where it is {size}",
            location,
            path,
            kind,
            error=export_error(error),
            code_fix=EXPORT_FIXES["specialization"],
            fix=self._static_fix(context),
        )

    def _sizes(self, context: CheckContext, place: str, dim: int) -> str:
        sizes: list[int] = []
        for call_leaves, _, _ in self._kind(context).calls:
            for leaf in call_leaves:
                if leaf.name == place and leaf.shape and dim < len(leaf.shape) and leaf.shape[dim] not in sizes:
                    sizes.append(leaf.shape[dim])
        return ", ".join(map(str, sizes))

    def _static_fix(self, context: CheckContext) -> Suggestion | None:
        """``dynamic=False`` (a program per input size), verified on every recorded input of
        this kind: each run eagerly again on the model as it was before this call (the
        earlier calls' own states are gone) and checked by a fresh backend."""
        if context.options.dynamic is False or isinstance(context.options.dynamic, DimRequest):
            return None  # (dimensions asked dynamic: a program per size is not what was asked)
        options = context.options.replace(dynamic=False)
        trial = ExportBackend(self.seams)
        call = context.call
        for _, args, kwargs in self._kind(context).calls:
            if call.state is not None:
                call.state.restore()
            rng = RngState.capture()
            try:
                with suspended(), torch.no_grad(), lend(call.state, call.module), quiet_torch():
                    expected = call.module(*args, **kwargs)
                again = CapturedCall(call.module, args, kwargs, expected, call.state, rng, call.training)
                inner = CheckContext(again, bind_call(call.module, args, kwargs, options.concrete_args), options, context.compare)
                trial.capture_key(inner)
                captured = trial.capture(inner)
                if trial.findings(captured, inner, None) is not None:
                    return None
                if call.state is not None:
                    call.state.restore()
                rng.restore()
                output = trial.run(captured, inner)
            except Exception:
                return None
            finally:
                if call.state is not None:
                    call.state.restore()
            if context.compare(output, expected, rtol=options.rtol, atol=options.atol) is not None:
                return None
        mode = self.mode(context.options)
        return Suggestion(
            f"export each input size on its own (one program per size): @pytest.mark.traceable(backend={mode!r}, dynamic=False)",
            True,
            {"backend": mode, "dynamic": False},
        )

    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        """Each submodule exported on the inputs it received; the other export mode tried
        where it may capture what this one cannot (verified by ``recheck``); else the
        change in code."""
        diagnosis = failure.diagnosis
        options = context.options
        strict = self.strict(options)
        tried = ""
        with quiet_torch():
            failed_call, completed = self._completed
            if failed_call is not context.call:
                completed = frozenset()
            collection = localize_export(context.call.module, context.call, diagnosis, strict, completed)
            suggestion = None
            # non-strict runs the Python for real (time, locks, inspect); strict (TorchDynamo)
            # reads NumPy code itself and turns int() of tensor data into a checked value:
            # where one mode cannot capture a construct the other may. Not a type it cannot
            # flatten: both modes flatten inputs and outputs with the same pytree registry
            # (torch 2.14: RuntimeError non-strict, AssertionError strict), and the recheck
            # cost T5Model's check 5 of its 10 s
            if not is_interface_error(failure.error) and (
                strict or diagnosis.category in (Category.UNSUPPORTED, Category.DATA_DEPENDENT)
            ):
                other = ExportBackend.name if strict else STRICT
                passed, _ = recheck(options.replace(backend=(other,)))
                if passed:
                    suggestion = Suggestion(
                        f"{other} exports it and matches eager: @pytest.mark.traceable(backend={other!r})",
                        True,
                        {"backend": other},
                    )
                else:
                    tried = f"none found: {other} fails too"
        if suggestion is None:
            text = f"in code: {diagnosis.code_fix}" if diagnosis.code_fix else "none found"
            found = bool(diagnosis.code_fix) and not tried  # else the text opens with "none found"
            suggestion = Suggestion(f"{tried}; {text}" if tried else text, False, found=found)
        return Explanation(collection, suggestion)


class ExportStrictBackend(ExportBackend):
    """``torch.export.export(..., strict=True)``: TorchDynamo captures the graph."""

    name = STRICT
