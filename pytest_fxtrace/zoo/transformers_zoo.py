"""``--fx-zoo=transformers``: one model per architecture the installed transformers
defines (each ``model_type`` with a base model class in its auto mappings), named by that
class (``BertModel``), built ``from_config`` with the type's default config shrunk to a
tiny size (``zoo/shrink.py``), random weights, eval mode, never a download; inputs from
the model itself (``zoo/hf_inputs.py``). A model the tiny config breaks (a size its code
ties to another) is built at the first gentler level of the shrink ladder that builds,
runs and stays under ``MAX_PARAMETERS`` (``zoo/ladder.py``), and its record says so.

transformers 4.x: the fx backend traces with HF's own ``HFTracer`` (``options(name)``);
5.x removed it, which ``notes`` says once per session. A model whose output holds a cache
object (``use_cache=True``) that a check cannot take gets the verified fix of building it
with ``use_cache=False`` (``fixes``). Knows no pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.zoo import hf_inputs, ladder
from pytest_fxtrace.zoo.errors import ZooError
from pytest_fxtrace.zoo.seeding import name_seed, seeded
from pytest_fxtrace.zoo.shrink import (
    LEVELS,
    Change,
    Level,
    config_fields,
    is_config,
    nested_configs,
    shrink_config,
)
from pytest_fxtrace.zoo.timm_tower import shrink_timm_towers

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

HFTRACER = "transformers.utils.fx:HFTracer"
MAX_PARAMETERS = 10_000_000
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class BuildError(ZooError):
    """The registry could not make the model, in its words (which field, which input)."""


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """The Hub offline for the block (the environment and huggingface_hub's own flag, which
    it reads once at import), both put back after."""
    saved = {key: os.environ.get(key) for key in _OFFLINE}
    os.environ.update(_OFFLINE)
    constants = _hub_constants()
    flag = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if constants is not None:
            constants.HF_HUB_OFFLINE = flag


def _hub_constants() -> Any:
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    import huggingface_hub.constants

    return huggingface_hub.constants


@dataclasses.dataclass(frozen=True)
class ZooFix:
    """A change to how a model is built, for the zoo to try: ``text`` says it."""

    text: str
    build: Callable[[], torch.nn.Module]


class TransformersZoo:
    """Every architecture of the installed transformers, tiny and random."""

    def __init__(self) -> None:
        with offline():
            import transformers
            from transformers.models.auto import configuration_auto, modeling_auto

        self.transformers = transformers
        self.version = transformers.__version__
        self._configs = configuration_auto.CONFIG_MAPPING
        self._types = _architectures(modeling_auto.MODEL_MAPPING_NAMES, configuration_auto.CONFIG_MAPPING_NAMES)
        self._returns_cache: dict[str, str] = {}  # model -> the cache class its output held
        self._levels: dict[str, Level] = {}  # model -> the shrink level its last build used
        self._ladder_failures: dict[str, tuple[tuple[Level, str], ...]] = {}  # ... and why tighter ones failed
        # model -> (its last build, the inputs it ran on, or why no level ran)
        self._made: dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor] | str]] = {}
        self._unrunnable: dict[str, torch.nn.Module] = {}  # model -> its first level's build, which did not run

    def names(self) -> list[str]:
        return sorted(self._types)

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Other names a filter may select a model by: its ``model_type``."""
        return {name: (model_type,) for name, model_type in self._types.items()}

    def model_type(self, name: str) -> str:
        return self._types[name]

    def build(self, name: str, **overrides: object) -> torch.nn.Module:
        """``name`` at the first level of the shrink ladder (``shrink.LEVELS``) whose model
        builds, runs on its inputs and stays under ``MAX_PARAMETERS``; ``build_note(name)`` says
        which. With ``overrides`` (a fix to try), at the level the zoo chose, each set on the
        config after the shrink (and on each nested config that has the field). When no
        level runs, the tiniest model that built, for ``example_inputs`` to say why."""
        if overrides:
            level = self._levels.get(name, LEVELS[0])
            with seeded(_seed(name, level)):
                return self._build_at(name, level, overrides)
        seen: dict[str, str] = {}  # a level's shrunk config -> the first level that made it
        try:
            climbed = ladder.climb(LEVELS, lambda level: self._attempt(name, level, seen), lambda level: level.name)
        except ZooError as exc:
            unrunnable = self._unrunnable.pop(name, None)
            if unrunnable is None:
                raise
            self._levels[name], self._ladder_failures[name] = LEVELS[0], ()
            self._made[name] = (unrunnable, str(exc))
            return unrunnable
        self._unrunnable.pop(name, None)
        self._levels[name], self._ladder_failures[name] = climbed.level, climbed.failures
        return climbed.made

    def shrink_level(self, name: str) -> str:
        """The name of the shrink level the last build of ``name`` used."""
        return self._levels.get(name, LEVELS[0]).name

    def build_note(self, name: str) -> str | None:
        """How the last build of ``name`` was shrunk, when not by the first level: the
        level, and why the tighter ones failed (for the record)."""
        failures = self._ladder_failures.get(name)
        if not failures:
            return None
        why = "; ".join(f"{level.name}: {ladder.short(text)}" for level, text in failures)
        return f"built at shrink level {self._levels[name].name!r}, the tighter ones failing ({why})"

    def _attempt(self, name: str, level: Level, seen: dict[str, str]) -> PreTrainedModel:
        """The model at ``level`` after one eager run on its inputs (kept for
        ``example_inputs``); the first level's model that built but did not run is kept too.
        A level whose config an earlier level made already is not built again."""
        shrunk = repr(self._config(name, level, {})[0].to_dict())
        if shrunk in seen:
            raise ladder.Skip(f"the same config as at {seen[shrunk]!r}")
        seen[shrunk] = level.name
        if level != LEVELS[0]:
            self._check_size(self._meta_count(name, level), level)
        with seeded(_seed(name, level)):
            model = self._build_at(name, level, {})
        model.eval()
        try:
            with seeded(name_seed(name, "inputs")):
                self._made[name] = (model, self._run_first_layout(name, model))
        except ZooError:
            if level == LEVELS[0]:
                self._unrunnable[name] = model
            raise
        return model

    def _build_at(self, name: str, level: Level, overrides: Mapping[str, object]) -> PreTrainedModel:
        with offline():
            config, changes = self._config(name, level, overrides)
            model_class = getattr(self.transformers, name)
            own = _own_config(model_class, config)
            try:
                model = model_class(own)
            except Exception as exc:
                raise BuildError(f"{name}(config) raised {_error(exc)}{_blamed(changes, exc)}") from exc
        self._check_size(sum(p.numel() for p in model.parameters()), level)
        return model

    def _config(self, name: str, level: Level, overrides: Mapping[str, object]) -> tuple[PretrainedConfig, list[Change]]:
        """The type's default config shrunk to ``level`` and ``overrides`` set; what changed."""
        try:
            config = self._configs[self._types[name]]()
        except Exception as exc:
            raise ladder.Final(f"its default config ({_config_name(self, name)}()) raised {_error(exc)}") from exc
        changes = _no_downloads(config, self._configs)
        changes += shrink_config(config, level)
        changes += shrink_timm_towers(config, level)  # a timm tower's sizes are timm's, not the config's
        for key, value in overrides.items():  # a composite's text model holds its own use_cache
            for node in nested_configs(config):
                if node is config or hasattr(node, key):
                    setattr(node, key, value)
        return config, changes

    def _meta_count(self, name: str, level: Level) -> int:
        """The parameters ``name`` would have at ``level``, counted on the meta device (no
        memory, no initialisation); 0 where the model cannot be built there."""
        import torch

        try:
            with offline(), torch.device("meta"):
                model_class = getattr(self.transformers, name)
                model = model_class(_own_config(model_class, self._config(name, level, {})[0]))
        except Exception:
            return 0
        return sum(p.numel() for p in model.parameters())

    @staticmethod
    def _check_size(count: int, level: Level) -> None:
        """Over ``MAX_PARAMETERS``: Final past the first level (a gentler shrink is larger
        still); at the first, the next level may be smaller (one divisor for every nested
        config divides one the tiny level left whole, as Janus' VQ model)."""
        if count <= MAX_PARAMETERS:
            return
        why = "a size field the shrink does not know" if level == LEVELS[0] else "the widths this level keeps"
        error = BuildError if level == LEVELS[0] else ladder.Final
        raise error(
            f"{count / 1e6:.1f} M parameters after shrinking its config, over the zoo's "
            f"{MAX_PARAMETERS / 1e6:.0f} M: {why}"
        )

    def example_inputs(self, name: str, model: Any) -> tuple[tuple[object, ...], dict[str, torch.Tensor]]:
        """The first layout of inputs the model runs on eagerly (``hf_inputs.candidates``):
        the one its build ran on, when ``model`` is that build's."""
        made = self._made.pop(name, None)
        if made is None or made[0] is not model:
            return (), self._run_first_layout(name, model)
        if isinstance(made[1], str):  # no level of the ladder ran: why
            raise BuildError(made[1])
        return (), made[1]

    def _run_first_layout(self, name: str, model: PreTrainedModel) -> dict[str, torch.Tensor]:
        import torch

        try:
            layouts = hf_inputs.candidates(model)
        except hf_inputs.MissingInput as exc:
            raise ladder.Final(str(exc)) from None
        except Exception as exc:  # a config field the input rules read, in a form they do not expect
            raise BuildError(f"making its inputs raised {_error(exc)}") from exc
        failures = []
        for inputs in layouts:
            try:
                with torch.no_grad(), offline():
                    output = model(**inputs)
            except Exception as exc:
                failures.append(f"forward({hf_inputs.describe(inputs)}) raised {_error(exc)}")
                continue
            cache = _cache_class(output)
            if cache:
                self._returns_cache[name] = cache
            return inputs
        raise BuildError("; ".join(failures[:2]))

    def options(self, name: str) -> dict[str, object]:
        """transformers 4.x: the fx backend traces with ``HFTracer``, as its own tests do."""
        return {"tracer": HFTRACER} if has_hftracer() else {}

    def notes(self, backends: Sequence[str]) -> list[str]:
        """What a session checking these backends should be told once, not per model."""
        if "fx" in backends and not has_hftracer():
            return [
                f"pytest-fxtrace: transformers {self.version} has no HFTracer (transformers.utils.fx, "
                "removed in 5.0): the fx checks of --fx-zoo=transformers trace with pytest-fxtrace's "
                "own tracer, which these models are not written for; --fx-backend=export or compile "
                "checks what transformers supports"
            ]
        return []

    def fixes(self, name: str) -> list[ZooFix]:
        """Builds worth trying when a check of ``name`` fails: ``use_cache=False`` where the
        output held a cache object."""
        cache = self._returns_cache.get(name)
        if cache is None:
            return []
        return [
            ZooFix(
                f"use_cache=False in its config, so that its output holds no {cache}",
                lambda: self.build(name, use_cache=False),
            )
        ]


