"""What the core knows of a backend without loading it: its name, whether this torch can
run it, the options it adds, its snapshot title and its words. A ``BackendSpec`` is light
(no torch), so the plugin reads every backend's at startup; the ``Backend`` class it names
is imported when a model is checked.

Backends are found, not listed: each folder beside this module that says ``SPECS`` in its
``__init__.py`` (``fx/``, ``export/``, ``compile/``), then each entry point of the group
``pytest_fxtrace.backends`` (a third party's package: the entry point names a
``BackendSpec``, a sequence of them, or a ``Backend`` subclass). The core (options,
snapshots, reports, the plugin) asks here (``specs``, ``get_spec``, ``backend_problem``,
``backend_options``, ``backend_words``, ``snapshot_title``) and names no backend; this
module imports no backend's folder by name, and nothing of the ``Backend`` interface
(``base.py``), so that ``options.py`` can ask it.

Example::

    SPECS = (
        BackendSpec(
            "mine",
            "my_package.backend:MyBackend",
            help="mine (my compiler)",
            words=Words(able="compilable by mine", past="compiled", graph="the compiled model"),
        ),
    )
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

# an option's resolver: (the value as written, where it was written) -> the value, or OptionError
Resolver = Callable[[object, str], object]


@dataclasses.dataclass(frozen=True)
class Words:
    """How messages speak of a backend's capture: "<model> is not *traceable*", "<model>
    *traced*, but *the GraphModule*'s output differs"."""

    able: str = "traceable"
    past: str = "traced"
    graph: str = "the GraphModule"
    doing: str = "tracing"  # the capture under way ("<model>: tracing did not finish ...")
    running: str = "checking the traced module"  # the captured graph's run under way


@dataclasses.dataclass(frozen=True)
class BackendOption:
    """An option a backend adds: ``name`` in the marker and ``TraceOptions``, ini
    ``fxtrace_<name>``, CLI ``--fx-<name-with-dashes>``; ``resolve`` turns what the user
    wrote into the value (or raises ``OptionError`` naming ``where``)."""

    name: str
    default: object
    resolve: Resolver
    help: str
    metavar: str = "VALUE"

    @property
    def ini(self) -> str:
        return f"fxtrace_{self.name}"

    @property
    def flag(self) -> str:
        return f"--fx-{self.name.replace('_', '-')}"


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    """One ``backend=`` name and what the core asks of it before (or without) loading it.

    ``backend``: the ``Backend`` subclass, or its ``"module:Class"`` path (imported on first
    use). ``problem``: why this environment cannot run it, in the user's words (a torch too
    old, a missing extra), or None; asked when the option names it, so naming it is one usage
    error. ``title``: what its snapshot files hold (their first line). ``lists_attributes``:
    its snapshot code calls the captured GraphModule's submodules and attributes, which the
    snapshot lists after it (torch.fx's). ``order``: its place where backends are listed.
    """

    name: str
    backend: str | type
    help: str = ""  # "export (torch.export, non-strict)": how the ini / CLI help names it
    words: Words = Words()
    problem: Callable[[], str | None] | None = None
    options: tuple[BackendOption, ...] = ()
    title: str = ""  # "an exported program's graph code"; "": "the <name> backend's code"
    lists_attributes: bool = False
    order: int = 100


def torch_problem(full: Callable[[], str | None], floor: Callable[[str], str | None]) -> str | None:
    """What keeps this torch from running a backend: from its version alone (``floor``)
    while torch is not imported (the plugin checks options before any model is), in
    full (``full``) once it is.

    Example: ``torch_problem(_compat.export_problem, _compat.export_floor_problem)``.
    """
    if "torch" in sys.modules:
        return full()
    try:
        from importlib import metadata

        version = metadata.version("torch")
    except Exception:  # not installed as a distribution: decided once torch is imported
        return None
    return floor(version)


# --- the registry: every backend's spec, found once -------------------------------------------

GROUP = "pytest_fxtrace.backends"  # the entry-point group third-party backends register in
DEFAULT_BACKEND = "fx"  # the backend of a check that names none (PRODUCT.md: "fx" (default))

_SPECS: dict[str, BackendSpec] | None = None  # name -> spec, in listing order
_BROKEN: dict[str, str] = {}  # an entry point that could not be loaded: name -> why


def _builtin_specs() -> list[BackendSpec]:
    """The ``SPECS`` of every folder beside this module."""
    found: list[BackendSpec] = []
    package = __name__.rpartition(".")[0]
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.ispkg:
            found.extend(getattr(importlib.import_module(f"{package}.{info.name}"), "SPECS", ()))
    return found


