"""The option the export backend adds (marker / ini / CLI): ``artifact``, the saved forms of
the exported program a check also runs and compares with eager (issue 41). Light: the plugin
reads it at startup.

``"pt2"``: ``torch.export.save`` to a temporary file, ``torch.export.load`` back, each
recorded call run on the loaded program's module. ``"aoti"`` (opt-in, tens of seconds a
program: a C++ build): AOTInductor's package (``torch._inductor.aoti_compile_and_package``,
then ``aoti_load_package``), each recorded call run on the loaded runner. Marker
``artifact=("pt2", "aoti")``; ini / CLI ``pt2,aoti`` (comma-separated).

Example: ``artifacts_of(options) == ("pt2", "aoti")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_fxtrace.backends.spec import BackendOption
from pytest_fxtrace.importing import OptionError

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions

# the saved forms a check knows, and how each is made
ARTIFACTS = {
    "pt2": "torch.export.save, then torch.export.load",
    "aoti": "AOTInductor: torch._inductor.aoti_compile_and_package, then aoti_load_package",
}


def resolve_artifacts(value: object, what: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise OptionError(
            f"{what}: expected artifact names such as ('pt2',) or ('pt2', 'aoti'), got {value!r}"
        )
    names = tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))
    unknown = [name for name in names if name not in ARTIFACTS]
    if unknown:
        known = " or ".join(f"{name!r} ({how})" for name, how in ARTIFACTS.items())
        raise OptionError(
            f"{what}: {', '.join(map(repr, unknown))} is not a saved form the check knows; use {known}"
        )
    return names


OPTIONS = (
    BackendOption(
        "artifact",
        (),
        resolve_artifacts,
        "export only: the saved forms of the exported program also run and compared with eager: "
        "pt2 (torch.export.save, then torch.export.load), aoti (AOTInductor's compiled package; "
        "needs a C++ compiler, tens of seconds a model)",
        metavar="pt2,aoti",
    ),
)


def artifacts_of(options: TraceOptions) -> tuple[str, ...]:
    value = options.value("artifact")
    assert isinstance(value, tuple)
    return value
