"""P1 and P1b: what the ``traceable`` marker costs, measured as users meet it (pytest).

One pytest session per input size, interleaved, on the same models and inputs
(``_zoo.OVERHEAD_MODELS``, eval, untrained), three tests per model and repetition:

* ``raw``      -- the ten-line harness the plugin replaces: ``torch.fx.symbolic_trace``
  (trace + ``GraphModule``), eager forward, traced forward, ``torch.testing.assert_close``;
* ``marked``   -- ``@pytest.mark.traceable`` on a test whose body is ``out = model(x)``
  plus a shape assertion (zero-code mode: the marker records, traces, replays, compares);
* ``unmarked`` -- the same test without the marker;
* ``checked``  -- ``check_traceable(model, (x,))`` in the test body, its report asserted ok
  (the API on its own: one eager call it makes itself, the trace, the replay, the comparison).

Figures (time of the test's call phase, CPU seconds of the process with one intra-op
thread, median over repetitions; the first repetition is a warm-up and not counted),
for each input size -- by default both 1x3x64x64 (the issue's setting, where tracing
dominates) and 1x3x224x224 (torchvision's own model tests, where the forward pass
does); neither is the "real" one, so both are printed:

* P1  ``marked / raw``                 target <= 1.05
* P1b ``(marked - unmarked) / raw``    target <= 0.6
* P1c ``checked / raw``                target <= 1.05 (issue 38)

Usage::

    python benchmarks/overhead.py [--reps 5] [--sizes 64,224] [--models a,b,c]
    python benchmarks/overhead.py --instructions [--reps 1] [--sizes 64]

``--instructions`` runs the same session under valgrind's callgrind and counts the CPU
instructions of each test's call phase instead of its CPU time (switched on and off by
client requests around exactly that phase; see ``localize_instructions.py``). The counts
do not depend on the machine's load, so one measured repetition is enough: on a shared
machine, where the same check's CPU time moves by 20-50 % between runs, they are the
figure that can be reproduced. Instructions are not time: Python-level work (most of the
marker's own) runs at fewer instructions per second than the forward passes' kernels, so
the CPU-time ratios of a quiet machine are somewhat higher. Needs valgrind and a C
compiler; 20-40 minutes at 1x3x64x64 on this 2-core VM (one core).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import _zoo
from localize_instructions import build_helper, callgrind, dump_total

CONFTEST = '''
import ctypes, gc, json, os, time
import pytest, torch
import _zoo

torch.set_num_threads(1)
TIMES = []
_CACHE = {}
# under callgrind (--instructions): counting switched on and off around each call phase
_COUNTER = ctypes.CDLL(os.environ["FXBENCH_HELPER"]) if os.environ.get("FXBENCH_HELPER") else None

@pytest.fixture
def zoo():
    def get(name):
        if name not in _CACHE:
            size = int(os.environ["FXBENCH_SIZE"])
            _CACHE[name] = (_zoo.build(name), torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0)))
        return _CACHE[name]
    return get

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    if _COUNTER is not None:
        _COUNTER.fxbench_on()
    try:
        return (yield)
    finally:
        if _COUNTER is not None:
            _COUNTER.fxbench_off()  # one dump per test, in test order
        rep, name, kind = item.callspec.params["case"]
        TIMES.append((rep, name, kind, time.process_time() - cpu, time.perf_counter() - wall))

def pytest_sessionfinish(session):
    with open(os.environ["FXBENCH_OUT"], "w") as f:
        json.dump(TIMES, f)
'''

TESTS = '''
import os
import pytest, torch

MODELS = os.environ["FXBENCH_MODELS"].split(",")
REPS = int(os.environ["FXBENCH_REPS"])
KINDS = ("raw", "marked", "unmarked", "checked")

def cases():
    for rep in range(REPS + 1):  # rep 0: warm-up
        for name in MODELS:
            shift = (rep + MODELS.index(name)) % len(KINDS)  # rotate the order of the kinds
            for kind in KINDS[shift:] + KINDS[:shift]:
                marks = [pytest.mark.traceable] if kind == "marked" else []
                yield pytest.param((rep, name, kind), marks=marks, id=f"{rep}-{name}-{kind}")

@pytest.mark.parametrize("case", list(cases()))
def test_model(case, zoo):
    rep, name, kind = case
    model, x = zoo(name)
    if kind == "raw":
        gm = torch.fx.symbolic_trace(model)
        expected = model(x)
        actual = gm(x)
        torch.testing.assert_close(actual, expected)
    elif kind == "checked":
        from pytest_fxtrace import check_traceable

        report = check_traceable(model, (x,))
        assert report.ok, report.describe()
    else:
        out = model(x)
        assert out.shape == (1, 1000)
'''


def run(models: tuple[str, ...], reps: int, size: int, helper: str | None = None) -> list[tuple]:
    """``(rep, model, kind, cpu s, wall s)`` per test; with ``helper`` (the callgrind
    toggle library), ``(rep, model, kind, instructions, instructions)``."""
    with tempfile.TemporaryDirectory(prefix="fxbench-overhead-") as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (root / "test_overhead.py").write_text(textwrap.dedent(TESTS))
        out = root / "times.json"
        env = dict(
            _zoo.single_threaded_env(),
            FXBENCH_OUT=str(out),
            FXBENCH_MODELS=",".join(models),
            FXBENCH_REPS=str(reps),
            FXBENCH_SIZE=str(size),
        )
        cmd = [_zoo.PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(root)]
        if helper:
            env["FXBENCH_HELPER"] = helper
            dumps = root / "callgrind.out"
            cmd = [*callgrind(dumps), *cmd]
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the benchmark session failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
        times = json.loads(out.read_text())
        if not helper:
            return times
        counts = []
        for k, (rep, name, kind, _, _) in enumerate(times, 1):  # the k-th test's count is in dump k
            total = dump_total(f"{dumps}.{k}")
            counts.append((rep, name, kind, total, total))
        return counts


def table(models: tuple[str, ...], times: list[tuple], size: int, reps: int, instructions: bool = False) -> tuple[float, float, float]:
    """Print one size's per-model table; return its (P1, P1b, P1c) medians."""
    cpu: dict[tuple[str, str], list[float]] = {}
    wall: dict[tuple[str, str], list[float]] = {}
    for rep, name, kind, cpu_s, wall_s in times:
        if rep == 0:
            continue
        cpu.setdefault((name, kind), []).append(cpu_s)
        wall.setdefault((name, kind), []).append(wall_s)

    unit = "M instructions" if instructions else "CPU ms"
    print(f"P1/P1b overhead: {len(models)} torchvision models, input 1x3x{size}x{size}, "
          f"{reps} interleaved repetitions, {unit} (median), 1 intra-op thread")
    header = f"{'model':20s} {'raw':>8s} {'marked':>8s} {'unmarked':>8s} {'P1 ratio':>9s} {'P1b cost':>9s} {'checked':>8s} {'P1c':>6s}" + ("" if instructions else f" {'P1 wall':>8s}")
    print(header)
    print("-" * len(header))
    p1, p1b, p1c, p1_wall = [], [], [], []
    for name in models:
        raw, marked, unmarked, checked = (statistics.median(cpu[name, k]) for k in ("raw", "marked", "unmarked", "checked"))
        raw_w, marked_w = (statistics.median(wall[name, k]) for k in ("raw", "marked"))
        p1.append(marked / raw)
        p1b.append((marked - unmarked) / raw)
        p1c.append(checked / raw)
        p1_wall.append(marked_w / raw_w)
        scale = 1e-6 if instructions else 1e3
        print(f"{name:20s} {raw * scale:8.1f} {marked * scale:8.1f} {unmarked * scale:8.1f} "
              f"{p1[-1]:9.3f} {p1b[-1]:9.3f} {checked * scale:8.1f} {p1c[-1]:6.3f}" + ("" if instructions else f" {p1_wall[-1]:8.3f}"))
    print("-" * len(header))
    what = "instructions" if instructions else "CPU"
    print(f"P1  median marked/raw ({what}):            {statistics.median(p1):.3f}   target <= 1.05")
    if not instructions:
        print(f"P1  median marked/raw (wall, for info):   {statistics.median(p1_wall):.3f}")
    print(f"P1b median (marked-unmarked)/raw ({what}): {statistics.median(p1b):.3f}   target <= 0.6")
    print(f"P1c median check_traceable/raw ({what}):   {statistics.median(p1c):.3f}   target <= 1.05")
    print(f"load average after this session: {os.getloadavg()[0]:.1f} (1 min)")
    print()
    return statistics.median(p1), statistics.median(p1b), statistics.median(p1c)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="measured repetitions per model (default 5)")
    parser.add_argument("--sizes", default="64,224", help="input heights/widths, one session each (default 64,224)")
    parser.add_argument("--size", type=int, default=None, help="one input size only (same as --sizes N)")
    parser.add_argument("--models", default=",".join(_zoo.OVERHEAD_MODELS))
    parser.add_argument("--instructions", action="store_true", help="count CPU instructions under callgrind")
    args = parser.parse_args()
    models = tuple(args.models.split(","))
    sizes = [args.size] if args.size else [int(s) for s in args.sizes.split(",")]
    print(f"load average before: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="fxbench-helper-") as folder:
        helper = None
        if args.instructions:
            if shutil.which("valgrind") is None:
                sys.exit("--instructions needs valgrind's callgrind on PATH")
            helper = build_helper(folder)
            if not helper:
                sys.exit("--instructions needs a C compiler and valgrind's headers (valgrind/callgrind.h)")
        results = {
            size: table(models, run(models, args.reps, size, helper), size, args.reps, bool(helper)) for size in sizes
        }
    print(f"summary (median over models, {'instructions' if args.instructions else 'CPU'}):")
    for size, (p1, p1b, p1c) in results.items():
        print(f"  1x3x{size}x{size}: P1 {p1:.3f} (target <= 1.05, {'met' if p1 <= 1.05 else 'missed'}), "
              f"P1b {p1b:.3f} (target <= 0.6, {'met' if p1b <= 0.6 else 'missed'}), "
              f"P1c {p1c:.3f} (target <= 1.05, {'met' if p1c <= 1.05 else 'missed'})")


if __name__ == "__main__":
    main()
