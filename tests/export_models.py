"""Tiny models, one per thing the torch.export check must say.

Also written into pytester directories as the user's ``export_models.py``, so the line
numbers reported for these models point here (``line_of`` finds a marked line).
"""

import time

import numpy as np
import torch
import torch.nn as nn


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(marker)


class Branch(nn.Module):
    """A branch on tensor data: control-flow in both modes (GB0170 in strict)."""

    def forward(self, x):
        if x.sum() > 0:  # DATA-BRANCH
            return x + 1
        return x - 1


class CountedView(nn.Module):
    """A size read from tensor data: data-dependent (torch suggests a torch._check)."""

    def forward(self, x):
        idx = x.nonzero()
        return idx.reshape(idx.shape[0] // 2, -1)  # DATA-SIZE


class IntOfData(nn.Module):
    """int() of tensor data used as a size: data-dependent in non-strict export."""

    def forward(self, x):
        n = int((x > 0).sum())  # INT-OF-DATA
        return x.flatten()[:n].reshape(n // 2, 2)


class Clock(nn.Module):
    """time.perf_counter(): TorchDynamo cannot capture it; non-strict export runs it."""

    def forward(self, x):
        started = time.perf_counter()  # CLOCK
        return x + 1 + 0 * started


class NumpyRoundTrip(nn.Module):
    """NumPy on tensor data: non-strict export cannot; TorchDynamo (strict) traces it."""

    def forward(self, x):
        return torch.from_numpy(np.tanh(x.numpy())) + 1  # NUMPY


class UsesLen(nn.Module):
    """len(x): torch.fx cannot trace it, export can (at one batch size)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * len(x)  # LEN


class BatchOfFour(nn.Module):
    """A branch on a size: export specializes the batch dimension."""

    def forward(self, x):
        if x.shape[0] == 4:  # SIZE-BRANCH
            return x * 2
        return x + 1


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        x = x * self.scale
        if x.mean() > 0:  # GATE
            return x
        return -x


class Detector(nn.Module):
    """An exportable backbone, a failing head: localization shows the backbone."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(Block(), Block())
        self.head = nn.Sequential(nn.Linear(4, 4), Gate())

    def forward(self, x):
        return self.head(self.backbone(x))


class Twins(nn.Module):
    """Two siblings of one class; only the second fails (a strict failure's module is
    found from dynamo's stack, which names no instance)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(Block())
        self.second = nn.Sequential(Gate())

    def forward(self, x):
        return self.second(self.first(x))


class Conv(nn.Module):
    """Any image size: both spatial dimensions may be dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, images):
        return self.bn(self.conv(images)).mean(dim=(2, 3))


class Counter(nn.Module):
    """Updates a buffer in forward; train-mode dropout and batch norm; kwargs-only input;
    a dict with nested outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, *, scale=None):
        self.seen.add_(1)
        y = self.drop(self.norm(x)) * self.seen
        if scale is not None:
            y = y * scale
        return {"out": y, "stats": [y.sum(), (y.mean(),)]}


class RebindsCounter(nn.Module):
    """Counts its calls by rebinding a buffer no output reads: strict export leaves it out."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1  # REBINDS-BUFFER
        return x * 2


class InPlaceCounter(nn.Module):
    """Counts its calls in place in a buffer no output reads: both modes record it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * 2


class Pair(nn.Module):
    """Nested inputs: a dict of tensors and a list, by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, inputs, *, extra=()):
        out = self.lin(inputs["a"]) + inputs["b"].sum()
        for item in extra:
            out = out + item.mean()
        return out


class NoFakeKernel(nn.Module):
    """A custom operator without a fake kernel: unsupported in both modes."""

    def forward(self, x):
        return torch.ops.fxtrace_tests.no_fake(x) + 1  # NO-FAKE


def _register_no_fake() -> None:
    if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
        if not hasattr(torch.ops.fxtrace_tests, "no_fake"):

            @torch.library.custom_op("fxtrace_tests::no_fake", mutates_args=())
            def no_fake(x: torch.Tensor) -> torch.Tensor:
                return x.clone()


try:
    _register_no_fake()
except Exception:  # a torch without torch.library.custom_op: the test using it skips
    pass


class DataRead(nn.Module):
    """ParityBench's masked layers: a value made from ``.data`` in forward. Non-strict
    export raises "fake tensor in the exported program constant's list"; strict export
    returns a program whose output is a fake tensor."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        w = self.lin.weight.data * 2  # DATA-READ
        return x @ w
