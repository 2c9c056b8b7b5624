"""The verified-patch corpus (``tests/patch_models.py``, one model per rewrite and each case a
plausible rewrite is not shown) on fx, export and compile: per model and backend, the
finding's category and whether a verified patch is shown; then the share per category and
backend (issue 42's figure for the corpus).

    python benchmarks/patch_corpus.py [--backends fx,export,compile]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import pytest_fxtrace  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import patch_models as m  # noqa: E402

# (model, its input's shape, check options; "ones": an input of ones, else seeded randn)
CORPUS = [
    (m.Gate, (2, 4), {}),
    (m.GateReturn, (2, 4), {}),
    (m.AssertPositive, (2, 4), {}),
    (m.TwoWidths, (2, 4), {}),
    (m.Talks, (2, 4), {}),
    (m.FlattenTo, (2, 3, 4), {}),
    (m.HeightWidth, (2, 3, 4), {}),
    (m.NumpyExp, (2, 4), {}),
    (m.ListScale, (2, 4), {}),
    (m.NormalizeByMax, (2, 4), {}),
    (m.PadColumn, (2, 3), {}),
    (m.Grid, (2, 9, 3), {}),
    (m.GridOfHelper, (2, 9, 3), {}),
    (m.PadSame, (2, 6), {}),
    (m.Tempered, (2, 4), {}),
    (m.PadToEven, (2, 4), {}),
    (m.RowScale, (3, 4), {}),
    (m.RegisteredGate, (2, 4), {}),
    (m.Rows, (4, 2, 8), {"dynamic": {"x": {0: "batch"}}}),
    # not shown: the rewrite would change eager's answer, or nothing may be rebuilt
    (m.NoisyGate, (2, 4), {"ones": True}),  # the branch that does not draw: where would
    (m.PadToEven, (2, 3), {}),
    (m.RowGram, (3, 4), {}),
    (m.ScaledGate, (2, 4), {}),
    (m.TalksTwice, (2, 4), {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="fx,export,compile")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    totals: collections.Counter[tuple[str, str]] = collections.Counter()
    patched: collections.Counter[tuple[str, str]] = collections.Counter()
    print(f"{'model':16} {'input':10} {'backend':8} {'status':12} {'category':16} patch")
    for cls, shape, options in CORPUS:
        for backend in args.backends.split(","):
            if "dynamic" in options and backend == "fx":
                continue  # dimensions are asked of export and compile
            torch.manual_seed(0)
            model = cls()
            options = dict(options)
            x = torch.ones(*shape) if options.pop("ones", False) else torch.randn(*shape, generator=torch.Generator().manual_seed(0))
            with contextlib.redirect_stdout(io.StringIO()):
                report = pytest_fxtrace.check_traceable(model, (x,), backend=backend, max_graph_breaks=0, **options)
            if report.ok:
                print(f"{cls.__name__:16} {str(shape):10} {backend:8} {'passed':12}")
                continue
            category = str(report.category.value if report.category else "")
            shown = report.suggestion is not None and report.suggestion.patch is not None
            totals[(category, backend)] += 1
            patched[(category, backend)] += shown
            print(f"{cls.__name__:16} {str(shape):10} {backend:8} {report.status.value:12} {category:16} {'yes' if shown else 'no'}")
    print("share with a verified patch, per category and backend:")
    for (category, backend), n in sorted(totals.items()):
        print(f"  {category} / {backend}: {patched[(category, backend)]} of {n}")
    print(f"  all: {sum(patched.values())} of {sum(totals.values())}")


if __name__ == "__main__":
    main()
