"""The export backend's private torch names, each with a fallback (the root
``pytest_fxtrace/_compat.py`` keeps what several parts use, and the export floor, which the
options check before the backend is imported):

* ``torch._dynamo.exc._load_gb_type_to_gb_id_map``: TorchDynamo's stable id of a graph
  break (``graph_break_id``), read from the docs link in the message where it is missing;
* ``torch._check_is_size``: whether the running torch deprecates it
  (``check_is_size_deprecated``), True where it is missing;
* ``torch.nn.modules.module._global_buffer_registration_hooks``: the buffer hook a failed
  non-strict export leaves registered on torch 2.12 (``export_hooks_removed``); nothing
  to do where the table is missing.

AOTInductor's (``artifact=("aoti",)``, issue 41), used the way torch's own docs use them:

* ``torch._inductor.aoti_compile_and_package`` / ``aoti_load_package``: the exported program
  compiled to a ``.pt2`` package and loaded back as a runner (``compile_package``,
  ``load_package``);
* ``torch._inductor.config.patch``: the check's compile settings (``CHECK_CONFIG``), scoped to
  the compile, the keys this torch lacks left out;
* ``torch._inductor.cpp_builder.get_cpp_compiler``: the C++ compiler the compile would use
  (``cpp_compiler``), None where torch finds none;
* the runner's ``get_constant_fqns`` / ``load_constants``: the weights it holds, by the model's
  names, replaced by a call's (``Package``);
* Inductor's ``run_node(self, n)`` frame: the graph node a failed compile was lowering
  (``failing_node``), whose recorded stack names the user's statement.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch

from pytest_fxtrace.locate import frames

_GRAPH_BREAK_PAGE = re.compile(r"/gb/gb(\d+)\.html", re.IGNORECASE)


def graph_break_id(exc: BaseException) -> str | None:
    """TorchDynamo's stable id of a graph break (``"GB0170"``) for an exception that
    carries a graph-break type (``gb_type``): looked up in dynamo's registry
    (``torch._dynamo.exc._load_gb_type_to_gb_id_map``); else read from the docs link
    in the message; None for other exceptions, or a torch without ids."""
    gb_type = getattr(exc, "gb_type", None)
    if isinstance(gb_type, str) and gb_type:
        try:
            from torch._dynamo.exc import _load_gb_type_to_gb_id_map

            found = _load_gb_type_to_gb_id_map().get(gb_type)
        except Exception:  # no registry in this torch, or unreadable
            found = None
        if isinstance(found, str) and found:
            return found
    link = _GRAPH_BREAK_PAGE.search(str(exc))
    return f"GB{link.group(1)}" if link else None


def check_is_size_deprecated() -> bool:
    """Whether the running torch deprecates ``torch._check_is_size`` (torch 2.14 wraps it
    in ``typing_extensions.deprecated``, which marks it with PEP 702's ``__deprecated__``,
    and recommends ``torch._check(n >= 0)``); True where it is gone, so advice never names
    a function the user's torch lacks or warns about."""
    import torch

    check_is_size = getattr(torch, "_check_is_size", None)
    return check_is_size is None or getattr(check_is_size, "__deprecated__", None) is not None


# torch 2.12's non-strict export registers a global buffer-registration hook
# (torch._functorch._aot_autograd.utils.register_buffer_assignment_hook) and removes it only
# when the export succeeds (torch 2.13 removes it in a finally). A failed export leaves it:
# the exported model's own buffer assignments then fail in eager ("expected FakeTensor"),
# and every later strict export of any module that assigns a buffer stops at GB0007
# ("Attempted to call function marked as skipped": the hook).
_EXPORT_BUFFER_HOOK = "register_buffer_assignment_hook.<locals>."


