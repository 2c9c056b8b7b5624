"""Tiny models, one per statement a verified patch rewrites (issue 42), and one whose plausible
rewrite changes eager's answer (so no patch is shown). Written into pytester folders too."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from patch_helpers import grid_side
from torch import nn

REGISTERED = []  # what ``register`` was given, as timm's notrace registry


def register(cls):
    """A decorator that registers a class and gives it back as it is (timm's
    ``register_notrace_module``): a patch leaves it out of the rebuild, so nothing registers twice."""
    REGISTERED.append(cls)
    return cls


def with_scale(cls):
    """A decorator that adds to the class what its body does not define: a class rebuilt
    without it would lose ``scale``, so no patch is shown."""
    cls.scale = 3.0
    return cls


class Gate(nn.Module):
    """A branch on a tensor's value assigning one name: torch.where(cond, a, b)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if h.sum() > 0:  # GATE-IF
            out = h.relu()
        else:
            out = -h
        return out * 2


class GateReturn(nn.Module):
    """A branch on a tensor's value returning in each arm."""

    def forward(self, x):
        if x.mean() > 0:  # RETURN-IF
            return x * 2
        else:
            return x - 1


class AssertPositive(nn.Module):
    """An assert on a tensor's value: torch._assert, which the capture keeps."""

    def forward(self, x):
        assert x.abs().sum() >= 0, "negative norm"  # ASSERT
        return x + 1


class Talks(nn.Module):
    """A print in forward: torch.compile breaks the graph there; guarded, eager still prints."""

    def forward(self, x):
        print("batch of", x.shape[0])  # PRINT
        return x * 3


class TalksTwice(nn.Module):
    """Two prints: torch.compile breaks the graph at each, so no one statement's patch can
    make the check pass, and none is tried."""

    def forward(self, x):
        print("batch of", x.shape[0])  # FIRST-PRINT
        x = x * 3
        print("width", x.shape[1])  # SECOND-PRINT
        return x


class NoisyGate(nn.Module):
    """The other arm draws random numbers: torch.where would compute it, drawing from the
    stream, so dropout's mask and the answer change. A rewrite that changes eager's answer is
    not shown; torch.cond runs one arm as eager does, and torch.compile captures it."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        if x.sum() > 0:  # NOISY-IF
            h = x
        else:
            h = x + torch.randn_like(x)
        return self.drop(h)


class FlattenTo(nn.Module):
    """A size made a Python int: torch.fx cannot convert a traced size; left a size, it traces."""

    def forward(self, x):
        n = int(x.shape[1]) * int(x.shape[2])  # INT-SHAPE
        return x.reshape(-1, n)


class NumpyExp(nn.Module):
    """A round trip through NumPy: torch.fx cannot hand a traced tensor to NumPy; torch.exp
    computes the same."""

    def forward(self, x):
        y = torch.from_numpy(np.exp(x.numpy()))  # NUMPY
        return y + 1


class ListScale(nn.Module):
    """A round trip through a Python list: ``.tolist()`` of a traced tensor is not a list."""

    def forward(self, x):
        scale = torch.tensor(x.abs().sum(1).tolist())  # TOLIST
        return x / scale.unsqueeze(1)


class HeightWidth(nn.Module):
    """Each size made a Python int in one statement: left sizes, the statement assigns each name
    itself, and goes."""

    def forward(self, x):
        h, w = x.shape[-2:]
        h, w = int(h), int(w)  # INT-PAIR
        return x.reshape(x.shape[0], h * w)


class NormalizeByMax(nn.Module):
    """A tensor's value made a Python float: torch.fx cannot convert a traced value; left a
    tensor, the division traces."""

    def forward(self, x):
        scale = float(x.abs().max()) + 1.0  # FLOAT
        return x / scale


class PadColumn(nn.Module):
    """A tensor made in forward from a traced size: torch.fx cannot feed a traced size to
    torch.zeros; made from the input (x.new_zeros), it traces."""

    def forward(self, x):
        pad = torch.zeros(x.shape[0], 1)  # ZEROS
        return torch.cat([x, pad], dim=1)



def square_grid(tokens):
    """Tokens (B, T, C) as a square grid: the side is a Python int of a traced size."""
    side = int(math.sqrt(tokens.shape[1]))  # SQRT
    return tokens.reshape(tokens.shape[0], side, side, tokens.shape[2])


def to_grid(tokens):
    return square_grid(tokens).permute(0, 3, 1, 2)


class Grid(nn.Module):
    """A module-level helper two calls below forward takes math.sqrt of a traced size:
    ``torch.fx.wrap("square_grid")`` after it makes it one node of the graph."""

    def forward(self, x):
        return to_grid(x * 2)


class GridOfHelper(nn.Module):
    """Calls a helper imported from another module: wrapped there, this module's name for it
    is not; wrapped here, it is one node."""

    def forward(self, x):
        side = grid_side(x)
        return x.reshape(x.shape[0], side, side, x.shape[2])


def temperature(logits, t):
    """Divides by a tensor or a number: torch.fx's Proxy is not a torch.Tensor, so a traced
    parameter takes the number's path, where ``max`` asks it for its truth."""
    if isinstance(t, torch.Tensor):  # ISINSTANCE
        return logits / t.clamp(min=1e-3)
    else:
        return logits / max(t, 1e-3)  # MAX