def _own_config(model_class: type, config: object) -> object:
    """The config ``model_class`` takes: ``config``, or the config nested in it of the class
    the model names (``MusicgenModel``, the decoder of ``MusicgenConfig``: a
    ``MusicgenDecoderConfig``)."""
    wanted = getattr(model_class, "config_class", None)
    if not isinstance(wanted, type) or isinstance(config, wanted):
        return config
    return next((node for node in nested_configs(config) if isinstance(node, wanted)), config)


def _seed(name: str, level: Level) -> int:
    """The seed of ``name``'s build at ``level``: the registry's build seed at the first."""
    return name_seed(name, "build" if level == LEVELS[0] else f"build:{level.name}")


def has_hftracer() -> bool:
    return importlib.util.find_spec("transformers") is not None and _find("transformers.utils.fx")


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _architectures(models: Mapping[str, str | Sequence[str]], configs: object) -> dict[str, str]:
    """class name -> model_type: each type with a base model class; a class several types
    share (``code_llama`` and ``llama``: ``LlamaModel``) under the type its config is named for."""
    out: dict[str, str] = {}
    for model_type, classes in models.items():
        name = classes if isinstance(classes, str) else classes[0]
        if name not in out or _canonical(model_type, name):
            out[name] = model_type
    return out


def _canonical(model_type: str, name: str) -> bool:
    return name.lower().startswith(model_type.replace("-", "_").replace("_", "").lower())


