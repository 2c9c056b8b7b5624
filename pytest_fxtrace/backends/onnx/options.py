"""The option the ONNX backend adds (marker / ini / CLI): ``onnx_translations``, ONNX
translations of operators torch.onnx has none for, handed to ``torch.onnx.export`` as its
``custom_translation_table``. Light: the plugin reads it at startup (no torch, no onnx).

Marker: ``onnx_translations={"aten.cummax.default": "my_pkg.onnx_fns:cummax"}`` (a function
in place of the path is taken too); ini / CLI: ``aten.cummax.default=my_pkg.onnx_fns:cummax``,
comma-separated. Resolved to ``((operator, path or function), ...)``, in the order given.

Example: ``translations_of(options)`` -> ``(("aten.cummax.default", "my_pkg.onnx_fns:cummax"),)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.backends.spec import BackendOption
from pytest_fxtrace.importing import OptionError, check_import_path

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions

Translations = tuple[tuple[str, "str | Callable[..., Any]"], ...]

_OPERATOR = re.compile(r"^\w+\.\w+\.\w+$")  # namespace.name.overload: aten.cummax.default


def resolve_translations(value: object, what: str) -> Translations:
    """``value`` as written (a mapping, or ``op=path`` pairs comma-separated) -> the pairs."""
    if isinstance(value, str):
        pairs: list[tuple[str, object]] = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            operator, sep, path = item.partition("=")
            if not sep:
                raise OptionError(f"{what}: {item!r} is not operator=module:function (e.g. aten.cummax.default=my_pkg.onnx_fns:cummax)")
            pairs.append((operator.strip(), path.strip()))
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise OptionError(
            f"{what}: expected a mapping of operator to function, e.g. "
            '{"aten.cummax.default": "my_pkg.onnx_fns:cummax"}; got ' + repr(value)
        )
    resolved: list[tuple[str, str | Callable[..., Any]]] = []
    for operator, function in pairs:
        if not isinstance(operator, str) or not _OPERATOR.match(operator.strip()):
            raise OptionError(f"{what}: {operator!r} is not an operator as torch names it: namespace.name.overload (aten.cummax.default)")
        if isinstance(function, str):
            check_import_path(function, what)
        elif not callable(function):
            raise OptionError(f"{what}: the translation of {operator} is {function!r}; name a function (module:function)")
        resolved.append((operator.strip(), function))
    return tuple(resolved)


OPTIONS = (
    BackendOption(
        "onnx_translations",
        (),
        resolve_translations,
        "onnx only: ONNX translations of operators torch.onnx has none for, as torch.onnx.export's "
        "custom_translation_table: operator=module:function, comma-separated (aten.cummax.default=my_pkg.onnx_fns:cummax)",
        metavar="OP=MOD:FN,...",
    ),
)


def translations_of(options: TraceOptions) -> Translations:
    value = options.value("onnx_translations")
    assert isinstance(value, tuple)
    return value
