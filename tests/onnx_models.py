"""Tiny models, one per thing the ONNX backend must say (issue 40): a clean CNN; an operator
ONNX has no function for, at the top level and in a nested submodule; a data-dependent branch
(the torch.export stage); a model whose ONNX Runtime answer differs from eager's, at the top
level and in a nested submodule mid-graph; structured
outputs and keyword inputs. Written into pytester directories too (``line_of`` finds a
marked line)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(marker)


class CleanCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.conv(x).relu().mean((2, 3)))  # CLEAN-RELU


class CumMax(nn.Module):
    """``torch.cummax``: ONNX has no function for ``aten.cummax`` (torch 2.14, onnxscript 0.7)."""

    def forward(self, x):
        return torch.cummax(x, dim=1).values  # CUMMAX


class TwoCumMax(nn.Module):
    """``torch.cummax``'s values and indices both."""

    def forward(self, x):
        return torch.cummax(x, dim=1)


class NestedCumMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), CumMax())

    def forward(self, x):
        return self.block(x) * 2


class TwiceCumMax(nn.Module):
    def forward(self, x):
        a = torch.cummax(x, dim=1).values  # CUMMAX-A
        b = torch.cummax(-x, dim=1).values  # CUMMAX-B
        return a + b


class DataBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # DATA-BRANCH
            return x * 2
        return x - 1


class TopTies(nn.Module):
    """``topk`` over tied values: ONNX Runtime breaks the ties otherwise than torch."""

    def forward(self, x):
        return torch.topk(x.round(), 2, dim=1).indices  # TOP-TIES


def ties():
    return torch.tensor([[0.1, 1.2, 0.9, 1.1], [2.0, 0.2, 1.9, 2.1]])


class TiePicker(nn.Module):
    def forward(self, x):
        return torch.topk(x.round(), 2, dim=1).indices  # PICK-TIES


class Gatherer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pick = TiePicker()

    def forward(self, x):
        return torch.gather(x, 1, self.pick(x)) * 3.0


class MidTies(nn.Module):
    """The ties broken otherwise in a nested submodule (``body.1.pick``) in the middle of the
    graph: the gather, the scaling, the Linear and the sum after it carry the difference."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.ReLU(), Gatherer())
        self.head = nn.Linear(2, 3)

    def forward(self, x):
        return self.head(self.body(x.abs())).sum(1)


class Structured(nn.Module):
    """A dict and a tuple out, a keyword in."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, *, scale=None):
        y = self.linear(x)
        if scale is not None:
            y = y * scale
        return {"a": y, "b": (y.sum(),)}


class Keywords(nn.Module):
    def forward(self, x, *, a=None, b=None):
        return x * a - b


class FixedBatch(nn.Module):
    """A fixed-size tensor made in ``forward``: a batch asked dynamic is pinned to 2."""

    def forward(self, x):
        return x + torch.ones(2, 4)  # FIXED-BATCH


class WideCancel(nn.Module):
    """A convolution and batch norm (ONNX Runtime fuses them) whose outputs near 1000 are
    also returned less their mean, which cancels to small values: float32 rounding of the
    wide values, a few epsilons of 1000, is far above assert_close's atol at the small ones."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(50, 100)
            self.bn.bias.fill_(1000.0)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.cat([y.flatten(1), (y - y.mean((2, 3), keepdim=True)).flatten(1)], 1)


class KthTies(nn.Module):
    """``torch.kthvalue``, which ONNX has no function for, over tied values: the translation
    (ONNX TopK) picks another index of the tie than torch."""

    def forward(self, x):
        return torch.kthvalue(x, 2, dim=1)  # KTHVALUE


class CumProd(nn.Module):
    """``torch.cumprod``: torch.onnx decomposes it into ``prims.prod``, which ONNX has no
    function for; the exported program has no node of that operator."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cumprod(self.lin(x), 1)  # CUMPROD


class Attention3D(nn.Module):
    """Attention over (batch, tokens, width) without a heads dimension: torchlib's
    translation of ``scaled_dot_product_attention`` takes 4-D query, key and value only."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v)  # SDPA-3D
