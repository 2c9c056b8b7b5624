"""The options the compile backend adds (marker / ini / CLI, PRODUCT.md): the distinct
graph-break sites and the recompiles (over the recorded calls) a check accepts, and the
Dynamo backend the model is compiled with. Light: the plugin reads them at startup.

Example: ``CompileOptions.of(options).max_graph_breaks``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pytest_fxtrace.backends.spec import BackendOption
from pytest_fxtrace.importing import OptionError

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions

# the Dynamo backends a compile check may compile with (torch.compile's backend=)
COMPILE_BACKENDS = ("eager", "aot_eager", "inductor")


def resolve_compile_backend(value: object, what: str) -> str:
    name = value.strip() if isinstance(value, str) else value
    if name not in COMPILE_BACKENDS:
        raise OptionError(
            f"{what}: {value!r} is not a torch.compile backend the check knows; use one of "
            f"{', '.join(map(repr, COMPILE_BACKENDS))} ('eager': Dynamo's capture only, the fastest)"
        )
    return str(name)


def resolve_count(value: object, what: str) -> int:
    """A count of at least 0: an int, or its digits as an ini file or command line gives them."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionError(f"{what}: expected a whole number of at least 0, got {value!r}")
    return value


OPTIONS = (
    BackendOption(
        "max_graph_breaks",
        0,
        resolve_count,
        "compile only: the graph-break sites a model may have (default 0: compiled whole)",
        metavar="N",
    ),
    BackendOption(
        "max_recompiles",
        0,
        resolve_count,
        "compile only: the recompiles the recorded calls may cause (default 0; automatic dynamic "
        "shapes' one recompile when a size first varies is not counted)",
        metavar="N",
    ),
    BackendOption(
        "compile_backend",
        "eager",
        resolve_compile_backend,
        "compile only: the torch.compile backend: eager (default: Dynamo's capture only; in train mode aot_eager, "
        "the compiled backward), aot_eager, inductor",
        metavar="NAME",
    ),
)


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The compile options of one ``TraceOptions``, typed."""

    max_graph_breaks: int
    max_recompiles: int
    compile_backend: str

    @classmethod
    def of(cls, options: TraceOptions) -> CompileOptions:
        breaks, recompiles, backend = (options.value(o.name) for o in OPTIONS)
        assert isinstance(breaks, int) and isinstance(recompiles, int) and isinstance(backend, str)
        if options.train and "compile_backend" not in dict(options.extra):
            backend = "aot_eager"  # train mode: AOTAutograd's compiled backward, not eager autograd's
        return cls(breaks, recompiles, backend)


__all__ = ["COMPILE_BACKENDS", "OPTIONS", "CompileOptions", "resolve_compile_backend", "resolve_count"]
