"""Model registries for zoo mode: ``timm``, ``torchvision`` or a user's ``pkg.module:attr``
turned into cases (a model built with random weights, in eval mode, and inputs from the
registry's own metadata) and checked by the engine (``run_case``).

pytest-free: the pytest items are ``plugin/zoo.py``'s, the child processes ``zoo/child.py``'s; this
module knows neither.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import inspect
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pytest_fxtrace.backends.base import Seams
from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.importing import OptionError, did_you_mean, import_object
from pytest_fxtrace.types import Status
from pytest_fxtrace.zoo.errors import ZooError
from pytest_fxtrace.zoo.seeding import name_seed, seeded

if TYPE_CHECKING:
    import torch

    from pytest_fxtrace.options import TraceOptions
    from pytest_fxtrace.tracereport import TraceReport

BUILTIN = ("timm", "torchvision", "transformers")
TIMM_TARGET = 128  # timm's tests/test_models.py TARGET_FWD_FX_SIZE
TORCHVISION_TARGET = 64  # classification / segmentation images, unless min_size asks for more
DETECTION_SIZE = 128  # detection images, and the internal resize (min_size/max_size) of the models that take one
OPTICAL_FLOW_SIZE = 128  # RAFT needs a multiple of 8; 128 keeps four correlation levels
VIDEO_SIZE = 112  # torchvision's video tests' frames


REGISTRY_METHODS = ("names", "build", "example_inputs")
REGISTRY_NEEDS = (
    "a registry is an object (or a class) with names() -> list[str], build(name) -> nn.Module "
    "and example_inputs(name, model) -> tuple | (args, kwargs)"
)
_SHORT = reprlib.Repr()  # a repr bounded however big the object: a dict of 1,000 models
_SHORT.maxstring, _SHORT.maxother = 30, 50
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 2
SHORT_REPR = 60  # characters: the repr fits one line beside the rest of the message


class Registry(Protocol):
    """What ``--fx-zoo`` takes (``REGISTRY_NEEDS``): the built-in zoos and a user's
    ``pkg.module:attr``. Its optional methods (``options``, ``aliases``, ``notes``,
    ``build_note``, ``fixes``) are looked up with ``getattr``."""

    def names(self) -> Sequence[str]: ...

    def build(self, name: str) -> object: ...  # an nn.Module (``build_case`` checks)

    def example_inputs(self, name: str, model: torch.nn.Module) -> object: ...  # a tuple, or (args, kwargs)


# -- registries -----------------------------------------------------------------------


class TimmZoo:
    """timm's registry: ``timm.list_models()``; input size from the pretrained config as
    timm's own tests pick it (``_get_input_size`` at the FX target of 128 px); with
    ``notrace=True``, timm's notrace registry (``get_notrace_modules``,
    ``get_notrace_functions``) and ``param_shapes_constant`` as each model's options,
    as ``tests/test_models.py::_create_fx_model`` traces."""

    def __init__(self, notrace: bool = False) -> None:
        import timm

        self.timm = timm
        self.notrace = notrace

    def names(self) -> list[str]:
        return list(self.timm.list_models())

    def build(self, name: str) -> torch.nn.Module:
        return self.timm.create_model(name, pretrained=False)

    def input_size(self, model: torch.nn.Module) -> tuple[int, ...]:
        cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
        size = tuple(cfg.get("input_size") or (3, 224, 224))
        if cfg.get("fixed_input_size"):
            return size
        if max(size) <= TIMM_TARGET:
            return size
        if cfg.get("min_input_size"):
            return tuple(cfg["min_input_size"])
        return tuple(min(x, TIMM_TARGET) for x in size)

    def example_inputs(self, name: str, model: torch.nn.Module) -> tuple[torch.Tensor, ...]:
        import torch

        return (torch.randn(1, *self.input_size(model)),)

    def options(self, name: str) -> dict[str, object]:
        if not self.notrace:
            return {}
        from timm.models import get_notrace_functions, get_notrace_modules

        return {
            "leaf_modules": sorted(get_notrace_modules(), key=lambda c: f"{c.__module__}.{c.__qualname__}"),
            "autowrap_functions": sorted(
                get_notrace_functions(), key=lambda f: f"{f.__module__}.{f.__qualname__}"
            ),
            "param_shapes_constant": True,
        }


class TorchvisionZoo:
    """Every model of ``torchvision.models.list_models``, by family. Quantized models
    keep torchvision's own ``quantized_`` names; inputs follow torchvision's tests and
    weights metadata (``min_size``, ``min_temporal_size``)."""

    FAMILIES = ("", "segmentation", "detection", "video", "optical_flow", "quantization")

    def __init__(self) -> None:
        import torchvision.models

        self.models = torchvision.models
        self._family: dict[str, str] = {}
        for family in self.FAMILIES:
            module = getattr(self.models, family) if family else self.models
            for name in self.models.list_models(module=module):
                self._family.setdefault(name, family)

    def names(self) -> list[str]:
        return sorted(self._family)

    def family(self, name: str) -> str:
        return self._family.get(name, "")

    def _meta(self, name: str) -> Mapping[str, Any]:  # torchvision's Weights.meta: Dict[str, Any]
        try:
            weights = self.models.get_model_weights(name)
        except (ValueError, KeyError):
            return {}
        members = list(weights)
        return members[0].meta if members else {}

    def build(self, name: str) -> torch.nn.Module:
        family = self.family(name)
        kwargs: dict[str, object] = {"weights": None}
        if family in ("segmentation", "detection"):
            kwargs["weights_backbone"] = None  # a backbone's ImageNet weights would be downloaded
        if family == "segmentation":
            kwargs["aux_loss"] = False
        if family == "quantization":
            kwargs["quantize"] = True
        if family == "detection" and "320" not in name and not name.startswith("ssd"):
            kwargs.update(min_size=DETECTION_SIZE, max_size=DETECTION_SIZE)
        if name in ("googlenet", "inception_v3"):
            kwargs["init_weights"] = False  # scipy's truncnorm init: slow, and changes nothing traced
        return self.models.get_model(name, **kwargs)

    def example_inputs(self, name: str, model: torch.nn.Module) -> tuple[torch.Tensor | list[torch.Tensor], ...]:
        import torch

        family = self.family(name)
        meta = self._meta(name)
        min_h, min_w = meta.get("min_size", (1, 1))
        if family == "detection":
            return ([torch.rand(3, DETECTION_SIZE, DETECTION_SIZE)],)
        if family == "optical_flow":
            shape = (1, 3, OPTICAL_FLOW_SIZE, OPTICAL_FLOW_SIZE)
            return (torch.rand(shape), torch.rand(shape))
        if family == "video":
            frames = max(4, int(meta.get("min_temporal_size", 4)))
            return (torch.randn(1, 3, frames, max(VIDEO_SIZE, min_h), max(VIDEO_SIZE, min_w)),)
        image_size = getattr(model, "image_size", None)  # ViT: exactly the size it was built for
        if isinstance(image_size, int):
            return (torch.randn(1, 3, image_size, image_size),)
        return (torch.randn(1, 3, max(TORCHVISION_TARGET, min_h), max(TORCHVISION_TARGET, min_w)),)


def load_registry(source: str, notrace: bool = False) -> Registry:
    """The registry ``--fx-zoo=SOURCE`` names; OptionError when there is none.

    Example::

        load_registry("torchvision").names()[:2]  # ['alexnet', 'convnext_base']
    """
    what = f"--fx-zoo={source}"
    try:
        if source == "timm":
            return TimmZoo(notrace=notrace)
        if source == "torchvision":
            return TorchvisionZoo()
        if source == "transformers":
            from pytest_fxtrace.zoo.transformers_zoo import TransformersZoo

            return TransformersZoo()
    except ImportError as exc:
        raise OptionError(f"{what}: cannot import {source} ({exc}); install it, e.g. pip install {source}") from None
    if ":" not in source and "." not in source:
        hint = did_you_mean(source, BUILTIN, n=1)
        raise OptionError(
            f"{what}: not a registry{hint}; use timm, torchvision, transformers, or a user registry "
            f"'pkg.module:attr'\n{REGISTRY_NEEDS}"
        )
    registry = import_object(source, what)
    if inspect.isclass(registry):
        try:
            registry = registry()
        except Exception as exc:
            raise OptionError(f"{what}: {source}() raised {type(exc).__name__}: {exc}") from None
    missing = [m for m in REGISTRY_METHODS if not callable(getattr(registry, m, None))]
    if missing:
        raise OptionError(not_a_registry(what, registry, missing))
    return registry


def not_a_registry(what: str, obj: object, missing: Sequence[str]) -> str:
    """Why ``obj`` is not a registry, in a few short lines whatever its size: its type, a
    repr cut to fit a line, and what a registry needs."""
    kind = type(obj).__name__
    shown = " ".join(_SHORT.repr(obj).split())  # a __repr__ may span lines
    if len(shown) > SHORT_REPR:
        shown = shown[: SHORT_REPR - 3] + "..."
    methods = f" (no {', '.join(f'{m}()' for m in missing)})" if len(missing) < len(REGISTRY_METHODS) else ""
    lines = [f"{what} is a {kind}, not a registry{methods}: {shown}", REGISTRY_NEEDS]
    if isinstance(obj, Mapping):
        lines.append(f"for a {kind} of models, wrap it in a class: names() returns its keys, build(name) builds one")
    return "\n".join(lines)


def select(
    names: Sequence[str],
    filters: Sequence[str],
    excludes: Sequence[str],
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """``names`` matching any of ``filters`` (all when none) and none of ``excludes``,
    globs as ``timm.list_models(filter, exclude_filters)`` takes them; order kept. A
    model matches by its name or one of its ``aliases`` (transformers: its ``model_type``)."""

    def matches(name: str, pattern: str) -> bool:
        return any(fnmatch.fnmatchcase(n, pattern) for n in (name, *(aliases or {}).get(name, ())))

    return [
        n
        for n in names
        if (not filters or any(matches(n, f) for f in filters)) and not any(matches(n, e) for e in excludes)
    ]


def registry_aliases(registry: Registry) -> dict[str, tuple[str, ...]]:
    """The other names a registry's models are selected by (its optional ``aliases()``)."""
    aliases = getattr(registry, "aliases", None)
    return {name: tuple(other) for name, other in (aliases() or {}).items()} if callable(aliases) else {}


