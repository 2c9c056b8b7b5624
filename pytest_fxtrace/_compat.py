"""Every private name of torch, pytest and NumPy that pytest-fxtrace touches, in one place.

pytest-fxtrace supports a range of torch releases (``TORCH_FLOOR`` up to the newest
tested; README, "Supported versions"). Private names move between releases, so the
rest of the package reaches them only through this module, and each has a fallback
for a release where it is missing or different. ``tests/test_compat.py`` exercises
every shim on the running torch, and holds that no other module of the package uses
a private name of torch, pytest or NumPy.

What is here, and the fallback:

* ``torch.fx._symbolic_trace._constant_attribute_types`` and
  ``torch.fx.proxy._create_arg_bypass`` (torch >= 2.5-ish): the handlers our tracer's
  ``create_arg`` calls directly for plain argument types (``plain_arg_handlers``);
  without them, every argument takes torch.fx's own ``create_arg`` (same graph, slower);
* ``torch.fx._symbolic_trace._create_wrapped_func``: torch.fx's autowrap wrapper
  (``wrapped_function``); a copy of it written on public names otherwise;
* ``torch.fx.graph._PyTreeCodeGen`` / ``graph._codegen``: whether a graph flattens its
  inputs (``has_pytree_codegen``) and the flat inputs it takes (``flat_inputs``);
* ``torch.fx._symbolic_trace._Patcher`` / ``_new_patcher``: ``fx_cleanup_codes``, the
  clean-up a time limit defers to; empty where missing (that clean-up is then unprotected);
* ``torch.fx._symbolic_trace._wrapped_fns_to_patch``: ``fx_wraps_kept``, which puts
  ``torch.fx.wrap``'s registry back after a patch's trial ran a ``torch.fx.wrap(...)`` line
  in a copy of a module's namespace (a dict keyed by the namespace's id on torch 2.x, a list
  on older); nothing to put back where it is missing;
* ``Graph.find_nodes`` (public, torch >= 2.4): ``placeholders``, a scan otherwise;
* ``torch.fx._lazy_graph_module._LazyGraphModule`` (torch >= 2.3):
  ``is_lazy_graph_module``, False where the class does not exist;
* ``torch._dynamo.is_compiling`` (``torch.compiler.is_compiling`` from torch 2.3 on):
  ``compiling_check``, so that a module compiled with ``Module.compile()`` is recorded
  once (torch 2.1's TorchDynamo otherwise recursed into our ``__call__`` wrapper);
* ``torch.utils._pytree``: ``tree_leaves``, ``tree_map``;
* ``torch.testing._comparison.default_tolerances``: ``default_tolerances``, with
  ``assert_close``'s documented table as the fallback;
* ``nn.Module``'s stores (``_parameters``, ``_buffers``, ``_modules``), its forward
  hooks (``_forward_pre_hooks``, ``_forward_hooks``), a tensor's write count
  (``_version``) and a node's ``_erased`` flag: stable since torch 1.x, named here
  so that a change is one edit;
* pytest's ``config._tmp_path_factory``: ``tmp_path_factory``, None where missing
  (``-p no:tmpdir``);

Also the torch floor and its start-up check (``torch_too_old``), and each backend's floor
(read before the backend is imported). What a backend alone reads of torch's privates
lives in its folder: ``backends/export/_compat.py``, ``backends/compile/_compat.py``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: this module imports torch where it uses it
    import torch
    import torch.fx

TORCH_FLOOR = (2, 1)


def torch_too_old(version: str | None) -> str | None:
    """The start-up error for a torch older than ``TORCH_FLOOR``; None when it is
    new enough, or when the version is unknown (not installed, a local build)."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    if found is None or (int(found.group(1)), int(found.group(2))) >= TORCH_FLOOR:
        return None
    floor = ".".join(map(str, TORCH_FLOOR))
    return (
        f"pytest-fxtrace needs torch >= {floor}; found {version}\n"
        f"  upgrade torch (pip install 'torch>={floor}'), or run without the plugin: pytest -p no:fxtrace"
    )


