"""Tiny models, one per thing the torch.compile check must say: the common causes of graph
breaks, code that looks as if it would break but that Dynamo traces, and the common causes
of recompiles.

Also written into pytester directories as the user's ``compile_models.py``, so the lines
reported for these models point here (``line_of`` finds a marked line).
"""

import math
import time

import torch
import torch.nn as nn


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(marker)


# --- graph breaks ---------------------------------------------------------------------------


class DataBranch(nn.Module):
    """A branch on tensor data: control-flow (GB0170)."""

    def forward(self, x):
        y = x * 2
        if y.sum() > 0:  # C-BRANCH
            return y + 1
        return y - 1


class ItemScale(nn.Module):
    """A Python number read out of a tensor: data-dependent (GB0124)."""

    def forward(self, x):
        y = x.relu()
        scale = y.mean().item()  # C-ITEM
        return y * scale


class IntOfData(nn.Module):
    """int() of tensor data: type-conversion."""

    def forward(self, x):
        y = x.abs()
        k = int(y.max())  # C-INT
        return y[:, :1] * k


class PrintInForward(nn.Module):
    """Logging with print in forward: unsupported (GB0059, a builtin Dynamo cannot trace)."""

    def forward(self, x):
        y = x + 1
        print("forward got", tuple(y.shape))  # C-PRINT
        return y * 3


class CFunction(nn.Module):
    """A C function Dynamo cannot trace (time.perf_counter): unsupported."""

    def forward(self, x):
        y = x.sin()
        started = time.perf_counter()  # C-CFUNC
        return y + (started > 0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        y = self.proj(x)
        gain = y.norm().item()  # C-SUBMODULE
        return y / (1 + gain)


class BreakInSubmodule(nn.Module):
    """A break inside a submodule: one site, named after the submodule, although every
    enclosing frame breaks at the call too."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.block = Block()

    def forward(self, x):
        return self.block(self.stem(x)).relu()


class SeveralBreaks(nn.Module):
    """Three sites, one of them in a submodule: listed deepest first."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        y = x * 2
        print("step")  # C-SEVERAL-PRINT
        y = self.block(y)
        if y.sum() > 0:  # C-SEVERAL-BRANCH
            y = y + 1
        return y


class LooksBreakingButTraces(nn.Module):
    """Code that reads as if it would break, all of which Dynamo traces: shape arithmetic,
    a branch on a size, isinstance, a loop over submodules, math on sizes, torch.where."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x, mask=None):
        if x.shape[-1] != 4:
            raise ValueError("expected 4 features")
        if isinstance(mask, torch.Tensor):
            x = x * mask
        for layer in self.layers:
            x = layer(x)
        scale = 1.0 / math.sqrt(x.shape[-1])
        return torch.where(x > 0, x * scale, -x)


class Identity(nn.Module):
    """Nothing to compile: Dynamo compiles forward and captures no graph (not a finding)."""

    def forward(self, x):
        return x


class Disabled(nn.Module):
    """A forward Dynamo never compiles (torch.compiler.disable): it runs eagerly as a whole."""

    @torch.compiler.disable
    def forward(self, x):
        return x.relu() + 1


# --- recompiles -----------------------------------------------------------------------------


class StepScaled(nn.Module):
    """Python state read in forward: each new value of ``self.step`` recompiles."""

    def __init__(self):
        super().__init__()
        self.step = 1

    def forward(self, x):
        return x * self.step  # C-STEP


class Sizes(nn.Module):
    """Inputs of varying batch size: automatic dynamic shapes recompile once, dynamic."""

    def forward(self, x):
        return x.relu() * 2


class ShapeBranch(nn.Module):
    """A branch on a size that the recorded calls cross: recompiles on the size's guard."""

    def forward(self, x):
        if x.shape[0] > 3:  # C-SHAPE
            return x.sum(0)
        return x.mean(0)


class SizeEquals(nn.Module):
    """A branch on one size: the size that went dynamic is made constant again by the branch,
    so the next size fails a plain size guard torch names no statement for."""

    def forward(self, x):
        if x.shape[0] == 4:  # C-SIZE-EQ
            return x.sum(0)
        return x.mean(0)


class SizeEqualsCond(nn.Module):
    """SizeEquals with its branch in torch.cond (the fix in code its check gives)."""

    def forward(self, x):
        return torch.cond(x.shape[0] == 4, lambda x: x.sum(0), lambda x: x.mean(0), (x,))


# --- which submodule ------------------------------------------------------------------------


class Chatty(nn.Module):
    """Prints in forward when verbose, and twice in a helper method: each print after the
    first of a frame is met where Dynamo compiles a resumed function on its own."""

    def __init__(self, verbose):
        super().__init__()
        self.verbose = verbose
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        y = self.proj(x)
        if self.verbose:
            print("first")  # C-CHATTY-FIRST
            y = y * 2
            print("second")  # C-CHATTY-SECOND
        return self.helper(y)

    def helper(self, y):
        y = y + 1
        print("in helper")  # C-CHATTY-HELPER
        z = y * 3
        print("in helper again")  # C-CHATTY-AGAIN
        return z


class Siblings(nn.Module):
    """Two instances of one class called on one line; only the second is verbose."""

    def __init__(self):
        super().__init__()
        self.quiet = Chatty(False)
        self.loud = Chatty(True)

    def forward(self, x):
        return self.loud(self.quiet(x))


# --- a helper compiled on its own ------------------------------------------------------------


def rescale(t):  # C-RESCALE-DEF
    return t.relu() * 2


class RankVaries(nn.Module):
    """A print in a loop: Dynamo runs the rest of forward eagerly, so ``rescale`` is
    compiled as a frame of its own, then again for an input of another rank."""

    def forward(self, x):
        for _ in range(2):
            print("step")  # C-LOOP-PRINT
        return rescale(x) + rescale(x[None]).sum(0)