def registry_notes(registry: Registry, backends: Sequence[str]) -> list[str]:
    """What the registry says once per session about checking with ``backends`` (its
    optional ``notes(backends)``: transformers 5.x on fx)."""
    notes = getattr(registry, "notes", None)
    return [str(line) for line in notes(tuple(backends)) or []] if callable(notes) else []


def split_globs(values: Iterable[str]) -> tuple[str, ...]:
    """Filter or exclude globs as given, each value split on commas too, as timm users
    write them (``--fx-zoo-filter='resnet18,mobilenet_v3_small'``); blanks and repeats
    dropped, order kept.

    Example::

        split_globs(["resnet18, vit_*", "resnet18"])  # ('resnet18', 'vit_*')
    """
    return tuple(dict.fromkeys(g.strip() for value in values for g in value.split(",") if g.strip()))


def unmatched_filters(
    source: str, names: Sequence[str], filters: Sequence[str], aliases: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """One line per filter that matches none of ``names`` (the models of ``source``) nor
    their ``aliases``: such a filter is a typo more often than not, and alone it collects nothing."""
    lines = []
    for pattern in filters:
        if select(names, [pattern], [], aliases):
            continue
        close = difflib.get_close_matches(pattern, names, n=3)
        hint = f"; close: {', '.join(close)}" if close else ""
        lines.append(
            f"pytest-fxtrace: --fx-zoo-filter {pattern!r} matches none of the {len(names)} models "
            f"of --fx-zoo={source}{hint}"
        )
    return lines


def registry_options(registry: Registry, name: str) -> dict[str, object]:
    options = getattr(registry, "options", None)
    return dict(options(name) or {}) if callable(options) else {}


@dataclasses.dataclass
class Case:
    """A built model and its inputs."""

    model: torch.nn.Module
    args: tuple[object, ...]
    kwargs: dict[str, object]


def _split_inputs(inputs: object, name: str) -> tuple[tuple[object, ...], dict[str, object]]:
    if (
        isinstance(inputs, tuple)
        and len(inputs) == 2
        and isinstance(inputs[0], (tuple, list))
        and isinstance(inputs[1], Mapping)
    ):
        return tuple(inputs[0]), dict(inputs[1])
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return inputs, {}


def build_case(registry: Registry, name: str) -> Case:
    """Build ``name`` in eval mode and make its inputs, each step seeded from the name
    (``name_seed``); ZooError saying which step failed."""
    import torch

    try:
        with seeded(name_seed(name, "build")):
            model = registry.build(name)
    except Exception as exc:
        raise ZooError(f"{name} could not be built: {_why(exc)}".strip()) from exc
    if not isinstance(model, torch.nn.Module):
        raise ZooError(f"{name}: build({name!r}) returned {type(model).__name__}, not an nn.Module")
    model.eval()
    try:
        with seeded(name_seed(name, "inputs")):
            inputs = registry.example_inputs(name, model)
    except Exception as exc:
        raise ZooError(f"{name}: example_inputs failed: {_why(exc)}".strip()) from exc
    args, kwargs = _split_inputs(inputs, name)
    return Case(model, args, kwargs)


def _why(exc: BaseException) -> str:
    """An exception as a model-error quotes it: a registry's own ZooError in its words."""
    return str(exc) if isinstance(exc, ZooError) else f"{type(exc).__name__}: {exc}"


def build_error_report(source: str, name: str, exc: BaseException, options: TraceOptions) -> TraceReport:
    """The ``model-error`` record of a model that could not be built."""
    from pytest_fxtrace.tracereport import TraceReport

    return TraceReport(
        ok=False,
        status=Status.MODEL_ERROR,
        model=f"{source}:{name}",
        message=f"{exc}: not a traceability problem, the zoo could not make this model",
        options=options,
        backend=options.backend[0] if options.backend else DEFAULT_BACKEND,
    )


def run_case(
    registry: Registry,
    source: str,
    name: str,
    options: TraceOptions,
    seams: Seams | None = None,
) -> TraceReport:
    """Build, run eagerly and check one model; a ``TraceReport`` whatever happens to
    the model (build failures are ``model-error``). ``seams``: what the caller lends the
    check (hooks, dump folder, module trees for the HTML page). The options name one
    backend (the caller builds the model once per backend)."""
    import torch

    from pytest_fxtrace.entry import check_model_backends

    try:
        case = build_case(registry, name)
    except ZooError as exc:
        return build_error_report(source, name, exc, options)
    # captured and replayed under no_grad, the mode the zoo runs the model in, as a user
    # exporting it for inference would: with grad enabled a capture can take another path
    with torch.no_grad():
        with seeded(name_seed(name, "check")):  # a forward that draws random numbers draws the same ones
            (report,) = check_model_backends(case.model, case.args, case.kwargs, options, seams)
        if report.status in (Status.UNTRACEABLE, Status.MISMATCH):
            report = _verified_registry_fix(registry, name, case, options, report)
    note = registry_build_note(registry, name)
    return dataclasses.replace(report, message=f"{report.message}\n  {note}") if note else report


def registry_build_note(registry: Registry, name: str) -> str | None:
    """How the registry built ``name``, when the record should say (its optional
    ``build_note(name)``: transformers' shrink level, past the first)."""
    note = getattr(registry, "build_note", None)
    return str(note(name) or "") or None if callable(note) else None


def _verified_registry_fix(
    registry: Registry, name: str, case: Case, options: TraceOptions, report: TraceReport
) -> TraceReport:
    """``report`` with the first of the registry's own fixes (its optional ``fixes(name)``:
    other ways to build the model, e.g. transformers' ``use_cache=False``) under which the
    same check of the same inputs passes, as its verified fix; unchanged when none does."""
    from pytest_fxtrace.entry import check_model_backends
    from pytest_fxtrace.types import Suggestion

    fixes = getattr(registry, "fixes", None)
    for fix in fixes(name) if callable(fixes) else ():
        try:
            with seeded(name_seed(name, "build")):
                model = fix.build()
            model.eval()
            with seeded(name_seed(name, "check")):
                (trial,) = check_model_backends(model, case.args, case.kwargs, options)
        except Exception:  # a fix that cannot be built is not the one
            continue
        if trial.status is Status.PASSED:
            return dataclasses.replace(report, suggestion=Suggestion(fix.text, True))
    return report


# -- pytest ---------------------------------------------------------------------------
