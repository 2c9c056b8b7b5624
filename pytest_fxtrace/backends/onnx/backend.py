"""The ONNX backend (``backend="onnx"``): ``torch.onnx.export(program, dynamo=True)`` of the
program the export backend exported (non-strict), an ONNX Runtime session on the CPU, and each
recorded call run in it and compared with eager, as ``onnx_program(*args, **kwargs)`` runs it.

Each failure at its stage:

* torch.export: the export backend's diagnosis as it is (category, line, submodule, fix);
* conversion (step 3/3): an operator with no ONNX function is ``missing-operator``, at every
  statement that calls it (``convert.py``); another conversion error at its node's statement;
* the ONNX checker (``onnx.checker``, full check: what other runtimes read) or ONNX Runtime
  refusing the model: the node and its op type, at the statement;
* a call whose answer differs from eager's: ``numeric`` (the check's comparison), at the first
  ONNX node whose value differs from torch's, its statement and submodule (``divergence.py``).

The dimensions ``dynamic=`` asks for are judged as export judges them, the unseen sizes run in
ONNX Runtime. Knows no pytest and no checker.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pytest_fxtrace.backends.base import (
    CaptureFailed,
    CheckContext,
    Explanation,
    MismatchExplanation,
    Recheck,
    Replay,
)
from pytest_fxtrace.backends.export.backend import ExportBackend
from pytest_fxtrace.backends.export.captured import ExportCaptured, as_before
from pytest_fxtrace.backends.export.probes import judge_dims
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.backends.onnx._compat import onnx_export, unflatten
from pytest_fxtrace.backends.onnx.code import onnx_code
from pytest_fxtrace.backends.onnx.convert import (
    check_model,
    conversion_failure,
    failing_operator,
    model_refusal,
)
from pytest_fxtrace.backends.onnx.divergence import first_divergence, in_order
from pytest_fxtrace.backends.onnx.options import Translations, translations_of
from pytest_fxtrace.backends.onnx.translations import KNOWN, path_of
from pytest_fxtrace.compare import Tolerance
from pytest_fxtrace.dims import SPECIALIZED, DimRequest, DimSpec, DimVerdict
from pytest_fxtrace.importing import OptionError, import_object
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.sizes import Call
from pytest_fxtrace.types import Category, Diagnosis, Status, Suggestion

EPSILONS = 128  # float32 epsilons of the output's scale ONNX Runtime's answers may differ by


class OnnxStageFailed(Exception):
    """The conversion to ONNX, or ONNX Runtime's session, failed (after torch.export passed);
    ``operator``: the one the conversion failed on, where it names one."""

    def __init__(self, message: str, operator: str | None = None) -> None:
        super().__init__(message)
        self.operator = operator


@dataclasses.dataclass
class OnnxCaptured(ExportCaptured):
    """An export of the model, and its ONNX program (``torch.onnx.ONNXProgram``) with its
    ONNX Runtime session."""

    onnx: Any = None
    graph: Any = None  # its onnx.ModelProto without the weights (what the checker read)


class OnnxBackend(ExportBackend):
    """``torch.onnx.export(..., dynamo=True)`` and ONNX Runtime (CPU).

    Example::

        checker = ModelChecker(model, resolve_options(("", {"backend": "onnx"})), OnnxBackend())
    """

    name = "onnx"
    trains = False  # ONNX Runtime runs inference only: train=True is a usage error
    # ONNX Runtime sums in another order than torch (fused Conv+BatchNorm, its own GEMM): float32
    # rounding of the output's scale, where wide values cancel to small ones, is not a mismatch.
    # Measured (benchmarks/onnx_tolerance.py, torchvision): at most 36 epsilons of the largest
    # magnitude (raft_small), and torch's own float32 answer as far from float64's
    tolerances = {torch.float32: Tolerance(1.3e-6, 1e-5, epsilons=EPSILONS)}

    def capture(self, context: CheckContext) -> OnnxCaptured:
        captured = super().capture(context)  # the torch.export stage: its own diagnosis
        exported = captured.program.exported
        table = translation_table(translations_of(context.options))
        try:
            with quiet_torch():
                program = onnx_export(exported, table)
            if program is None:  # torch returns None only when asked to write a file
                raise OnnxStageFailed("torch.onnx.export returned no ONNX program")
        except Exception as exc:
            failed = OnnxStageFailed(str(exc), failing_operator(exc, exported))
            raise CaptureFailed(failed, functools.partial(conversion_failure, exc, exported)) from exc
        proto = program.model_proto  # its weights taken out by the check: nodes are what a refusal names
        try:
            check_model(proto)
        except Exception as exc:
            raise CaptureFailed(OnnxStageFailed(str(exc)), functools.partial(model_refusal, exc, proto, "the ONNX checker")) from exc
        try:
            with quiet_torch():
                program.initialize_inference_session()
        except Exception as exc:
            raise CaptureFailed(OnnxStageFailed(str(exc)), functools.partial(model_refusal, exc, proto, "ONNX Runtime")) from exc
        return OnnxCaptured(
            captured.graph_module,
            training=captured.training,
            program=captured.program,
            buffer_places=captured.buffer_places,
            onnx=program,
            graph=proto,
        )

    def replay(self, captured: ExportCaptured, context: CheckContext) -> Replay:
        """The ONNX model's outputs in ONNX Runtime, in the structure of the program's
        (ONNX gives them flat); ONNX writes no buffers (``buffers`` None: not said)."""
        assert isinstance(captured, OnnxCaptured)
        return Replay(self._run_onnx(captured, (context.call.args, context.call.kwargs)))

    def _run_onnx(self, captured: OnnxCaptured, inputs: Call) -> object:
        # ONNX Runtime's inputs are the flattened (args, kwargs) of the export's call: a later
        # call's keywords in another order would land on each other's inputs
        args, kwargs = in_order(captured.onnx.exported_program, inputs)
        with torch.no_grad(), quiet_torch():
            outputs = captured.onnx(*args, **kwargs)
        spec = captured.program.exported.call_spec.out_spec
        flat = list(outputs)
        if spec is None or spec.num_leaves != len(flat):
            return tuple(flat)
        return unflatten(flat, spec)

    def artifact_failure(self, captured: ExportCaptured, context: CheckContext) -> tuple[Status, Diagnosis] | None:
        """None: ``artifact=`` names the exported program's saved forms, not the ONNX model's."""
        return None

    def notes(self, captured: ExportCaptured) -> tuple[str, ...]:
        return ()  # (the exported program's saved forms are not this backend's: artifact_failure)

    def code(self, captured: ExportCaptured) -> str:
        assert isinstance(captured, OnnxCaptured)
        signature = captured.program.exported.graph_signature
        return onnx_code(captured.onnx.model, {*signature.parameters, *signature.buffers})

    def probe_dims(self, captured: ExportCaptured, context: CheckContext) -> tuple[DimVerdict, ...] | None:
        """The requested dimensions judged as export judges them, the unseen sizes run in
        ONNX Runtime; one the program keeps symbolic but the ONNX graph's input fixes
        (pytorch#157621: a dynamic batch exported as 1) is ``specialized`` by the conversion."""
        request = context.options.dynamic
        if not isinstance(request, DimRequest):
            return None
        assert isinstance(captured, OnnxCaptured)
        specs = self._requested(self._kind(context), request)
        with as_before(context.call):
            verdicts = judge_dims(specs, captured, context, functools.partial(self._run_onnx, captured))
        fixed = fixed_input_dims(captured.graph, [v.spec for v in verdicts])
        return tuple(
            dataclasses.replace(
                v,
                verdict=SPECIALIZED,
                value=fixed[(v.spec.input, v.spec.dim)],
                location=None,  # no statement of the user's: the conversion fixed it
                guard="the ONNX graph's input has this dimension fixed, which the exported program keeps symbolic",
            )
            if (v.spec.input, v.spec.dim) in fixed and v.verdict != SPECIALIZED
            else v
            for v in verdicts
        )

    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        """Before the conversion: the export backend's explanation. After it: where this
        package has a translation of the operator the conversion failed on (one ONNX lacks,
        or a call torchlib's translation refuses), that translation verified by exporting
        again (``translation_fix``); else the change in code for the diagnosis."""
        if not isinstance(failure.error, OnnxStageFailed):
            return super().explain_capture_failure(failure, context, recheck)
        diagnosis = failure.diagnosis
        text = f"in code: {diagnosis.code_fix}" if diagnosis.code_fix else "none found"
        operator = failure.error.operator
        translation = KNOWN.get(operator or "")
        if operator and translation is not None and operator not in dict(translations_of(context.options)):
            verified = translation_fix(operator, translation, context.options, recheck)
            if verified.verified:
                return Explanation(None, verified)
            text = f"{verified.text}; {text}"
        return Explanation(None, Suggestion(text, False, found=bool(diagnosis.code_fix)))

    def explain_mismatch(self, captured: ExportCaptured, context: CheckContext) -> MismatchExplanation:
        """The first ONNX node whose value differs from torch's, at its statement and submodule."""
        assert isinstance(captured, OnnxCaptured)
        options = context.options
        return MismatchExplanation(
            divergence=first_divergence(captured.onnx, context.call, context.compare, options.rtol, options.atol)
        )

    def run_failure_category(self, error: BaseException) -> Category:
        return Category.OTHER


def translation_fix(operator: str, translation: Callable[..., Any], options: TraceOptions, recheck: Recheck) -> Suggestion:
    """The ONNX translation this package has for ``operator`` (``translations.KNOWN``), added to
    the ``onnx_translations`` the check ran with and checked again: exported, run in ONNX
    Runtime on the recorded calls and compared with eager. Verified, the marker option that
    applies it and the ``custom_translation_table`` entry for the user's own export; else
    what the try found."""
    path = path_of(translation)
    translations = (*translations_of(options), (operator, path))
    passed, what = recheck(options.replace(onnx_translations=translations))
    if not passed:
        return Suggestion(f"tried the translation {path}: {what}", False, found=False)
    module, _, name = path.partition(":")
    marker = {"onnx_translations": {op: p if isinstance(p, str) else path_of(p) for op, p in translations}}
    return Suggestion(
        f"@pytest.mark.traceable(onnx_translations={marker['onnx_translations']!r}) exports it and matches eager; "
        f"in your own export: torch.onnx.export(..., custom_translation_table={{torch.ops.{operator}: {name}}}) "
        f"with `from {module} import {name}` (ONNX operators only: copy it into your export code)",
        True,
        marker,
        {"onnx_translations": translations},
    )


def translation_table(translations: Translations) -> dict[Any, Any]:
    """``torch.onnx.export``'s ``custom_translation_table`` for the ``onnx_translations``
    option ({} when it names none); an operator torch does not have, or a function that
    cannot be imported, is an ``OptionError`` naming the option."""
    table: dict[Any, Any] = {}
    for name, function in translations:
        namespace, op_name, overload = name.split(".")
        target = getattr(getattr(getattr(torch.ops, namespace, None), op_name, None), overload, None)
        if target is None:
            raise OptionError(f"onnx_translations: torch has no operator {name} (torch.ops.{name})")
        table[target] = import_object(function, "onnx_translations") if isinstance(function, str) else function
    return table


def fixed_input_dims(model: Any, specs: Sequence[DimSpec]) -> dict[tuple[str, int], int]:
    """``(input, dimension) -> size`` of each requested dimension the ONNX graph's input of
    that name has fixed (a ``dim_value``, not a symbol); inputs it names otherwise (a nested
    place, flattened) are not judged here."""
    inputs = {value.name: value for value in model.graph.input}
    found = {}
    for spec in specs:
        value = inputs.get(spec.input)
        dims = list(value.type.tensor_type.shape.dim) if value is not None else []
        if spec.dim < len(dims) and not dims[spec.dim].dim_param and dims[spec.dim].HasField("dim_value"):
            found[(spec.input, spec.dim)] = int(dims[spec.dim].dim_value)
    return found
