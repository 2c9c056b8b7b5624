"""Nested output comparison on ``torch.testing.assert_close``.

``assert_close`` already knows tensors, sequences and mappings; this walks the
structure itself so a mismatch is reported with its path in the output
(``output["boxes"][0]``) and so dataclasses, namedtuples, ``None``, numbers,
strings and other plain objects are judged too.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pytest_fxtrace._compat import default_tolerances


@dataclasses.dataclass(frozen=True)
class Difference:
    """Where traced and eager outputs first differ, and how."""

    path: str  # e.g. 'output["logits"][0]'
    message: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """A backend's default tolerance for a dtype where the user sets none: assert_close's
    ``rtol``, and an ``atol`` of at least ``epsilons`` of the dtype's machine epsilon times the
    expected tensor's largest finite magnitude.

    Float rounding in a runtime that sums in another order (ONNX Runtime's fused kernels)
    grows with the size of what is summed, not with the element's own value: where a wide
    output cancels to a small value, an element-wise tolerance calls rounding a mismatch.

    Example: ``Tolerance(1.3e-6, 1e-5, epsilons=64)`` allows 64 float32 epsilons of the
    output's scale (7.6e-6 of a largest magnitude of 1).
    """

    rtol: float
    atol: float
    epsilons: float = 0.0

    def atol_for(self, expected: torch.Tensor) -> float:
        if not self.epsilons or not expected.is_floating_point() or expected.numel() == 0:
            return self.atol
        finite = expected.detach()[torch.isfinite(expected.detach())]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
        return max(self.atol, self.epsilons * torch.finfo(expected.dtype).eps * scale)


# a backend's defaults by dtype (``Backend.tolerances``); a dtype it omits: assert_close's
Tolerances = Mapping[torch.dtype, Tolerance]


def _tolerances(
    expected: torch.Tensor, rtol: float | None, atol: float | None, defaults: Tolerances | None = None
) -> tuple[float, float]:
    own = (defaults or {}).get(expected.dtype)
    default_rtol, default_atol = (own.rtol, own.atol_for(expected)) if own else default_tolerances(expected.dtype)
    return (default_rtol if rtol is None else rtol, default_atol if atol is None else atol)


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """The largest absolute and relative differences at positions finite on both sides;
    of complex values, the size of the complex difference (the imaginary part counts)."""
    wide = torch.complex128 if actual.is_complex() else torch.float64
    a = actual.detach().to("cpu", wide)
    e = expected.detach().to("cpu", wide)
    finite = torch.isfinite(a) & torch.isfinite(e)
    if not finite.any():
        return 0.0, 0.0
    diff = (a - e).abs()[finite]
    rel = diff / e.abs()[finite].clamp_min(torch.finfo(torch.float64).tiny)
    return float(diff.max()), float(rel.max())


def _values(tensor: torch.Tensor) -> torch.Tensor:
    """What is compared: a sparse tensor's dense values, a quantized tensor's dequantized ones."""
    if tensor.is_sparse:
        return tensor.to_dense()
    return tensor.dequantize() if tensor.is_quantized else tensor


def _compare_tensors(
    actual: torch.Tensor,
    expected: torch.Tensor,
    path: str,
    rtol: float | None,
    atol: float | None,
    defaults: Tolerances | None = None,
) -> Difference | None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Difference(
            path,
            f"{path}: traced gives {tuple(actual.shape)} {actual.dtype}, "
            f"eager gives {tuple(expected.shape)} {expected.dtype}",
        )
    # both quantized (their dtypes agree): the values dequantized, and how each was quantized
    quantized = actual.is_quantized
    quantization = _quantization_difference(actual, expected) if quantized else None
    actual, expected = _values(actual), _values(expected)
    if not quantized and _identical(actual, expected):
        return None
    r, a = _tolerances(expected, rtol, atol, defaults)
    try:
        torch.testing.assert_close(
            actual, expected, rtol=r, atol=a, equal_nan=True, check_device=True, msg=None
        )
    except AssertionError as exc:
        found = _values_difference(actual, expected, path, exc)
        if not quantized:
            return found
        said = "; ".join(filter(None, [quantization, f"dequantized: {found.message[len(path) + 2 :]}"]))
        return Difference(path, f"{path}: {said}", found.max_abs_error, found.max_rel_error)
    if quantization is not None:
        return Difference(path, f"{path}: {quantization}", *_errors(actual, expected))
    return None


def _identical(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal element for element: plain strided tensors on one device whose values are the
    same (a NaN is never equal here, so NaNs go on to ``assert_close``'s ``equal_nan``).

    Measured, torch 2.14.1, 2 cores: ``assert_close`` imports ``torch.distributed.tensor`` on
    its first call (1.4 s of every pytest process that checks a model, -X importtime), then
    takes 760 us for an 8x1000 float tensor where ``torch.equal`` takes 35 us; most traced
    outputs are bit-identical to eager's."""
    plain = type(actual) is torch.Tensor and type(expected) is torch.Tensor
    return (
        plain
        and actual.layout == torch.strided == expected.layout
        and actual.device == expected.device
        and torch.equal(actual, expected)
    )


def _values_difference(actual: torch.Tensor, expected: torch.Tensor, path: str, exc: AssertionError) -> Difference:
    abs_err: float | None = None
    rel_err: float | None = None
    if actual.is_floating_point() or actual.is_complex():
        abs_err, rel_err = _errors(actual, expected)
    first = str(exc).strip().splitlines()
    message = f"{path}: " + " ".join(line.strip() for line in first)
    stray = _nonfinite_disagreement(actual, expected)
    if stray:
        message = f"{path}: {stray}"
        abs_err = rel_err = None  # no finite error to quote
    return Difference(path, message, abs_err, rel_err)


_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_symmetric, torch.per_channel_affine_float_qparams)
_SCALE_RTOL = 1.3e-6  # float32's: scales that differ by its rounding alone are the same


