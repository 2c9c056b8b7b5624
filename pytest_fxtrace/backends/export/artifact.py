"""The exported program's saved forms (``artifact=``, issue 41), each made once per captured
program in a temporary folder (removed at once), loaded back, and every recorded call the
program serves run on the loaded form and compared with eager, as the program in memory was:

* ``pt2``: saved with ``torch.export.save``, loaded back with ``torch.export.load`` (stages
  ``save``, ``load``);
* ``aoti``: compiled by AOTInductor into a package (``torch._inductor.aoti_compile_and_package``,
  reached through ``_compat.py``), loaded back with ``aoti_load_package`` (stages ``compile``,
  ``load``). Where torch finds no C++ compiler the form is skipped, not failed: the check judges
  the rest, and says so (``ArtifactSkipped``; ``artifact_notes`` for the report's notes).

Each failure at its stage, category ``artifact``, with torch's reason in one line and the user's
statement where torch's traceback (or the graph node a compile was lowering) names one: a stage
that refuses (the program has no working saved form: ``untraceable``), the loaded form raising
where the program in memory ran, or answering otherwise (``mismatch``).

A saved form holds the weights it was made with; each call runs with the values the model had
before that call (a test may train between calls), put in by name: ``load_state_dict`` for
``pt2``, the package's ``load_constants`` for ``aoti``. A weight the package holds but cannot
replace (none, with the check's compile settings) that a call changed is said so, not judged.

Knows no pytest and no checker.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.backends.export import _compat
from pytest_fxtrace.backends.export.captured import ExportCaptured, as_before, model_tensors
from pytest_fxtrace.backends.export.options import artifacts_of
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.locate import node_location, user_location
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.types import Category, Diagnosis, Location, Status

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions

# the file a saved form is written to, in a folder of its own that is removed after loading
FILE = "program.pt2"

NO_COMPILER = (
    "aoti: no C++ compiler found (g++/clang++): the AOTInductor package was not built nor run; "
    "install one or drop aoti from artifact="
)


class ArtifactSkipped(UserWarning):
    """A saved form ``artifact=`` asks for that this machine cannot make (``aoti`` where torch
    finds no C++ compiler); the check passes on its other stages."""


class Loaded(Protocol):
    """A saved form loaded back: runs a call's inputs as the exported program's module does."""

    def weights_from(self, model: torch.nn.Module) -> str | None:
        """Put ``model``'s weights in, by name; why this call cannot be judged, or None."""

    def __call__(self, *args: Any, **kwargs: Any) -> object: ...


@dataclasses.dataclass
class Saved:
    """One saved form of a captured program: loaded back, or why there is none (``failure``),
    or why it is not checked here (``skipped``)."""

    loaded: Loaded | None
    failure: tuple[Status, Diagnosis] | None = None
    skipped: str | None = None


@dataclasses.dataclass
class _LoadedProgram:
    module: torch.nn.Module  # torch.export.load(...).module()

    def weights_from(self, model: torch.nn.Module) -> str | None:
        self.module.load_state_dict(model.state_dict(), strict=False)
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        return self.module(*args, **kwargs)


@dataclasses.dataclass
class _LoadedPackage:
    package: _compat.Package
    fixed: dict[str, torch.Tensor]  # what the package holds but cannot replace, as compiled

    def weights_from(self, model: torch.nn.Module) -> str | None:
        tensors = dict(model_tensors(model))
        self.package.load({name: t.detach() for name, t in tensors.items() if name in self.package.names})
        for name, compiled in self.fixed.items():
            now = tensors.get(name)
            if now is not None and not (now.shape == compiled.shape and torch.equal(now.detach(), compiled)):
                return (
                    f"aoti: the AOTInductor package holds {name} as it was compiled and cannot take "
                    "another value; this call changed it, so it was not run on the package"
                )
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        return self.package(*args, **kwargs)


def save_and_load(exported: Any) -> Saved:
    """``exported`` saved with ``torch.export.save`` and loaded back; the temporary file is
    removed whatever happens."""
    with tempfile.TemporaryDirectory(prefix="fxtrace-pt2-") as folder:
        path = os.path.join(folder, FILE)
        try:
            with quiet_torch():
                torch.export.save(exported, path)
        except Exception as exc:
            return Saved(None, _failed(Status.UNTRACEABLE, "torch.export.save refuses the program", exc))
        try:
            with quiet_torch():
                loaded = torch.export.load(path)
                module = loaded.module()
        except Exception as exc:
            return Saved(None, _failed(Status.UNTRACEABLE, "torch.export.load refuses the program torch.export.save wrote", exc))
    return Saved(_LoadedProgram(module))