# --- torch.fx ----------------------------------------------------------------------------


def plain_arg_handlers() -> dict[type, Callable[[Any, Any], Any]]:
    """TracerBase's ``create_arg`` handlers for the exact types torch.fx.Tracer's own
    ``create_arg`` checks (Parameter, buffer or constant tensor, module, namedtuple,
    opaque object) can never match: Proxy, tuple, list, dict, numbers, str, None...
    Empty where torch has no such table (our tracer then defers to torch.fx's)."""
    import torch

    try:
        from torch.fx._symbolic_trace import _constant_attribute_types
        from torch.fx.proxy import _create_arg_bypass
    except ImportError:
        return {}
    return {
        kind: handler
        for kind, handler in _create_arg_bypass.items()
        if not issubclass(kind, (torch.Tensor, torch.nn.Module, *_constant_attribute_types))
    }


def wrapped_function(function: Callable[..., object]) -> Callable[..., object]:
    """torch.fx's autowrap wrapper for ``function``: called with a Proxy among its
    arguments, it records a ``call_function`` node instead of running."""
    try:
        from torch.fx._symbolic_trace import _create_wrapped_func
    except ImportError:
        return _own_wrapped_function(function)
    return _create_wrapped_func(function)


def _own_wrapped_function(function: Callable[..., object]) -> Callable[..., object]:
    """The fallback: the same wrapper on public names."""
    import functools

    import torch.fx

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> object:  # untyped: map_aggregate takes torch.fx's Argument
        proxies: list[torch.fx.Proxy] = []
        torch.fx.node.map_aggregate((args, kwargs), lambda a: proxies.append(a) if isinstance(a, torch.fx.Proxy) else None)
        if proxies:
            return proxies[0].tracer.create_proxy("call_function", function, args, kwargs)
        return function(*args, **kwargs)

    return wrapped


def has_pytree_codegen(graph: torch.fx.Graph) -> bool:
    """Whether ``graph`` takes its inputs flattened (pytree-structured concrete args)."""
    kind = _private_class("torch.fx.graph", "_PyTreeCodeGen")
    return kind is not None and isinstance(getattr(graph, "_codegen", None), kind)


def flat_inputs(gm: torch.fx.GraphModule, inputs: Iterable[object]) -> list[object]:
    """The inputs as ``gm``'s placeholders take them (flattened for a pytree graph),
    for ``torch.fx.Interpreter.run``."""
    codegen = getattr(gm.graph, "_codegen", None)
    process = getattr(codegen, "process_inputs", None)
    inputs = list(inputs)
    return list(process(*inputs)) if process is not None else inputs


def is_lazy_graph_module(module: object) -> bool:
    """Whether ``module`` is a lazily recompiled GraphModule (torch >= 2.3)."""
    kind = _private_class("torch.fx._lazy_graph_module", "_LazyGraphModule")
    return kind is not None and isinstance(module, kind)


@functools.cache
def _private_class(module: str, name: str) -> type | None:
    """``module.name`` if this torch has it, else None."""
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def fx_cleanup_codes() -> frozenset[types.CodeType]:
    """The code objects of torch.fx's own clean-up in ``Tracer.trace`` (its patcher:
    ``_new_patcher``, ``_Patcher.revert_all_patches`` and ``__exit__``), which a time
    limit must not interrupt; empty, or fewer, where a torch lacks them."""
    try:
        from torch.fx import _symbolic_trace as fx
    except ImportError:
        return frozenset()
    codes = []
    for function in (
        getattr(getattr(fx, "_new_patcher", None), "__wrapped__", None),
        getattr(getattr(fx, "_Patcher", None), "revert_all_patches", None),
        getattr(getattr(fx, "_Patcher", None), "__exit__", None),
    ):
        code = getattr(function, "__code__", None)
        if code is not None:
            codes.append(code)
    return frozenset(codes)