def as_specs(value: object, where: str) -> list[BackendSpec]:
    """What an entry point (or ``register_backend``) names, as specs: a ``BackendSpec``, a
    sequence of them, or a ``Backend`` subclass (its ``name``, no options, FX's words)."""
    if isinstance(value, BackendSpec):
        return [value]
    name = getattr(value, "name", None)
    if isinstance(value, type) and isinstance(name, str) and hasattr(value, "capture"):
        return [BackendSpec(name, value)]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        items = list(value)
        if items and all(isinstance(item, BackendSpec) for item in items):
            return items
    raise TypeError(f"{where} is {value!r}; name a BackendSpec, a sequence of them, or a Backend subclass")


def _entry_point_specs() -> list[BackendSpec]:
    from importlib import metadata

    found: list[BackendSpec] = []
    for point in metadata.entry_points(group=GROUP):
        where = f"the entry point {point.name} = {point.value} ({GROUP})"
        try:
            found.extend(as_specs(point.load(), where))
        except Exception as exc:  # one broken package must not break every pytest run
            _BROKEN[point.name] = f"backend {point.name!r} cannot be loaded: {where}: {type(exc).__name__}: {exc}"
    return found


def specs() -> dict[str, BackendSpec]:
    """Every backend's spec by name: the built-in folders', then the entry points', in
    listing order (``BackendSpec.order``, then as found)."""
    global _SPECS
    if _SPECS is None:
        found: dict[str, BackendSpec] = {}
        for spec in _builtin_specs() + _entry_point_specs():
            found.setdefault(spec.name, spec)  # a third party cannot take a built-in's name
        _SPECS = dict(sorted(found.items(), key=lambda item: item[1].order))
    return _SPECS


def add_spec(spec: BackendSpec) -> None:
    """Make ``spec`` known (``register_backend``), after those found."""
    specs()[spec.name] = spec


def get_spec(name: str) -> BackendSpec:
    """The spec of the backend ``name``; a ``ValueError`` names the known ones."""
    found = specs().get(name)
    if found is not None:
        return found
    if name in _BROKEN:
        raise ValueError(_BROKEN[name])
    known = ", ".join(repr(n) for n in backend_names())
    raise ValueError(f"no capture backend named {name!r}; known backends: {known}")


def backend_names() -> list[str]:
    """The known backends' names, in listing order."""
    return list(specs())


def broken_backend(name: str) -> str | None:
    """Why the entry point ``name`` could not be loaded; None where it was (or is none)."""
    specs()
    return _BROKEN.get(name)


def backend_problem(name: str) -> str | None:
    """Why this environment cannot run the backend ``name``, in the user's words; None when
    it can (or when ``name`` is unknown: that is ``get_spec``'s error)."""
    found = specs().get(name)
    return found.problem() if found is not None and found.problem is not None else None


def backend_options() -> dict[str, BackendOption]:
    """The options every known backend adds, by name (the first backend to add a name owns it)."""
    found: dict[str, BackendOption] = {}
    for spec in specs().values():
        for option in spec.options:
            found.setdefault(option.name, option)
    return found


def backend_words(name: str) -> Words:
    """How messages speak of the backend ``name``'s capture ("compiled", "the compiled
    model"), for a report that holds only its name; the default backend's words where it is
    not known here (a merged report from a machine with another backend installed).

    Example: ``backend_words("export").past == "exported"``.
    """
    found = specs().get(name)
    return found.words if found is not None else Words()


def snapshot_title(name: str) -> str:
    """What the backend ``name``'s snapshot files hold, as their first line says it."""
    found = specs().get(name)
    return found.title if found is not None and found.title else f"the {name} backend's code"


def lists_attributes(name: str) -> bool:
    """Whether the backend ``name``'s snapshot code calls the captured GraphModule's
    submodules and attributes (listed after it in the snapshot)."""
    found = specs().get(name)
    return found is not None and found.lists_attributes


__all__ = [
    "DEFAULT_BACKEND",
    "GROUP",
    "BackendOption",
    "BackendSpec",
    "Resolver",
    "Words",
    "add_spec",
    "as_specs",
    "backend_names",
    "backend_options",
    "backend_problem",
    "backend_words",
    "broken_backend",
    "get_spec",
    "lists_attributes",
    "snapshot_title",
    "specs",
    "torch_problem",
]
