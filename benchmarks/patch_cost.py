"""P1: what the verified-patch search adds to a failing check (issue 42), and what it finds.

A check of a model that fails to capture already searches for an option fix and verifies it
(one more capture and replay per candidate); the patch search then tries each rewrite of the
failing statement: copies of the model (sharing its parameters), the original and the patched
one run eagerly, and the same check on the patched copy. This times ``check_traceable`` on
failing timm models with the search (as shipped) and without it (``find_patch`` answering
None), interleaved in one process, CPU time of one intra-op thread, median per model; the
figure is the median of the per-model ratios. One model per failing site the zoo figures
count, at timm's FX test size (its pretrained input size, capped at 128 px).

    python benchmarks/patch_cost.py [--reps 3] [--models tf_efficientnet_b0,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import timm  # noqa: E402
import torch  # noqa: E402

import pytest_fxtrace  # noqa: E402
import pytest_fxtrace.check as check  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved  # noqa: E402

# a patch found: padding.py (wrap), crossvit.py (wrap), nest.py (wrap), twins.py (if left out),
# mobilevit.py (if left out); none found: efficientvit_msra.py (an if / else), vgg.py (max of sizes)
MODELS = "tf_efficientnet_b0,crossvit_tiny_240,nest_tiny,twins_svt_small,mobilevitv2_050,efficientvit_m0,vgg11"


def size_of(model: torch.nn.Module) -> tuple[int, int, int]:
    cfg = model.pretrained_cfg
    channels, height, width = cfg.get("input_size", (3, 224, 224))
    if cfg.get("fixed_input_size"):
        return channels, height, width
    return channels, min(height, 128), min(width, 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    shipped = check.find_patch
    ratios = []
    print(f"{'model':24} {'without s':>9} {'with s':>8} {'ratio':>6}  patch found")
    for name in args.models.split(","):
        model = timm.create_model(name, pretrained=False).eval()
        x = torch.randn(1, *size_of(model), generator=torch.Generator().manual_seed(0))

        def without(model: torch.nn.Module = model, x: torch.Tensor = x) -> object:
            check.find_patch = lambda *a: None  # type: ignore[assignment]
            try:
                return pytest_fxtrace.check_traceable(model, (x,))
            finally:
                check.find_patch = shipped

        def with_search(model: torch.nn.Module = model, x: torch.Tensor = x) -> object:
            return pytest_fxtrace.check_traceable(model, (x,))

        seconds, results = interleaved({"without": without, "with": with_search}, args.reps)
        report = results["with"]
        assert not report.ok and not results["without"].suggestion.patch, name  # type: ignore[attr-defined]
        ratio = seconds["with"] / seconds["without"]
        ratios.append(ratio)
        found = "yes" if report.suggestion is not None and report.suggestion.patch else "no"  # type: ignore[attr-defined]
        print(f"{name:24} {seconds['without']:9.2f} {seconds['with']:8.2f} {ratio:6.2f}  {found}")
    print(f"P1 median ratio over {len(ratios)} models: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
