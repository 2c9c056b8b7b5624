"""C2: localizing a model whose torch.compile breaks, against ``torch._dynamo.explain`` on
the same model and inputs.

``explain(model)(*args)`` compiles the model once (after a ``reset``) and returns the graphs,
their count less one as ``graph_break_count``, and a ``break_reasons`` entry per break with
torch's reason and user stack. The check does the whole failing compile check from scratch:
the eager run, one compile in a Dynamo state of its own, every distinct break site with the
user's statement, line and submodule, and the fix search (the model compiled again with each
fix that may help, verified over the calls). Same process, CPU time of one intra-op thread,
interleaved (order alternating, the first repetition a warm-up), median per model; the figure
is the median of the per-model ratios.

The models: two tiny ones from the test corpus (three sites in a model and a submodule; a
``print`` in a submodule), two torchvision classifiers with a break put into one block (a
``print``; a ``.item()``), and a detection model whose breaks are torchvision's own.

    python benchmarks/compile_localize.py [--reps 3] [--models "tiny SeveralBreaks",...]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests"))
from _timing import interleaved  # noqa: E402
from _zoo import build as build_classifier  # noqa: E402
from _zoo import example_input  # noqa: E402

NAMES = (
    "tiny SeveralBreaks",
    "tiny WithNoisy",
    "resnet18 + print in layer3.0",
    "mobilenet_v3_small + .item() in features.4",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
)


class Printing(nn.Module):
    """A block that logs its output's size: a ``print`` in a submodule's forward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        print("block", tuple(y.shape))
        return y


class Normalized(nn.Module):
    """A block that divides by its output's norm read as a Python float (``.item()``)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        gain = y.norm().item()
        return y / (1 + gain)


def build(name: str) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    if name == "tiny SeveralBreaks":
        import compile_models

        return compile_models.SeveralBreaks(), (torch.randn(2, 4),)
    if name == "tiny WithNoisy":
        import compile_fix_models

        return compile_fix_models.WithNoisy(), (torch.randn(2, 4),)
    if name.startswith("resnet18"):
        model = build_classifier("resnet18")
        model.layer3[0] = Printing(model.layer3[0])
        return model, (example_input(),)
    if name.startswith("mobilenet_v3_small"):
        model = build_classifier("mobilenet_v3_small")
        model.features[4] = Normalized(model.features[4])
        return model, (example_input(),)
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3, min_size=64, max_size=64)
    return model.eval(), ([torch.rand(3, 64, 64)],)


def theirs(model: nn.Module, args: tuple):
    from pytest_fxtrace.backends.compile.session import quiet

    with quiet():  # it logs each .item() break at WARNING, the model prints: not what is measured
        return torch._dynamo.explain(model)(*args)


def ours(model: nn.Module, args: tuple):
    from pytest_fxtrace import check_traceable

    return check_traceable(model, args, backend="compile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default=",".join(NAMES))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    print(f"torch {torch.__version__}, {options.reps} reps (+1 warm-up), load average at start {os.getloadavg()[0]:.1f}")
    ratios = []
    for name in names:
        model, args = build(name)
        medians, results = interleaved(
            {"theirs": functools.partial(theirs, model, args), "ours": functools.partial(ours, model, args)}, options.reps
        )
        t, o = medians["theirs"], medians["ours"]
        ratios.append(o / t)
        explained, report = results["theirs"], results["ours"]
        lines = {(r.user_stack[-1].filename, r.user_stack[-1].lineno) for r in explained.break_reasons if r.user_stack}
        print(f"\n{name}: explain {t:.2f} s, ours {o:.2f} s, ratio {o / t:.3f}")
        print(f"  explain: graph_break_count {explained.graph_break_count}, {len(lines)} distinct break lines")
        print(f"  ours: {report.status}, {len(report.graph_breaks or ())} sites, category {report.category}")
        print(f"        {report.message.splitlines()[0][:200]}")
        print(f"        fix: {report.suggestion.text[:200] if report.suggestion else None}", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    print(f"C2 median ratio ours / explain over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.5)")


if __name__ == "__main__":
    main()
