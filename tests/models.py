"""Tiny models, one per behaviour the core tests exercise.

Also copied into pytester directories as the user's ``models.py`` (see the
``user_project`` fixture), so line numbers reported for these models point here.
"""

from math import sqrt

import torch
import torch.nn as nn
import torch.nn.functional as F


class Branchy(nn.Module):
    """Data-dependent control flow: untraceable unless it is a leaf."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:  # BRANCH
            return self.lin(x)
        return -x


class Outer(nn.Module):
    """A traceable root whose submodule ``block`` is not."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.block = Branchy()

    def forward(self, x):
        return self.block(self.pre(x)) * 2


class Scaled(nn.Module):
    """Uses math through ``from math import sqrt`` (autowrapped by torch.fx), then fails."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x) / sqrt(x.shape[-1])
        if y.mean() > 0:  # fails after sqrt was patched
            return y
        return y * 2


def head_dim(x):
    """A helper torch.fx cannot trace through: int() of a traced size."""
    return int(x.shape[-1]) // 2


class Heads(nn.Module):
    """Needs ``autowrap_functions=[head_dim]``."""

    def forward(self, x):
        d = head_dim(x)
        return x.reshape(x.shape[0], 2, d).sum(-1)


class Flagged(nn.Module):
    """Non-tensor arguments steer Python control flow: needs concrete args."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, use_bias: bool = True, scale: float = 2.0):
        y = self.lin(x) if use_bias else F.linear(x, self.lin.weight)
        return y * scale


class TopK(nn.Module):
    """Takes k as a tensor and converts it: needs explicit ``concrete_args``."""

    def forward(self, x, k):
        return x.topk(int(k), dim=-1).values


class PerRow(nn.Module):
    """Expects ``n`` to be the batch size; traced once with a fixed ``n``."""

    def forward(self, x, n):
        return x.reshape(n, -1).sum(-1)


class ShapeGate(nn.Module):
    """Control flow on a parameter's shape: fine with ``param_shapes_constant``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        if self.weight.shape[0] > 2:
            return x @ self.weight
        return x


class Noisy(nn.Module):
    """Dropout and batch norm in train mode: the replay must draw the same mask."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.BatchNorm1d(8), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)


class Hooked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Counter(nn.Module):
    """Python state changed by forward; tracing must not leave it changed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        self.seen += 1
        return x * 2


class MakesConstant(nn.Module):
    """A tensor constant: torch.fx stores it on the traced root as _tensor_constant0."""

    def forward(self, x):
        return x + torch.tensor([1.0, 2.0, 3.0, 4.0])


class ListInput(nn.Module):
    """Takes a list of tensors (like detection models take images)."""

    def forward(self, images, scale: int = 1):
        return torch.stack([images[0], images[1]]) * scale


class DictOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        y = self.lin(x)
        return {"logits": y, "extra": (y.softmax(-1), [y.sum()])}


class InlineAct(nn.Module):
    """Creates a parameter-free module inside forward."""

    def forward(self, x):
        return nn.ReLU()(x) + 1