@contextlib.contextmanager
def fx_wraps_kept() -> Iterator[None]:
    """``torch.fx.wrap``'s registry of names to wrap while tracing as it was before the block:
    a ``torch.fx.wrap("f")`` run inside it (a patch's candidate, in a copy of a module's
    namespace) is forgotten after, so the copy is neither kept alive nor wrapped again."""
    try:
        from torch.fx import _symbolic_trace as fx
    except ImportError:
        yield
        return
    registry = getattr(fx, "_wrapped_fns_to_patch", None)
    before = registry.copy() if isinstance(registry, (dict, list)) else None
    try:
        yield
    finally:
        if isinstance(registry, dict) and isinstance(before, dict):
            registry.clear()
            registry.update(before)
        elif isinstance(registry, list) and isinstance(before, list):
            registry[:] = before


def module_stack_entries(stack: Mapping[str, object] | None) -> list[tuple[str, str, object]]:
    """``(key, path, module class)`` for each entry of a tracer's ``module_stack`` or a
    node's ``meta["nn_module_stack"]``, outermost first: torch >= 2.2 maps a key to
    ``(path, class)``, torch 2.1 maps the path to the class."""
    entries = []
    for key, value in (stack or {}).items():
        if isinstance(value, tuple) and len(value) == 2:
            entries.append((key, str(value[0]), value[1]))
        else:
            entries.append((key, str(key), value))
    return entries


def placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """``graph``'s placeholder nodes, in order (``Graph.find_nodes`` is torch >= 2.4)."""
    find = getattr(graph, "find_nodes", None)
    if find is not None:
        return list(find(op="placeholder"))
    return [node for node in graph.nodes if node.op == "placeholder"]


def last_node(graph: torch.fx.Graph) -> torch.fx.Node | None:
    """The last node of ``graph``, None when it is empty (public API: where
    ``graph._root.prev`` was read before)."""
    return next(iter(reversed(graph.nodes)), None)


def node_erased(node: object) -> bool:
    """Whether a ``torch.fx.Node`` was erased from its graph."""
    return bool(getattr(node, "_erased", False))


def autocast_state() -> list[tuple[str, torch.dtype]]:
    """(device type, dtype) of each autocast region in force, CPU then CUDA:
    ``torch.is_autocast_enabled(device)`` / ``torch.get_autocast_dtype(device)`` (torch >= 2.4),
    else the per-device functions of older releases."""
    import torch

    found = []
    if hasattr(torch, "get_autocast_dtype"):
        for device in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device):
                found.append((device, torch.get_autocast_dtype(device)))
        return found
    if torch.is_autocast_cpu_enabled():
        found.append(("cpu", torch.get_autocast_cpu_dtype()))
    if torch.is_autocast_enabled():
        found.append(("cuda", torch.get_autocast_gpu_dtype()))
    return found


def compiling_check() -> Callable[[], bool]:
    """A function telling whether TorchDynamo is compiling the calling frame:
    ``torch.compiler.is_compiling`` (torch >= 2.3), else ``torch._dynamo.is_compiling``.
    Returned, not wrapped: TorchDynamo folds a call of exactly that function to True
    (torch 2.1 does not see through a wrapper). On torch < 2.3 this imports TorchDynamo,
    once per process (1-2 s; torch 2.1 does not import it with torch)."""
    import torch.compiler

    public = getattr(torch.compiler, "is_compiling", None)
    if public is not None:
        return public
    import torch._dynamo

    return torch._dynamo.is_compiling


# --- torch.utils._pytree -----------------------------------------------------------------


def _pytree() -> dict[str, Callable[..., Any]]:
    from torch.utils import _pytree

    leaves = getattr(_pytree, "tree_leaves", None)
    if leaves is None:  # torch < 2.2

        def leaves(tree: Any) -> list[Any]:
            return _pytree.tree_flatten(tree)[0]

    return {"tree_leaves": leaves, "tree_map": _pytree.tree_map}


def __getattr__(name: str) -> Any:
    # ``tree_leaves`` and ``tree_map`` are found on first use, so that the plugin can
    # import this module (``torch_too_old``) at start-up without importing torch.
    if name in ("tree_leaves", "tree_map"):
        found = _pytree()
        globals().update(found)
        return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- torch.testing -----------------------------------------------------------------------

