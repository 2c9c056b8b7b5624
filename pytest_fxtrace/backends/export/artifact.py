"""The exported program's saved forms (``artifact=``, issue 41): saved with
``torch.export.save`` to a temporary file, loaded back with ``torch.export.load``, and every
recorded call run on the loaded program's module and compared with eager, as the program in
memory was. Each failure at its stage, with torch's reason: ``save`` and ``load`` (the program
has no working saved form: ``untraceable``), ``run`` (the loaded program raises where the one
in memory ran) and a different answer (``mismatch``); category ``artifact``.

The loaded program holds the weights it was saved with; each call runs with the values the
model had before that call (a test may train between calls), loaded into it by name.

Knows no pytest and no checker.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Any

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.backends.export.captured import ExportCaptured, as_before
from pytest_fxtrace.backends.export.options import artifacts_of
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.locate import user_location
from pytest_fxtrace.types import Category, Diagnosis, Status

# the file a saved program is written to, in a folder of its own that is removed after loading
FILE = "program.pt2"


@dataclasses.dataclass
class Saved:
    """One saved form of a captured program: the loaded program's module, or why there is none."""

    module: torch.nn.Module | None
    failure: tuple[Status, Diagnosis] | None = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}".rstrip(": ")


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
    return Saved(module)


# torch.export.save on an output (or input) class registered as a pytree node without a name
_UNNAMED_NODE = re.compile(r"No registered serialization name for <class '([\w.<>]+)'>")


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


def _failed(status: Status, what: str, exc: BaseException) -> tuple[Status, Diagnosis]:
    reason = f"{what}: {_first_line(exc)}"
    return status, Diagnosis(Category.ARTIFACT, reason, user_location(exc), error=format_error(exc), code_fix=_code_fix(exc))


def artifact_failure(captured: ExportCaptured, context: CheckContext) -> tuple[Status, Diagnosis] | None:
    """The first saved form (``artifact=``) that fails ``context.call``, made once per captured
    program (kept on ``captured``, by form); None when every one answers as eager did."""
    saved = captured.saved
    for form in artifacts_of(context.options):
        if form not in saved:
            saved[form] = save_and_load(captured.program.exported)
        found = saved[form]
        if found.failure is not None:
            return found.failure
        assert found.module is not None
        failure = _run_loaded(found.module, context)
        if failure is not None:
            return failure
    return None


def _run_loaded(module: torch.nn.Module, context: CheckContext) -> tuple[Status, Diagnosis] | None:
    call, options = context.call, context.options
    with as_before(call):
        # the weights the model had before this call, by name (the loaded ones are the export's)
        module.load_state_dict(call.module.state_dict(), strict=False)
        call.rng.restore()
        try:
            with torch.no_grad(), quiet_torch():
                output = module(*call.args, **call.kwargs)
        except Exception as exc:
            return _failed(Status.MISMATCH, "the program loaded back from torch.export.save raises where the exported program ran", exc)
    difference = context.compare(output, call.output, rtol=options.rtol, atol=options.atol)
    if difference is None:
        return None
    return Status.MISMATCH, Diagnosis(
        Category.ARTIFACT,
        f"the program loaded back from torch.export.save answers otherwise than eager: {difference.message}",
    )
