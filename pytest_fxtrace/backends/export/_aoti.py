"""AOTInductor's names, reached from here only (``artifact=("aoti",)``, issue 41); each is
private to torch (``torch._inductor``) and used the way torch's own docs use it:

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

Knows no pytest and no checker.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch

from pytest_fxtrace.locate import frames

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
