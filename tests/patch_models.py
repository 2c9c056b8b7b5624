"""Tiny models, one per statement a verified patch rewrites (issue 42), and one whose plausible
rewrite changes eager's answer (so no patch is shown). Written into pytester folders too."""

import torch
from torch import nn


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

