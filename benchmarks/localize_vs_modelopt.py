"""Localization cost: pytest_fxtrace.recursive_trace vs modelopt's recursive_trace.

Same failing models, same process, one intra-op thread; CPU time, the runs of the
three variants interleaved (order rotated, first repetition a warm-up), median of
each. modelopt is a benchmark-only dependency (``pip install -e .[bench]``).

    python benchmarks/localize_vs_modelopt.py [--repeat 9] [--models raft_small,...]

Prints one row per model: modelopt's time, ours without inputs (like modelopt: children
traced with symbolic inputs), ours with sample inputs (one eager forward recording each
child's inputs, then children traced with them), the ratios, and what each reports
(failing modules, whether the root graph is empty, whether the backbone is traceable).
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import pytest_fxtrace  # noqa: E402

NAMES = (
    "tiny Nested (2 failing leaves)", "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn",
    "maskrcnn_resnet50_fpn", "raft_small",
)  # fmt: skip


def models(names=NAMES):
    """(name, model, sample inputs, backbone path) of each model in ``names`` (only
    those are built)."""
    import diag_models

    det = torchvision.models.detection
    for name in names:
        if name not in NAMES:
            sys.exit(f"unknown model {name!r}; choose from {', '.join(NAMES)}")
        if name.startswith("tiny Nested"):
            yield name, diag_models.Nested(), (torch.randn(1, 3, 8, 10),), "first"
        elif name == "raft_small":
            raft = torchvision.models.optical_flow.raft_small(weights=None).eval()
            yield name, raft, (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)), "feature_encoder"
        else:
            model = getattr(det, name)(weights=None, weights_backbone=None, min_size=64, max_size=64).eval()
            yield name, model, ([torch.randn(3, 64, 64)],), "backbone"


def timed(fns, model, repeat):
    """CPU time of each ``fn(copy)``, interleaved: every repetition runs each function
    once on a fresh copy (the order rotated), so drift of a shared machine hits all
    alike; the first repetition is a warm-up. Returns the median per function and, for
    each, the result and copy of its last run. A fresh copy each run: modelopt leaves
    Proxies in attributes that forwards set lazily (MultiScaleRoIAlign.scales), which
    would poison every later run on the same instance."""
    times = [[] for _ in fns]
    last = [None] * len(fns)
    for rep in range(repeat + 1):
        order = list(range(len(fns)))
        order = order[rep % len(fns):] + order[: rep % len(fns)]
        for i in order:
            fresh = copy.deepcopy(model)
            gc.collect()
            start = time.process_time()
            result = fns[i](fresh)
            elapsed = time.process_time() - start
            if rep:
                times[i].append(elapsed)
            last[i] = (result, fresh)
    return [statistics.median(t) for t in times], last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9, help="measured repetitions (default 9)")
    parser.add_argument("--models", default=",".join(NAMES), help=f"comma-separated, of: {', '.join(NAMES)}")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as the other benchmarks: one intra-op thread
    start = time.perf_counter()
    from modelopt.torch.trace import recursive_trace as modelopt_trace

    print(f"modelopt import: {time.perf_counter() - start:.1f} s (not counted)")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, threads {torch.get_num_threads()}")
    header = (
        f"{'model':40} {'modelopt s':>10} {'ours s':>8} {'ratio':>6} {'ours+inputs s':>13} {'ratio':>6}  "
        "modelopt: failed / root graph / backbone    ours: deepest failing / backbone / coverage"
    )
    print(header)
    ratios = []
    for name, model, sample, backbone in models(args.models.split(",")):
        (t_mo, t_ours, t_in), ((mo_gc, traced), _, (ours_in, _)) = timed(
            (
                modelopt_trace,
                pytest_fxtrace.recursive_trace,
                lambda m, s=sample: pytest_fxtrace.recursive_trace(m, args=s),
            ),
            model,
            args.repeat,
        )
        modules = dict(traced.named_modules())
        mo_failed = sum(mo_gc.is_failed(m) for m in modules.values())
        mo_root_nodes = len(mo_gc[traced].nodes) if traced in mo_gc else 0
        mo_backbone = (
            backbone in modules
            and not mo_gc.is_failed(modules[backbone])
            and not mo_gc.is_unvisited(modules[backbone])
        )
        deepest = len(ours_in.deepest_failures())
        our_backbone = ours_in.records[backbone].status in ("traced", "leaf")
        ratios.append(t_ours / t_mo)
        print(
            f"{name:40} {t_mo:10.3f} {t_ours:8.3f} {t_ours / t_mo:6.2f} {t_in:13.3f} {t_in / t_mo:6.2f}  "
            f"{mo_failed} / {mo_root_nodes} nodes / {'yes' if mo_backbone else 'no'}"
            f"{'':20} {deepest} / {'yes' if our_backbone else 'no'} / {ours_in.coverage:.0%}"
        )
    print(f"median ratio ours/modelopt (no inputs): {statistics.median(ratios):.2f}; "
          f"load average now {os.getloadavg()[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
