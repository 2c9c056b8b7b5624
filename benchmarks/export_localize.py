"""E2: localizing a model that does not export, against
``torch._export.tools.report_exportability`` on the same model and inputs.

``report_exportability`` exports the root, then each child of a failing module on the
inputs a pre-hook saw, trying each module *type* once, and returns
``{submodule: exception}``. The check does the whole failing check from scratch: the
eager run, the root's export, the diagnosis (category, the user's statement, the failing
module), the localization (each submodule exported on its recorded inputs, every module
given a status) and the fix search. Same process, same export mode (``--strict`` for
both), CPU time of one intra-op thread, interleaved (order alternating, the first
repetition a warm-up), median per model; the figure is the median of the per-model
ratios.

    python benchmarks/export_localize.py [--reps 3] [--strict] [--models fasterrcnn_mobilenet_v3_large_320_fpn,...]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from _timing import interleaved  # noqa: E402

NAMES = (
    "tiny Detector",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "ssdlite320_mobilenet_v3_large",
    "retinanet_resnet50_fpn",
    "maskrcnn_resnet50_fpn",
)


def build(name: str) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    if name == "tiny Detector":
        import export_models

        return export_models.Detector(), (torch.randn(2, 4),)
    kwargs = {} if name.startswith("ssdlite") else {"min_size": 64, "max_size": 64}
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3, **kwargs)
    return model.eval(), ([torch.rand(3, 64, 64)],)


def theirs(model: torch.nn.Module, args: tuple, strict: bool) -> dict:
    from torch._export.tools import report_exportability

    from pytest_fxtrace.backends.export.quiet import quiet_torch

    with quiet_torch():  # it logs each failure at WARNING: not part of what is measured
        return report_exportability(model, args, strict=strict)


def ours(model: torch.nn.Module, args: tuple, strict: bool):
    from pytest_fxtrace import check_traceable

    return check_traceable(model, args, backend="export-strict" if strict else "export")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--strict", action="store_true", help="strict export (TorchDynamo) for both")
    parser.add_argument("--models", default=",".join(NAMES))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    mode = "strict" if options.strict else "non-strict"
    print(f"torch {torch.__version__}, {mode} export, {options.reps} reps (+1 warm-up)")
    ratios = []
    for name in names:
        model, args = build(name)
        medians, results = interleaved(
            {label: functools.partial(run, model, args, options.strict) for label, run in (("theirs", theirs), ("ours", ours))},
            options.reps,
            no_grad=False,
        )
        t, o = medians["theirs"], medians["ours"]
        ratios.append(o / t)
        failing = sorted(path or "<root>" for path, exc in results["theirs"].items() if exc is not None)
        report = results["ours"]
        deepest = [r.path or "<root>" for r in report.localization.deepest_failures()] if report.localization else []
        print(f"\n{name}: report_exportability {t:.2f} s, ours {o:.2f} s, ratio {o / t:.3f}")
        print(f"  report_exportability: {len(results['theirs'])} modules tried, failing {failing}")
        print(f"  ours: {report.message.splitlines()[0]}")
        print(f"        category {report.category}, failing (deepest) {deepest}, coverage {report.coverage:.0%}")
        print(f"        fix: {report.suggestion.text[:160] if report.suggestion else None}", flush=True)
    print(f"\nE2 median ratio ours / report_exportability over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.0)")


if __name__ == "__main__":
    main()
