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
    not shown."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        if x.sum() > 0:  # NOISY-IF
            h = x
        else:
            h = x + torch.randn_like(x)
        return self.drop(h)
