"""A helper in a module of its own, imported by name into ``patch_models`` (as timm's models
import ``resample_abs_pos_embed`` from ``timm.layers``): torch.fx.wrap must be asked in the
module that calls it."""

import math

import torch  # noqa: F401  # a patch of this module may call torch.fx.wrap


def grid_side(tokens):
    """The side of a square grid of ``tokens`` (B, T, C): a Python int of a traced size."""
    return int(math.sqrt(tokens.shape[1]))  # SIDE
