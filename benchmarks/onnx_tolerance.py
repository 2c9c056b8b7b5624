"""O2: how far ONNX Runtime's float32 answers lie from eager's on real models, and which
default tolerance the ONNX backend needs (issue 40).

Each model is built as zoo mode builds it (``build_case``: seeded, untrained, eval, the
registry's example input), run in eager under ``no_grad``, exported (non-strict),
converted with ``torch.onnx.export(ep, dynamo=True)`` and run in ONNX Runtime (CPU).
For every floating output it prints the greatest absolute and relative difference, that
difference in epsilons of the output's own scale (``max |onnx - eager| / (eps * max
|eager|)``: float32 rounding of sums grows with the size of what is summed, not of the
result), and the *needed* factor per candidate ``(rtol, atol)``: ``max |onnx - eager| / (atol + rtol *
|eager|)`` (<= 1 passes ``torch.testing.assert_close`` with those tolerances).

No plugin code runs in the comparison: plain torch, torch.onnx and assert_close's rule.

    python benchmarks/onnx_tolerance.py                        # torchvision, every model that converts
    python benchmarks/onnx_tolerance.py --models resnet50,fcn_resnet50
"""

from __future__ import annotations

import argparse
import fnmatch
import time

import torch
from torch.utils import _pytree

# candidate float32 defaults: assert_close's, and looser ones
CANDIDATES = ((1.3e-6, 1e-5), (1e-5, 1e-5), (1e-4, 1e-5), (1e-4, 1e-4), (1e-3, 1e-4))
SKIP = ("quantized_*", "*rcnn*", "retinanet*", "ssd*", "fcos*", "keypoint*", "mvit*", "s3d", "swin3d*", "r2plus1d*")


def factor(onnx: torch.Tensor, eager: torch.Tensor, rtol: float, atol: float) -> float:
    a, e = onnx.double(), eager.double()
    finite = torch.isfinite(a) & torch.isfinite(e)
    return float(((a - e).abs() / (atol + rtol * e.abs()))[finite].max()) if finite.any() else 0.0


def measure(name: str) -> tuple[float, float, float, list[float]] | str:
    from pytest_fxtrace.zoo.registries import build_case, load_registry

    case = build_case(load_registry("torchvision"), name)
    model, args, kwargs = case.model, case.args, case.kwargs
    with torch.no_grad():
        eager = model(*args, **kwargs)
    try:
        ep = torch.export.export(model, tuple(args), dict(kwargs))
        program = torch.onnx.export(ep, dynamo=True, verbose=False)
        outputs = program(*args, **kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    expected = [t for t in _pytree.tree_leaves(eager) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    got = [t for t in outputs if t.is_floating_point()]
    if len(got) != len(expected):
        return f"{len(got)} floating outputs, eager {len(expected)}"
    abs_err = max(float((g.double() - e.double()).abs().max()) for g, e in zip(got, expected, strict=True))
    # the greatest difference in float32 epsilons of the output's own scale (its largest magnitude)
    scaled = max(
        float((g.double() - e.double()).abs().max() / (torch.finfo(e.dtype).eps * e.double().abs().max().clamp_min(1e-30)))
        for g, e in zip(got, expected, strict=True)
    )
    rel_err = max(float(((g.double() - e.double()).abs() / e.double().abs().clamp_min(1e-30)).max()) for g, e in zip(got, expected, strict=True))
    return abs_err, rel_err, scaled, [max(factor(g, e, r, a) for g, e in zip(got, expected, strict=True)) for r, a in CANDIDATES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated names (default: every torchvision model but SKIP)")
    options = parser.parse_args()
    from pytest_fxtrace.zoo.registries import load_registry

    names = options.models.split(",") if options.models else [
        n for n in load_registry("torchvision").names() if not any(fnmatch.fnmatch(n, p) for p in SKIP)
    ]
    print(f"torch {torch.__version__}; factor = max |onnx - eager| / (atol + rtol |eager|), <= 1 passes")
    print(f"{'model':28} {'max abs':>9} {'max rel':>9} {'eps*scale':>9} " + " ".join(f"{r:g}/{a:g}".rjust(11) for r, a in CANDIDATES))
    fails = [0] * len(CANDIDATES)
    worst = 0.0
    done = 0
    start = time.perf_counter()
    for name in names:
        found = measure(name)
        if isinstance(found, str):
            print(f"{name:28} not measured: {found}", flush=True)
            continue
        done += 1
        abs_err, rel_err, scaled, factors = found
        worst = max(worst, scaled)
        fails = [f + (x > 1) for f, x in zip(fails, factors, strict=True)]
        print(f"{name:28} {abs_err:9.2e} {rel_err:9.2e} {scaled:9.1f} " + " ".join(f"{x:11.3f}" for x in factors), flush=True)
    print(f"{done} models measured in {time.perf_counter() - start:.0f} s")
    print(f"greatest difference in epsilons of the output's scale (max |onnx - eager| / (eps max |eager|)): {worst:.1f}")
    print("failing per candidate (rtol/atol):")
    for (r, a), n in zip(CANDIDATES, fails, strict=True):
        print(f"  rtol={r:g} atol={a:g}: {n} of {done}")


if __name__ == "__main__":
    main()