def compile_and_load(exported: Any) -> Saved:
    """``exported`` compiled by AOTInductor into a package in a temporary folder and loaded
    back; the folder is removed and torch's RNG put back whatever happens. Skipped where torch
    finds no C++ compiler.

    Example: ``compile_and_load(torch.export.export(model, (x,))).loaded(x)``."""
    if _compat.cpp_compiler() is None:
        return Saved(None, skipped=NO_COMPILER)
    rng = RngState.capture()
    try:
        with tempfile.TemporaryDirectory(prefix="fxtrace-aoti-") as folder:
            path = os.path.join(folder, FILE)
            try:
                with quiet_torch():
                    _compat.compile_package(exported, path)
            except Exception as exc:
                what = "AOTInductor cannot compile the program (torch._inductor.aoti_compile_and_package)"
                return Saved(None, _failed(Status.UNTRACEABLE, what, exc, _compile_location(exc)))
            try:
                with quiet_torch():
                    package = _compat.load_package(path)
            except Exception as exc:
                what = "torch._inductor.aoti_load_package refuses the package AOTInductor compiled"
                return Saved(None, _failed(Status.UNTRACEABLE, what, exc))
    finally:
        rng.restore()
    held = {**exported.state_dict, **exported.constants}  # by the model's names
    fixed = {
        name: t.detach().clone()
        for name, t in held.items()
        if isinstance(t, torch.Tensor) and name not in package.names
    }
    return Saved(_LoadedPackage(package, fixed))


@dataclasses.dataclass(frozen=True)
class _Form:
    make: Callable[[Any], Saved]
    what: str  # the loaded form, in "<what> raises where the exported program ran"


FORMS = {
    "pt2": _Form(save_and_load, "the program loaded back from torch.export.save"),
    "aoti": _Form(compile_and_load, "the AOTInductor package"),
}


def artifact_notes(options: TraceOptions) -> tuple[str, ...]:
    """What a passing check's report should say of the saved forms it asked for and did not
    judge: ``aoti`` where torch finds no C++ compiler.

    Example: ``artifact_notes(options) == (NO_COMPILER,)`` on a machine without g++."""
    if "aoti" in artifacts_of(options) and _compat.cpp_compiler() is None:
        return (NO_COMPILER,)
    return ()


def _skipped(reason: str) -> None:
    try:
        warnings.warn(ArtifactSkipped(reason), stacklevel=2)
    except Warning:  # warnings made errors (-W error): a skipped form still fails no check
        pass


# torch.export.save on an output (or input) class registered as a pytree node without a name
_UNNAMED_NODE = re.compile(r"No registered serialization name for <class '([\w.<>]+)'>")
# a C++ compiler's own message (gcc, clang: "file.cpp:12:3: error: ...")
_COMPILER_ERROR = re.compile(r"(?:^|: )(?:fatal )?error: .+")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = text.splitlines()
    first = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")
    compiler = next((found.group(0) for line in lines[1:] if (found := _COMPILER_ERROR.search(line))), None)
    return f"{first} ({compiler.lstrip(': ')[:300]})" if compiler else first


def _code_fix(exc: BaseException) -> str | None:
    found = _UNNAMED_NODE.search(str(exc))
    if found is None:
        return None
    path = found.group(1)
    name = path.rpartition(".")[2]
    return (
        f"give {name} a name the saved program can hold: torch.export.register_dataclass({name}, "
        f"serialized_type_name={path!r}) for a dataclass, or serialized_type_name= in its "
        "torch.utils._pytree.register_pytree_node call"
    )


def _compile_location(exc: BaseException) -> Location | None:
    """The user's statement behind the graph node the compile failed on, else in the traceback."""
    node = _compat.failing_node(exc)
    found = node_location(node) if node is not None else None
    return found or user_location(exc)


def _failed(
    status: Status, what: str, exc: BaseException, location: Location | None = None
) -> tuple[Status, Diagnosis]:
    reason = f"{what}: {_first_line(exc)}"
    where = location or user_location(exc)
    return status, Diagnosis(Category.ARTIFACT, reason, where, error=format_error(exc), code_fix=_code_fix(exc))


def artifact_failure(captured: ExportCaptured, context: CheckContext) -> tuple[Status, Diagnosis] | None:
    """The first saved form (``artifact=``) that fails ``context.call``, made once per captured
    program (kept on ``captured``, by form); None when every one answers as eager did, or is
    skipped (said once, when made)."""
    saved = captured.saved
    for form in artifacts_of(context.options):
        if form not in saved:
            saved[form] = FORMS[form].make(captured.program.exported)
            if saved[form].skipped is not None:
                _skipped(saved[form].skipped)
        found = saved[form]
        if found.failure is not None:
            return found.failure
        if found.loaded is None:
            continue
        failure = _run_loaded(FORMS[form].what, found.loaded, context)
        if failure is not None:
            return failure
    return None


def _run_loaded(what: str, loaded: Loaded, context: CheckContext) -> tuple[Status, Diagnosis] | None:
    call, options = context.call, context.options
    with as_before(call):
        try:
            # the weights the model had before this call, by name (the loaded ones are the export's)
            unjudged = loaded.weights_from(call.module)
            if unjudged is not None:
                _skipped(unjudged)
                return None
            call.rng.restore()
            with torch.no_grad(), quiet_torch():
                output = loaded(*call.args, **call.kwargs)
        except Exception as exc:
            return _failed(Status.MISMATCH, f"{what} raises where the exported program ran", exc)
    difference = context.compare(output, call.output, rtol=options.rtol, atol=options.atol)
    if difference is None:
        return None
    return Status.MISMATCH, Diagnosis(Category.ARTIFACT, f"{what} answers otherwise than eager: {difference.message}")