def same_pad(size, stride):
    """The padding to a multiple of ``stride`` (timm's get_same_padding): widened to accept the
    Proxy, the tensor's path calls ``.ceil()`` on what is a Python float when the graph runs."""
    if isinstance(size, torch.Tensor):
        return ((size / stride).ceil() * stride - size).int()
    else:
        return max(math.ceil(size / stride) * stride - size, 0)  # SAME-PAD


class PadSame(nn.Module):
    def forward(self, x):
        return F.pad(x, (0, same_pad(x.shape[-1], 4)))


class Tempered(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return temperature(x, self.t)


class PadToEven(nn.Module):
    """Pads an odd last dimension: torch.fx cannot branch on a traced size; padding by zero
    changes nothing, so the ``if`` can go. Recorded at an odd size, the branch ran: leaving
    it out is not shown."""

    def forward(self, x):
        pad = x.shape[-1] % 2
        if pad:  # PAD-IF
            x = F.pad(x, (0, pad))
        return x * 2


class RowScale(nn.Module):
    """A Python loop over the batch: torch.fx cannot range over a traced size; the loop's one
    expression on the whole tensor is the same answer."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((4,), 2.0))

    def forward(self, x):
        rows = []
        for i in range(x.shape[0]):  # LOOP
            rows.append(x[i] * self.scale + 1)
        return torch.stack(rows)


class RowGram(nn.Module):
    """A loop whose expression is not elementwise (each row's outer product): on the whole
    tensor it is another answer, so no patch is shown."""

    def forward(self, x):
        grams = []
        for i in range(x.shape[0]):  # GRAM-LOOP
            grams.append(x[i].unsqueeze(1) @ x[i].unsqueeze(0))
        return torch.stack(grams)


class TwoWidths(nn.Module):
    """An assert of two size checks joined by ``or``: torch._assert alone still asks a traced
    size for its truth; ``|`` does not."""

    def forward(self, x):
        assert x.shape[1] == 4 or x.shape[1] == 8, "width 4 or 8"  # OR-ASSERT
        return x + 1


class Rows(nn.Module):
    """``x.view(4, -1)`` recorded at a batch of 4: export pins the batch to 4; the input's own
    size keeps it dynamic."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(x.view(4, -1))  # VIEW-LITERAL


@register
class RegisteredGate(nn.Module):
    """A registered class (its decorator left out of the rebuild) with a branch on a tensor."""

    def forward(self, x):
        if x.sum() > 0:  # REGISTERED-IF
            return x * 2
        else:
            return x - 1


@with_scale
class ScaledGate(nn.Module):
    """A class its decorator adds to: not rebuilt, no patch."""

    def forward(self, x):
        if x.sum() > 0:  # SCALED-IF
            return x * self.scale
        else:
            return x
