"""Tiny models whose torch.compile check fails in a way an option or a decorator fixes
(the fix verified by compiling again), one whose check fails with no such fix, and one for
compile snapshots.

Also written into pytester directories as the user's ``compile_fix_models.py``, so the lines
reported for these models point here (``line_of`` finds a marked line).
"""

import torch
import torch.nn as nn


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(marker)


def log_stats(y):  # F-LOGDEF
    print("mean", float(y.mean()))  # F-HELPER
    return y


class Noisy(nn.Module):
    """A submodule that logs with print: the break is fixed by disabling it."""

    def forward(self, x):  # F-NOISYDEF
        y = x * 2
        print("noisy", tuple(y.shape))  # F-PRINT
        return y + 1


class WithNoisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.noisy = Noisy()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.noisy(self.stem(x)))


class WithHelper(nn.Module):
    """A helper function that logs: the break is fixed by disabling the helper."""

    def forward(self, x):
        y = log_stats(x.relu())
        return y * 3


class Scaled(nn.Module):
    """.item() in forward: capture_scalar_outputs keeps it in the graph."""

    def forward(self, x):
        y = x.relu()
        scale = y.mean().item()  # F-ITEM
        return y * scale


class Stepped(nn.Module):
    """An int attribute the test advances: allow_unspec_int_on_nn_module keeps it symbolic."""

    def __init__(self):
        super().__init__()
        self.step = 1

    def forward(self, x):
        return x * self.step  # F-STEP


class Batched(nn.Module):
    """Inputs whose batch, then feature size vary: the second size recompiles (counted)."""

    def forward(self, x):
        return x.relu() * 2


class Listed(nn.Module):
    """The tensor whose sizes vary comes in a list: no input to mark, dynamic=True fixes it."""

    def forward(self, xs):
        return xs[0].relu() * 2


class DataBranch(nn.Module):
    """A branch on tensor data in the model's own forward: no option fixes it."""

    def forward(self, x):
        if x.sum() > 0:  # F-BRANCH
            return x + 1
        return x - 1


class Snap(nn.Module):
    """One break (print) within a budget of one, for a compile snapshot: two graphs."""

    def __init__(self, act="relu"):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        y = self.proj(x)
        print("snap")  # F-SNAP-PRINT
        return getattr(torch, self.act)(y)


class ItemThenPrint(nn.Module):
    """.item(), then a print, in forward: capture_scalar_outputs leaves the print."""

    def forward(self, x):
        scale = x.mean().item()  # F-ITEM-FIRST
        print("scaled")
        return x * scale


class Gain(nn.Module):
    def forward(self, x):
        return x / (1 + x.norm().item())


class Logged(nn.Module):
    def forward(self, x):
        print("logged")
        return x + 1


class GainAndLogged(nn.Module):
    """.item() in one submodule, print in another: only disabling both can pass."""

    def __init__(self):
        super().__init__()
        self.gain = Gain()
        self.logged = Logged()

    def forward(self, x):
        return self.logged(self.gain(x * 2)) * 3
