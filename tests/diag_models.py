"""One tiny model per traceability pattern (issue 3). Each failing statement carries
a ``# LINE: <name>`` marker so tests can assert the reported line without hard-coding it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import pytest_fxtrace


def line_of(name: str) -> int:
    """Line number of the statement marked ``# LINE: name`` in this file."""
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# LINE: {name}"):
                return number
    raise LookupError(name)


class ValueBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LINE: value-branch
            return x * 2
        return x


class ShapeBranchBlock(nn.Module):
    def forward(self, x):
        if x.shape[0] > 1:  # LINE: shape-branch
            return x[:1]
        return x


class ShapeBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.block = ShapeBranchBlock()

    def forward(self, x):
        return self.block(self.lin(x))


class AssertDim(nn.Module):
    def forward(self, x):
        assert x.dim() == 2, "expects a matrix"  # LINE: assert
        return x + 1


class LenOfInput(nn.Module):
    def forward(self, x):
        n = len(x)  # LINE: len
        return x.view(n, -1)


class Unpack(nn.Module):
    def forward(self, x):
        first, *rest = x  # LINE: unpack
        return first + rest[0]


class StarArgs(nn.Module):
    def forward(self, x):
        return torch.stack([*x])  # LINE: star


class Comprehension(nn.Module):
    def forward(self, x):
        rows = [row * 2 for row in x]  # LINE: comprehension
        return rows[0]


class IntOfShape(nn.Module):
    def forward(self, x):
        n = int(x.shape[0])  # LINE: int
        return x.reshape(n, -1)


class RangeOfShape(nn.Module):
    def forward(self, x):
        out = x
        for _ in range(x.shape[0]):  # LINE: range
            out = out + 1
        return out


class Contains(nn.Module):
    def forward(self, x):
        if 0 in x:  # LINE: contains
            return x
        return x + 1


class ZerosOfShape(nn.Module):
    def forward(self, x):
        pad = torch.zeros(x.shape[0], 3)  # LINE: zeros
        return torch.cat([x, pad], dim=1)


class TensorOfShape(nn.Module):
    def forward(self, x):
        size = torch.tensor(x.shape[-2:])  # LINE: tensor
        return x / size.prod()


class CheckedHead(nn.Module):
    def forward(self, x):
        torch._assert(isinstance(x, torch.Tensor), "expects a tensor")  # LINE: isinstance-assert
        return x.relu()


class IsinstanceAssert(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.head = CheckedHead()

    def forward(self, x):
        return self.head(self.lin(x))


class IsinstanceBranch(nn.Module):
    def forward(self, x):
        if isinstance(x, torch.Tensor):  # LINE: isinstance-branch
            return x * 2
        return x * 3


class TypeGuardedOutput(nn.Module):
    """Doubles a tensor and gives None for anything else: a traced value is no Tensor."""

    def forward(self, x):
        if isinstance(x, torch.Tensor):  # LINE: isinstance-none
            return x * 2
        return None


def doubled(x):
    if isinstance(x, torch.Tensor):  # LINE: isinstance-helper
        return x * 2
    return None


class UsesTypeGuardedHelper(nn.Module):
    def forward(self, x):
        return doubled(x)


class TypeGuardedBlock(nn.Module):
    def forward(self, x):
        if isinstance(x, torch.Tensor):  # LINE: isinstance-block
            return x * 2
        return x


class HoldsTypeGuardedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = TypeGuardedBlock()

    def forward(self, x):
        return self.block(x) + 1


class AdmitsTracedValues(nn.Module):
    """TypeGuardedOutput with the fix in code its diagnosis gives."""

    def forward(self, x):
        if isinstance(x, (torch.Tensor, torch.fx.Proxy)):
            return x * 2
        return None


class Unregistered(nn.Module):
    def forward(self, x):
        return nn.Linear(4, 4)(x)  # LINE: unregistered


class MutableCheckingTracer(pytest_fxtrace.Tracer):
    check_mutable_operations = True


class MetadataProxy(torch.fx.Proxy):
    """A library tracer's own proxy (transformers.utils.fx.HFProxy): its ``__bool__`` hands
    on to torch.fx's, which raises there, in the library's file."""

    def __bool__(self):
        return super().__bool__()


class OwnProxyTracer(pytest_fxtrace.Tracer):
    def proxy(self, node):
        return MetadataProxy(node, self)


class ProxyMakingTracer(pytest_fxtrace.Tracer):
    """A library tracer that makes each proxy in a method of its own (HFTracer.create_proxy
    adds metadata): a frame in the library's file, under every node of the graph."""

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, *rest, **more):
        return super().create_proxy(kind, target, args, kwargs, name, type_expr, *rest, **more)


class BranchesThroughOwnProxy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LINE: own-proxy
            return x
        return -x


class Mutates(nn.Module):
    def forward(self, x):
        y = x * 2
        torch.relu_(y)  # LINE: mutation
        return y


class BakedNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) + torch.randn(4, 4)  # LINE: randn


class FrozenFlag(nn.Module):
    def forward(self, x):
        if self.training:  # LINE: training
            x = F.dropout(x, 0.5)
        return x + 1


class RootHook(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_forward_hook(scale_output)

    def forward(self, x):
        return self.lin(x)


def scale_output(module, args, output):  # LINE: hook
    return output * 2


class OptionalInput(nn.Module):
    def forward(self, x, y=None):
        if y is None:  # LINE: is-none
            return x
        return x + y


class InplaceOnConstant(nn.Module):
    def forward(self, x):
        total = torch.zeros(4)
        total.add_(x.sum(0))  # LINE: inplace-constant
        return x + total


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # LINE: counter
        return x * self.calls


class Mode:
    """A plain configuration object: torch.fx cannot guard it when made concrete."""

    def __init__(self, scale: float) -> None:
        self.scale = scale


class Configured(nn.Module):
    def forward(self, x, mode):
        return x * mode.scale


def pad_to_multiple(x, multiple=4):
    width = int(x.shape[-1])  # LINE: helper
    return F.pad(x, (0, (-width) % multiple))


class HelperPad(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return pad_to_multiple(self.conv(x))


class FlagArgument(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, flag):
        if flag:  # LINE: flag
            return self.lin(x).relu()
        return self.lin(x)


class DynamicPad(nn.Module):
    def forward(self, x):
        width = int(x.shape[-1])  # LINE: dynamic-pad
        return F.pad(x, (0, (-width) % 4))


class PadBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.pad = DynamicPad()

    def forward(self, x):
        return self.pad(self.conv(x))


class Nested(nn.Module):
    """Failing submodules two levels down, in two places."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 3, 3, padding=1)
        self.first = PadBlock()
        self.second = PadBlock()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.second(self.first(self.stem(x)))
        return self.head(x[..., :8])


class Broken(nn.Module):
    def forward(self, x):
        return x @ torch.ones(5, 5)  # LINE: model-error


class BufferCounter(nn.Module):
    """Counts its calls in a registered buffer that no output reads."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1  # LINE: buffer-counter
        return x * 2


class BufferCounterInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)  # LINE: buffer-add
        return x * 2


class BufferRebound(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1  # LINE: buffer-rebound
        return x * 2


class CountsInSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = BufferCounterInPlace()

    def forward(self, x):
        return self.counter(x) + 1


class RecordedCounter(nn.Module):
    """Counts its calls with an op the graph records (a traced value is involved)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(x.new_ones(()))
        return x * 2


class LoggingCounter(nn.Module):
    """Counts its calls for logging only: nothing frozen matters."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def forward(self, x):
        self.seen += 1
        return x.flatten(1)


def proxying(function):
    """Records ``function`` as one graph node, the way a library's tracer patches
    functions (transformers.utils.fx.create_wrapper): a wrapper that holds the tracer."""

    def wrapper(*args):
        proxies = [a for a in args if isinstance(a, torch.fx.Proxy)]
        if not proxies:
            return function(*args)
        tracer = proxies[0].tracer
        return tracer.create_proxy("call_function", function, args, {})

    return wrapper


class Scale:
    """A plain Python object, which a graph cannot hold as a node's argument."""

    factor = 2.0


@proxying
def scaled(x, scale):
    return x * scale.factor


class PassesScale(nn.Module):
    def forward(self, x):
        return scaled(x, Scale())  # LINE: unrecordable


def tokens_to_grid(x):
    side = int(x.shape[1] ** 0.5)  # LINE: grid-helper
    return x.reshape(x.shape[0], side, side, x.shape[2])


class GridBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return tokens_to_grid(self.proj(x))


class HoldsGridBlock(nn.Module):
    """A submodule fails inside a helper function: autowrapping the helper keeps the
    submodule's own layers in the graph, which making it a leaf would hide."""

    def __init__(self):
        super().__init__()
        self.block = GridBlock()

    def forward(self, x):
        return self.block(x) * 2


class StaticSwish(nn.Module):
    """ParityBench's Swish: forward a @staticmethod. nn.Module.__call__ passes the inputs
    alone; torch.fx's tracer passes the module first."""

    @staticmethod
    def forward(x):  # LINE: static-forward
        return x * torch.sigmoid(x)


class PackedEncoder(nn.Module):
    """Takes a PackedSequence: its constructor reads batch_sizes.device, so it cannot be
    built around torch.fx placeholders; torch.fx traces it as one Proxy (the GRU is a leaf)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 4, batch_first=True)

    def forward(self, packed):
        out, h = self.rnn(packed)
        return h


class PacksItsInput(nn.Module):
    """Packs in forward: pack_padded_sequence reads the lengths' values, which torch.fx
    cannot; the PackedSequence then goes to a submodule."""

    def __init__(self):
        super().__init__()
        self.enc = PackedEncoder()

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)  # LINE: pack
        return self.enc(packed)