# assert_close's documented defaults (rtol, atol); other dtypes compare exactly
_DOCUMENTED_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``torch.testing.assert_close``'s default (rtol, atol) for ``dtype``."""
    return _tolerance_table()(dtype)


def documented_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """The fallback: the table of ``torch.testing.assert_close``'s documentation."""
    return _DOCUMENTED_TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))


@functools.cache
def _tolerance_table() -> Callable[[torch.dtype], tuple[float, float]]:
    try:
        from torch.testing._comparison import default_tolerances as torch_defaults
    except ImportError:
        return documented_tolerances

    def table(dtype: torch.dtype) -> tuple[float, float]:
        rtol, atol = torch_defaults(dtype)
        return rtol, atol

    return table


# --- nn.Module and tensor internals ------------------------------------------------------

# the keys of an nn.Module's __dict__ that hold its parameters, buffers and submodules
PARAMETERS, BUFFERS, MODULES = "_parameters", "_buffers", "_modules"


def children(module: torch.nn.Module) -> dict[str, torch.nn.Module | None]:
    """``module``'s submodules by name, the live dict (entries may be None)."""
    return module._modules


def module_stores(
    module: torch.nn.Module,
) -> tuple[dict[str, torch.nn.Parameter | None], dict[str, torch.Tensor | None], dict[str, torch.nn.Module | None]]:
    """``module``'s live parameter, buffer and submodule dicts."""
    return module._parameters, module._buffers, module._modules