def _config_name(zoo: TransformersZoo, name: str) -> str:
    return getattr(zoo._configs[zoo._types[name]], "__name__", "config")


def _error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _blamed(changes: Sequence[Change], exc: BaseException) -> str:
    """The shrunk fields an error names (its field name or new value in the text), else
    the first few, so a model-error says which field to look at."""
    text = str(exc)
    named = [c for c in changes if c.field.rpartition(".")[2] in text or f"({c.after})" in text]
    shown = named or list(changes[:4])
    more = "" if named or len(changes) <= 4 else f", +{len(changes) - 4} more"
    return f" (config shrunk: {', '.join(map(str, shown))}{more})" if shown else ""


def _no_downloads(config: object, configs: Mapping[str, Callable[..., object]]) -> list[Change]:
    """Backbones built with random weights and by transformers: ``use_pretrained_backbone``
    off everywhere, and a timm backbone (DETR's default ResNet-50: timm, and 23 M
    parameters) replaced by transformers' own ResNet with the same stages, as
    transformers' tests build these models."""
    changes = []
    stack: list[tuple[str, object]] = [("", config)]
    while stack:
        prefix, node = stack.pop()
        for key, value in config_fields(node).items():
            if key == "use_pretrained_backbone" and value:
                setattr(node, key, False)
                changes.append(Change(prefix + key, True, False))
            elif key == "use_timm_backbone" and value:  # transformers 4: a flag and a timm name
                setattr(node, key, False)
                changes.append(Change(prefix + key, True, False))
                if isinstance(backbone := getattr(node, "backbone", None), str) and "resnet" in configs:
                    changes.append(Change(prefix + "backbone", backbone, None))
                    resnet = configs["resnet"](out_features=["stage1", "stage2", "stage3", "stage4"])
                    # the timm model's name and kwargs gone, transformers' ResNet in their place
                    for field, new in (("backbone", None), ("backbone_kwargs", None), ("backbone_config", resnet)):
                        setattr(node, field, new)
            elif is_config(value) and getattr(value, "model_type", None) == "timm_backbone" and "resnet" in configs:
                indices = list(getattr(value, "out_indices", None) or [1, 2, 3, 4])
                resnet = configs["resnet"](out_indices=indices, num_channels=getattr(value, "num_channels", 3))
                setattr(node, key, resnet)
                changes.append(Change(prefix + key, "timm_backbone", "resnet"))
            elif is_config(value):
                stack.append((f"{prefix}{key}.", value))
    return changes


def _cache_class(output: object) -> str | None:
    """The name of the first transformers cache object in ``output``, or None."""
    values = output.values() if hasattr(output, "values") else output if isinstance(output, (list, tuple)) else []
    for value in values:
        kind = type(value)
        if kind.__module__.startswith("transformers.") and kind.__name__.endswith("Cache"):
            return kind.__name__
    return None
