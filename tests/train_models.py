"""Tiny models, one per thing a train-mode check must find (issue 41): forward and backward on
the captured program against eager. Each marked line is where the finding must point
(``line_of``); the docstrings say what plain torch shows for each backend.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from markers import line_of as _line_of
from torch import nn

line_of = functools.partial(_line_of, __file__)


class RoundSTE(torch.autograd.Function):
    """Round forward, pass the gradient straight through backward (quantization-aware training)."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


class StraightThrough(nn.Module):
    """A custom backward: torch.fx and torch.export differentiate ``round`` (zero gradient)
    instead of running ``RoundSTE.backward``; torch.compile runs it. The outputs agree."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return RoundSTE.apply(self.fc(x))  # STE-APPLY


class FrozenEncoder(nn.Module):
    """A ``torch.no_grad()`` region: torch.fx records its ops without it, so the GraphModule
    computes gradients for ``encoder`` that eager never does; export and compile keep it."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():  # NO-GRAD
            h = self.encoder(x)
        return self.head(h)


class FreezesInForward(nn.Module):
    """``requires_grad_`` inside forward: torch.export's program does not change the flag, so
    it computes the frozen weight's gradient; torch.fx records the call; Dynamo refuses it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        self.stem.weight.requires_grad_(False)  # FREEZE
        return self.head(self.stem(x).relu())


class DropoutNet(nn.Module):
    """Dropout in train mode: the captured program draws the same mask from the same stream."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.drop(self.fc(x).relu()))


class BatchNormNet(nn.Module):
    """Batch norm in train mode: batch statistics in the output, running statistics updated
    (its kernel does so without moving their count of writes); every backend agrees."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return F.relu(self.bn(self.fc(x)))


class RunningMean(nn.Module):
    """A running mean updated only in training, by rebinding the buffer: strict export leaves
    the rebinding out of the program (the update is lost); in eval there is nothing to lose."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        h = self.fc(x)
        if self.training:
            self.mean = 0.9 * self.mean + 0.1 * h.mean(0).detach()  # REBIND
        return h - self.mean


class ScalesWeightInPlace(nn.Module):
    """An in-place write to a parameter inside forward: fine under ``no_grad`` (the test's
    call), but with grad eager itself raises (a leaf that requires grad written in place)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        self.fc.weight.mul_(1.0)  # IN-PLACE-LEAF
        return self.fc(x)


class TwoHeads(nn.Module):
    """Two outputs; only the second goes through a ``no_grad`` region, so a ``loss_fn`` of the
    first output alone does not see what torch.fx loses."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():  # SECOND-HEAD
            side = self.b(x)
        return self.a(x), side * x.sum()
