"""A1/A2: what ``artifact=`` adds to an export check: ``pt2`` (torch.export.save, then
torch.export.load, the call run on the loaded program) and ``aoti`` (AOTInductor's package:
aoti_compile_and_package, then aoti_load_package, the call run on the loaded runner).

Three checks of each model, interleaved in this process (for each repetition every model runs
all three, the order rotating; the first repetition is a warm-up, which also fills Inductor's
cache: vector-ISA probes, precompiled headers): ``check_traceable(model, (x,),
backend="export")``, the same with ``artifact=("pt2",)`` and with ``artifact=("aoti",)``. Time
is CPU seconds of this process and of the processes it waited for (the C++ compiler AOTInductor
runs), one intra-op thread; the median per model, and each check's ratio to the export check's.
Target for pt2: <= 1.3x an export check. aoti has none: it is a C++ build, opt-in.

    python benchmarks/artifact_cost.py [--reps 3] [--models linear,mlp,squeezenet1_1]

``linear`` is ``nn.Linear(4, 4)`` on 2x4 (the test suite's AOTInductor model), ``mlp`` three
``Linear`` + ``ReLU`` on 8x64; other names are torchvision classifiers (``_zoo.build``, 1x3x64x64).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pytest_fxtrace import check_traceable  # noqa: E402

FORMS = {"export": (), "pt2": ("pt2",), "aoti": ("aoti",)}


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "linear":
        return nn.Linear(4, 4).eval(), torch.randn(2, 4)
    if name == "mlp":
        layers = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        return layers.eval(), torch.randn(8, 64)
    from _zoo import build, example_input

    return build(name), example_input()


def cpu_seconds() -> float:
    """This process's CPU time and that of its waited-for children (the C++ compiler)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def checked(model: nn.Module, x: torch.Tensor, artifact: tuple[str, ...]) -> None:
    report = check_traceable(model, (x,), backend="export", artifact=artifact)
    if not report.ok:
        raise SystemExit(report.describe())


def measure(name: str, reps: int) -> dict[str, tuple[float, float]]:
    """(median CPU seconds, median wall seconds) of each check of ``name``."""
    model, x = model_and_input(name)
    labels = list(FORMS)
    cpu: dict[str, list[float]] = {label: [] for label in labels}
    wall: dict[str, list[float]] = {label: [] for label in labels}
    for rep in range(reps + 1):
        for label in labels[rep % len(labels) :] + labels[: rep % len(labels)]:
            gc.collect()
            start_cpu, start_wall = cpu_seconds(), time.perf_counter()
            checked(model, x, FORMS[label])
            if rep:
                cpu[label].append(cpu_seconds() - start_cpu)
                wall[label].append(time.perf_counter() - start_wall)
    return {label: (statistics.median(cpu[label]), statistics.median(wall[label])) for label in labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default="linear,mlp,squeezenet1_1")
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {len(names)} models, {options.reps} reps (+1 warm-up), load {load:.1f}")
    pt2, aoti = [], []
    for name in names:
        found = measure(name, options.reps)
        base = found["export"][0]
        pt2.append(found["pt2"][0] / base)
        aoti.append(found["aoti"][0] / base)
        times = ", ".join(f"{label} {c:.3f} s CPU ({w:.2f} s wall)" for label, (c, w) in found.items())
        print(f"{name}: {times}; pt2 / export {pt2[-1]:.3f}, aoti / export {aoti[-1]:.1f}", flush=True)
    print(f"A1 pt2 round trip / export check, median over {len(names)} models: {statistics.median(pt2):.3f} (target <= 1.3)")
    print(f"A2 aoti package / export check, median over {len(names)} models: {statistics.median(aoti):.1f} (no target)")
    print(f"load {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