@contextlib.contextmanager
def export_hooks_removed() -> Iterator[None]:
    """Within the block, torch.export may register global module hooks; the buffer
    hook export registers and a failed export left (torch 2.12) is removed afterwards."""
    from torch.nn.modules import module as nn_module

    hooks = getattr(nn_module, "_global_buffer_registration_hooks", None)
    before = set(hooks) if isinstance(hooks, dict) else set()
    try:
        yield
    finally:
        if isinstance(hooks, dict):
            for key in [key for key in hooks if key not in before]:
                if getattr(hooks[key], "__qualname__", "").startswith(_EXPORT_BUFFER_HOOK):
                    del hooks[key]


# --- AOTInductor (artifact=("aoti",)) ---------------------------------------------------------

if TYPE_CHECKING:
    from torch.export.pt2_archive._package import AOTICompiledModel

# A check compiles a package to run each recorded call once, not to serve: the least C++ work
# that builds the same graph. Measured on Linear(4, 4), 2 cores (benchmarks/README.md): the
# wrapper's -O1 with line tables is most of the C++ time; this takes about a third off it.
CHECK_CONFIG: dict[str, object] = {
    "aot_inductor.compile_wrapper_opt_level": "O0",
    "aot_inductor.enable_line_tables": False,  # -g1, for profilers (absent in torch 2.12)
    "aot_inductor.enable_frame_pointer": False,
    # whatever the environment asks (TORCHINDUCTOR_MAX_AUTOTUNE): no benchmarking of kernels
    "max_autotune": False,
    "max_autotune_gemm": False,
    "compile_threads": 1,  # no compile worker pool left in the test's process
    # small 1-d weights (a bias, a norm's) stay constants a call's values can replace, not
    # literals in the C++ (Inductor inlines those of 8 values or fewer)
    "always_keep_tensor_constants": True,
}


def _has(config: object, key: str) -> bool:
    try:
        functools.reduce(getattr, key.split("."), config)
    except AttributeError:
        return False
    return True


@contextlib.contextmanager
def _check_config() -> Iterator[None]:
    from torch._inductor import config

    with config.patch({key: value for key, value in CHECK_CONFIG.items() if _has(config, key)}):
        yield


def cpp_compiler() -> str | None:
    """The C++ compiler the compile would use (``g++``, ``clang++``, ``$CXX``), as torch looks
    for it; None where torch finds none (AOTInductor cannot build a package there)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        found = get_cpp_compiler()
    except Exception:  # torch's InvalidCxxCompiler, or a torch without the lookup
        return None
    return shutil.which(found) if found else None


def compile_package(exported: torch.export.ExportedProgram, path: str) -> None:
    """``exported`` compiled by AOTInductor into the package ``path`` (a ``.pt2`` file)."""
    from torch._inductor import aoti_compile_and_package

    with _check_config():
        aoti_compile_and_package(exported, package_path=path)


class Package:
    """A loaded AOTInductor package: runs on a call's inputs as the exported program's module
    does, with the weights ``load`` put in (the package holds those it was compiled with)."""

    def __init__(self, runner: AOTICompiledModel) -> None:
        self.runner = runner
        self.names = frozenset(runner.get_constant_fqns())  # the model's names of what it holds

    def load(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace the held constants named in ``weights`` (copied in: later writes to the
        tensors do not reach the package)."""
        self.runner.load_constants(dict(weights), check_full_update=False)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.runner(*args, **kwargs)


def load_package(path: str) -> Package:
    """The package at ``path`` loaded back (``torch._inductor.aoti_load_package``)."""
    from torch._inductor import aoti_load_package

    return Package(aoti_load_package(path))


def failing_node(exc: BaseException) -> torch.fx.Node | None:
    """The graph node Inductor was lowering when ``exc`` (or an exception it wraps) was raised:
    the ``n`` of the innermost ``GraphLowering.run_node(n)`` frame; None elsewhere."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        for frame, _ in reversed(frames(error.__traceback__)):
            if frame.f_code.co_name == "run_node":
                node = frame.f_locals.get("n")
                if isinstance(node, torch.fx.Node):
                    return node
        error = error.__cause__ or error.__context__
    return None
