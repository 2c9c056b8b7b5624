"""A timm model inside a transformers config (a ``TimmWrapperConfig``: an ``architecture``
name and ``model_args`` for ``timm.create_model``) shrunk as the config around it is: its
sizes live in timm's entrypoint for the name, not in the config (``resnet50``: Bottleneck
blocks, ``layers=(3, 4, 6, 3)``; PE's ``vit_pe_core_large_patch14_336``: 24 blocks 1024
wide), so the default tower alone has 23-300 M parameters.

The arguments timm's entrypoint passes its model class are read on the meta device (no
memory, no initialisation), shrunk by ``shrink.shrink_config``'s rules as a config's fields
(depth, widths, heads), a per-stage block count (``layers``) cut to one block a stage, a
ViT's fixed ``img_size`` to whole patches of the zoo's small image (the inputs read it), and
the changed ones set in ``model_args``, where timm's entrypoint takes them over its own.
Knows no pytest; needs timm only where a config names a timm architecture.
"""

from __future__ import annotations

import importlib.util
from typing import Any
from unittest import mock

from pytest_fxtrace.zoo.shrink import (
    IMAGE,
    LEVELS,
    Change,
    Level,
    config_fields,
    nested_configs,
    shrink_config,
)


class _Arguments:
    """A timm model class's keyword arguments as a config the shrink takes."""

    model_type = "timm"

    def __init__(self, arguments: dict[str, Any]) -> None:
        vars(self).update(arguments)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def shrink_timm_towers(config: Any, level: Level = LEVELS[0]) -> list[Change]:
    """Each timm tower nested in ``config`` shrunk to ``level`` through its ``model_args``;
    the arguments changed. Nothing where no config names a timm architecture or timm is
    not installed (the model's own ImportError says so)."""
    changes: list[Change] = []
    for node in nested_configs(config):
        fields = config_fields(node)
        architecture = fields.get("architecture")
        if not isinstance(architecture, str) or "model_args" not in fields or not _has_timm():
            continue
        args = fields["model_args"]
        given: dict[str, object] = dict(args) if isinstance(args, dict) else {}
        try:
            arguments = _entrypoint_arguments(architecture, given)
        except Exception:  # an architecture timm does not know: the model's build says so
            continue
        shrunk = _shrunk_arguments(arguments, level)
        if shrunk:
            setattr(node, "model_args", {**given, **shrunk})  # noqa: B010  (node: any config, typed object)
            changes += [Change(f"model_args[{k!r}]", arguments[k], v) for k, v in shrunk.items()]
    return changes


def _has_timm() -> bool:
    return importlib.util.find_spec("timm") is not None


def _entrypoint_arguments(architecture: str, given: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments timm's entrypoint for ``architecture`` passes its model class,
    recorded on the meta device (the class found by a first build there)."""
    import timm
    import torch

    with torch.device("meta"):
        model_class = type(timm.create_model(architecture, pretrained=False, **given))
        recorded: dict[str, Any] = {}
        original = model_class.__init__

        def record(self: Any, *args: Any, **kwargs: Any) -> None:
            if not recorded:  # the outermost call: a subclass's super().__init__ is not its own
                recorded.update(kwargs)
            original(self, *args, **kwargs)

        with mock.patch.object(model_class, "__init__", record):
            timm.create_model(architecture, pretrained=False, **given)
    return recorded


def _shrunk_arguments(arguments: dict[str, Any], level: Level) -> dict[str, Any]:
    """The arguments the shrink changes (sizes only: ints and lists of ints), and a
    per-stage block count (ResNet's ``layers``) cut to one block a stage."""
    sizes = {
        k: v
        for k, v in arguments.items()
        if isinstance(v, int) and not isinstance(v, bool)
        or isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    }
    shrunk = {c.field: c.after for c in shrink_config(_Arguments(sizes), level)}
    layers = sizes.get("layers")
    if isinstance(layers, (list, tuple)) and any(n > 1 for n in layers):
        shrunk["layers"] = type(layers)(min(n, 1) for n in layers)
    image, patch = sizes.get("img_size"), sizes.get("patch_size")  # a ViT's fixed image: whole patches
    if level.sizes and isinstance(patch, int) and patch > 0 and image is not None:
        small = -(-IMAGE // patch) * patch
        if isinstance(image, int) and small < image:
            shrunk["img_size"] = small
        elif isinstance(image, (list, tuple)) and small < min(image):
            shrunk["img_size"] = type(image)(small for _ in image)
    return shrunk