def _quantization_difference(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """How the traced output was quantized otherwise than eager's ('traced is quantized
    with scale 0.05 and zero_point 0, eager with scale 0.1 and zero_point 0'), or None."""
    scheme, other = actual.qscheme(), expected.qscheme()
    if scheme != other:
        return f"traced is quantized {str(scheme).removeprefix('torch.')}, eager {str(other).removeprefix('torch.')}"
    if scheme not in _PER_CHANNEL:
        scale, zero = actual.q_scale(), actual.q_zero_point()
        if zero == expected.q_zero_point() and math.isclose(scale, expected.q_scale(), rel_tol=_SCALE_RTOL, abs_tol=0.0):
            return None
        return (
            f"traced is quantized with scale {scale:.7g} and zero_point {zero}, "
            f"eager with scale {expected.q_scale():.7g} and zero_point {expected.q_zero_point()}"
        )
    axis = actual.q_per_channel_axis()
    if axis != expected.q_per_channel_axis():
        return f"traced is quantized per channel along axis {axis}, eager along axis {expected.q_per_channel_axis()}"
    scales, zeros = actual.q_per_channel_scales(), actual.q_per_channel_zero_points()
    eager_scales, eager_zeros = expected.q_per_channel_scales(), expected.q_per_channel_zero_points()
    differs = ~torch.isclose(scales, eager_scales, rtol=_SCALE_RTOL, atol=0.0) | (zeros != eager_zeros)
    if not differs.any():
        return None
    at = int(differs.nonzero()[0])
    return (
        f"traced is quantized per channel (axis {axis}) with other parameters than eager at "
        f"{int(differs.sum())} of {differs.numel()} channels; channel {at}: scale {float(scales[at]):.7g} and "
        f"zero_point {int(zeros[at])}, eager scale {float(eager_scales[at]):.7g} and zero_point {int(eager_zeros[at])}"
    )


def _nonfinite_disagreement(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """'traced gives NaN at 3 of 8 positions where eager gives a finite value' (or inf),
    when NaN / infinity positions are what differ."""
    if not (actual.is_floating_point() or actual.is_complex()):
        return None
    a, e = actual.detach().cpu(), expected.detach().cpu()
    for name, test in (("NaN", torch.isnan), ("inf", torch.isinf)):
        for side, x, y, other in (("traced", a, e, "eager"), ("eager", e, a, "traced")):
            count = int((test(x) & torch.isfinite(y)).sum())
            if count:
                return (
                    f"{side} gives {name} at {count} of {x.numel()} positions where {other} gives a "
                    "finite value"
                )
    return None


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def compare_outputs(
    actual: object,
    expected: object,
    rtol: float | None = None,
    atol: float | None = None,
    path: str = "output",
    defaults: Tolerances | None = None,
) -> Difference | None:
    """The first difference between ``actual`` (traced) and ``expected`` (eager), or None.

    Tolerances default to ``defaults``' for the dtype (a backend's), else to
    ``torch.testing.assert_close``'s dtype-based ones; NaN positions must agree.

    Example::

        compare_outputs(gm(x), model(x)) is None
    """
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return Difference(
                path, f"{path}: traced gives {type(actual).__name__}, eager gives {type(expected).__name__}"
            )
        return _compare_tensors(actual, expected, path, rtol, atol, defaults)
    if type(actual) is not type(expected) and not (
        isinstance(actual, Mapping) and isinstance(expected, Mapping)
    ) and not (_plain_sequence(actual) and _plain_sequence(expected)):
        return Difference(
            path, f"{path}: traced gives {type(actual).__name__}, eager gives {type(expected).__name__}"
        )
    children = _children(actual, expected, path)
    if isinstance(children, Difference):
        return children
    if children is None:
        return _compare_leaf(actual, expected, path)
    for a, e, sub in children:
        found = compare_outputs(a, e, rtol, atol, sub, defaults)
        if found:
            return found
    return None


def _children(actual: Any, expected: object, path: str) -> list[tuple[object, object, str]] | Difference | None:
    """The (traced, eager, path) pairs inside two containers of one kind (mappings,
    dataclasses, sequences); a ``Difference`` when their shapes differ; None for leaves."""
    if isinstance(expected, Mapping):
        if list(actual.keys()) != list(expected.keys()):
            return Difference(path, f"{path}: traced keys {list(actual.keys())}, eager keys {list(expected.keys())}")
        return [(actual[key], expected[key], f"{path}[{key!r}]") for key in expected]
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        fields = dataclasses.fields(expected)
        return [(getattr(actual, f.name), getattr(expected, f.name), f"{path}.{f.name}") for f in fields]
    if _plain_object(expected) and path.count(".") < MAX_ATTRIBUTE_DEPTH:
        # an object of the model's library that defines no ==, holding tensors (a transformers
        # DynamicCache): compared by its attributes, as the graph builds a new one
        if actual is expected:
            return []
        if list(vars(actual)) != list(vars(expected)):
            return Difference(path, f"{path}: traced attributes {list(vars(actual))}, eager {list(vars(expected))}")
        return [(getattr(actual, key), value, f"{path}.{key}") for key, value in vars(expected).items()]
    if isinstance(expected, Sequence) and not isinstance(expected, (str, bytes)):
        if len(actual) != len(expected):
            return Difference(path, f"{path}: traced has {len(actual)} items, eager has {len(expected)}")
        names = getattr(type(expected), "_fields", None) if _is_namedtuple(expected) else None
        return [
            (a, e, f"{path}.{names[index]}" if names else f"{path}[{index}]")
            for index, (a, e) in enumerate(zip(actual, expected, strict=True))
        ]
    return None


def _compare_leaf(actual: object, expected: object, path: str) -> Difference | None:
    try:
        equal = bool(actual == expected)
    except Exception:  # objects whose == is not a truth value
        equal = actual is expected
    if not equal and not (_is_nan(actual) and _is_nan(expected)):
        return Difference(path, f"{path}: traced gives {actual!r}, eager gives {expected!r}")
    return None


MAX_ATTRIBUTE_DEPTH = 16  # objects inside objects compared by attribute, at most this deep


def _plain_object(value: object) -> bool:
    """An instance whose class keeps the default identity ``==`` and holds its state in
    ``__dict__`` (not a module, a function or a class)."""
    kind = type(value)
    return (
        kind.__eq__ is object.__eq__
        and hasattr(value, "__dict__")
        and not isinstance(value, (type, torch.nn.Module, types.FunctionType, types.ModuleType))
    )


def _plain_sequence(value: object) -> bool:
    return isinstance(value, (list, tuple)) and not _is_namedtuple(value)


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and value != value
