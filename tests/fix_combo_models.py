"""A model with two different kinds of failing submodule, shaped like timm's
``nest_tiny_jx``: a stage whose helper converts a traced size with ``int()`` (fixed by
autowrapping the helper, as timm registers ``deblockify``), and a padding module
inside some stages whose control flow no autowrap can hide (fixed by making it a leaf,
as timm registers ``MaxPool2dSame``). Neither fix alone, nor every leaf at once of the
deepest failures, makes it trace; their combination does."""

import math

import torch.nn.functional as F
from torch import nn


def unblock(tokens):
    """(B, T, C) -> (B, C, side, side); int() of a traced size, like timm's deblockify."""
    side = int(math.sqrt(tokens.shape[1]))
    return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], side, side)


def pad_amount(size, multiple):
    return max((multiple - size % multiple) % multiple, 0)  # LINE: pad_amount


class PadSame(nn.Module):
    def forward(self, x):
        pad = pad_amount(x.shape[-1], 4)
        if pad > 0:  # branches on the helper's result: autowrapping the helper is not enough
            x = F.pad(x, (0, pad, 0, pad))
        return x


class Stage(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = PadSame() if pool else nn.Identity()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        x = self.pool(x)
        return unblock(self.proj(x.flatten(2).transpose(1, 2)))


class TwoKinds(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(Stage(pool=False), Stage(pool=True))

    def forward(self, x):
        return self.stages(x)