def buffers_of(module: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    """``module``'s own buffers by name, the live dict (entries may be None)."""
    return module._buffers


def forward_hooks(module: torch.nn.Module) -> tuple[dict[int, Callable[..., object]], dict[int, Callable[..., object]]]:
    """``module``'s own forward pre-hooks and forward hooks (dicts of callables)."""
    return module._forward_pre_hooks, module._forward_hooks


def write_count(tensor: torch.Tensor) -> int:
    """How many in-place writes ``tensor`` has had (torch's version counter);
    RuntimeError for an inference tensor, which keeps none."""
    return tensor._version


# --- pytest ------------------------------------------------------------------------------


class TempPaths(Protocol):
    """What the plugin uses of pytest's ``TempPathFactory`` (this module imports no pytest:
    tests/test_architecture.py)."""

    def mktemp(self, basename: str, numbered: bool = True) -> Path: ...

    def getbasetemp(self) -> Path: ...


def tmp_path_factory(config: object) -> TempPaths | None:
    """pytest's session ``TempPathFactory`` (what the ``tmp_path_factory`` fixture
    returns), reachable without a fixture from a ``pytest.Config``; None with ``-p no:tmpdir``."""
    factory: TempPaths | None = getattr(config, "_tmp_path_factory", None)
    return factory


# --- torch.export: the export backend's torch floor (its own private names: backends/export/_compat.py)

# The oldest torch whose export the backend's tests pass on (tests/test_export_engine.py,
# test_export_plugin.py, test_compat.py; 2026-11-25): 2.12.0 passes all 86. Older releases
# fail real checks, not only messages: on 2.11.0 and 2.10.0 strict export of a marked test's
# model stops at dynamo's GB0007 ("Attempted to call function marked as skipped") instead of
# the model's own graph break; on 2.8.0 and 2.6.0 strict export's data-dependent branches are
# not told apart and a size branch the recorded calls vary exports without specializing.
# 2026-11-29: 2.12.1 passes the export and dims tests in the matrix (tox env tests-torch212),
# once the buffer hook its failed non-strict exports leave is removed
# (backends/export/_compat.export_hooks_removed); the GB0007 above may be that same leak.
EXPORT_FLOOR = (2, 12)


def export_floor_problem(version: str | None) -> str | None:
    """The export backend's error for a torch ``version`` older than ``EXPORT_FLOOR``
    (told from the version string alone: no import); None otherwise or when unknown."""
    if not _below(version, EXPORT_FLOOR):
        return None
    return _export_message(version or "")


def _below(version: str | None, floor: tuple[int, int]) -> bool:
    """Whether a torch version string's major.minor is under ``floor`` (unreadable: no)."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return found is not None and (int(found.group(1)), int(found.group(2))) < floor


def _export_message(version: str) -> str:
    floor = ".".join(map(str, EXPORT_FLOOR))
    return (
        f"backend='export' needs torch >= {floor} (torch.export with strict= and Dim.AUTO); found torch {version}\n"
        f"  upgrade torch (pip install 'torch>={floor}'), or check with backend='fx'"
    )


def export_problem(version: str | None = None) -> str | None:
    """Why this torch cannot run the export backend, in the user's words; None when it can.
    Decided on the version, then on what the export backend calls
    (``torch.export.export(..., strict=, dynamic_shapes=)``, ``torch.export.Dim.AUTO``,
    ``ExportedProgram.module()``), so a local build between releases is judged by what it has."""
    import inspect

    import torch

    version = version or torch.__version__
    too_old = export_floor_problem(version)
    if too_old is not None:
        return too_old
    try:
        import torch.export
    except ImportError:
        return _export_message(version)
    export = getattr(torch.export, "export", None)
    dim = getattr(torch.export, "Dim", None)
    program = getattr(torch.export, "ExportedProgram", None)
    if export is None or dim is None or program is None or not hasattr(dim, "AUTO") or not hasattr(program, "module"):
        return _export_message(version)
    try:
        parameters = inspect.signature(export).parameters
    except (TypeError, ValueError):
        return _export_message(version)
    if "strict" not in parameters or "dynamic_shapes" not in parameters:
        return _export_message(version)
    return None


# --- torch.compile: the compile backend's torch floor (its Dynamo machinery, which only it
# reads, is in backends/compile/_compat.py) ------------------------------------------------

# The oldest torch the compile backend's tests were run on and pass (tests/test_compile_engine.py,
# test_compile_plugin.py; 2026-11-26): 2.13.0, as 2.14.1. It has what the backend reads
# (torch.compile(isolate_recompiles=), log_graph_break(code_options, reason, exc), the
# compilation metrics' recompile_reason); no older torch could be run here (offline), so
# older ones are refused rather than trusted.
COMPILE_FLOOR = (2, 13)


def compile_floor_problem(version: str | None) -> str | None:
    """The compile backend's error for a torch ``version`` older than ``COMPILE_FLOOR``
    (from the version string alone: no import); None otherwise or when unknown."""
    if not _below(version, COMPILE_FLOOR):
        return None
    return _compile_message(version or "")


def _compile_message(version: str) -> str:
    floor = ".".join(map(str, COMPILE_FLOOR))
    return (
        f"backend='compile' needs torch >= {floor} (torch.compile with isolate_recompiles=, so a check "
        f"leaves your own compiled functions' caches alone); found torch {version}\n"
        f"  upgrade torch (pip install 'torch>={floor}'), or check with backend='fx' or 'export'"
    )


def compile_problem(version: str | None = None) -> str | None:
    """Why this torch cannot run the compile backend, in the user's words; None when it can.
    Decided on the version, then on what the backend calls (``torch.compile``'s
    ``isolate_recompiles``, the Dynamo names this section reads)."""
    import inspect

    import torch

    version = version or torch.__version__
    too_old = compile_floor_problem(version)
    if too_old is not None:
        return too_old
    try:
        parameters = inspect.signature(torch.compile).parameters
        from torch._dynamo import pgo
        from torch._dynamo.eval_frame import _get_cache_entries_for_region  # noqa: F401
        from torch._dynamo.symbolic_convert import InstructionTranslatorBase
        from torch._dynamo.utils import get_compilation_metrics  # noqa: F401
    except (ImportError, TypeError, ValueError):
        return _compile_message(version)
    if "isolate_recompiles" not in parameters or not hasattr(InstructionTranslatorBase, "log_graph_break"):
        return _compile_message(version)
    if not hasattr(pgo, "_CODE_STATE"):
        return _compile_message(version)
    return None
