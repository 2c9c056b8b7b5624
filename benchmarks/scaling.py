"""P4: a 20-model suite, serial vs ``pytest -n 2`` (pytest-xdist).

The suite: twenty ``@pytest.mark.traceable`` tests, one per model of
``_zoo.SCALING_MODELS`` (resnets, mobilenet_v2, squeezenet, shufflenets, mnasnet,
regnets, efficientnets b0-b4, densenets, swin_v2_t; untrained, eval mode), each a
typical model test: build the model, run it on a 2x3x224x224 batch (``--size``),
check the output's shape and that it is finite, then back-propagate and check the
gradients are finite (the marker must not break a pending ``backward()``). The marker
traces, replays and compares the forward call. Every process pays a fixed start-up
(importing torch, torchvision and pytest-fxtrace, collecting) before its first test;
it is measured and printed with the speed-up bound it sets, since with too little
work per test (e.g. 1x3x64x64 forward only) that import, not the plugin, caps ``-n 2``.

The session's wall-clock time (process start to exit, as a user waits for it) serial
and with ``-n 2``, alternating, median over repetitions. Both runs use one intra-op
thread per process (``OMP_NUM_THREADS=1``): with two workers on two cores, more
threads only contend.

Figures:

* ``serial / -n 2`` wall time (target >= 1.7 on 2 cores) -- meaningful only on a
  machine whose two cores are otherwise idle;
* the same ratio in CPU time along the critical path: the serial process's CPU
  seconds over the busiest ``-n 2`` worker's (each process's own ``process_time`` at
  session end, imports included). That is the speed-up two free cores give, and
  it does not depend much on what else the machine is running;
* start-up CPU per process (a ``--collect-only`` session) and the speed-up bound it
  sets: (S + W) / (S + W / 2), W the serial session's CPU beyond its start-up;
* where a ``-n 2`` session's wall time goes (medians, seconds from launch): the
  controller configured (pytest and its plugins imported), each worker configured,
  workers done with their tests, the process gone; and whether the controller had
  imported torch (pytest-fxtrace's plugin does not: the controller runs no test);
* the same two speed-ups for the same tests without the marker, in the same run: what
  the machine and pytest-xdist give this suite with no check at all, the baseline the
  marked figures compare with (on this VM, two workers' kernels also slow each other:
  a suite's CPU seconds grow when two processes run at once).

Usage::

    python benchmarks/scaling.py [--reps 3] [--size 224] [--dist load|worksteal]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

import _zoo

CONFTEST = '''
import json, os, sys, time

CONFIGURED = []  # this process's

def pytest_configure(config):
    CONFIGURED.append(time.time())

def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):
        name = config.workerinput["workerid"]
    else:
        name = "controller" if config.pluginmanager.hasplugin("dsession") else "serial"
    with open(os.path.join(os.environ["FXBENCH_CPU_DIR"], name), "w") as f:
        json.dump({"cpu": time.process_time(), "configured": CONFIGURED[0], "finished": time.time(),
                   "torch": "torch" in sys.modules}, f)
'''

TESTS = '''
import os
import pytest, torch, torchvision  # noqa: F401 (as a torchvision test module does)
import _zoo

torch.set_num_threads(1)
SIZE = int(os.environ["FXBENCH_SIZE"])
# the baseline sessions run the very same tests without the marker
pytestmark = [pytest.mark.traceable] if os.environ["FXBENCH_MARKED"] == "1" else []

@pytest.mark.parametrize("name", os.environ["FXBENCH_MODELS"].split(","))
def test_model(name):
    model = _zoo.build(name)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    out = model(x)  # the call the marker checks
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()
    out.logsumexp(dim=1).mean().backward()  # gradients still flow after the check
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
'''


class Timeline(NamedTuple):
    """Seconds from launch; ``torch``: whether the controller (or serial process) imported torch."""

    main_configured: float
    workers_configured: float  # the last worker's (the serial process's own for serial)
    tests_done: float  # the last test process's sessionfinish
    exited: float
    torch: bool


def session(root: Path, extra: list[str], size: int, marked: bool = True) -> tuple[float, float, Timeline]:
    """(wall seconds, CPU seconds of the busiest test process, where the time went)"""
    cpu_dir = root / "cpu"
    cpu_dir.mkdir(exist_ok=True)
    for old in cpu_dir.iterdir():
        old.unlink()
    env = dict(
        _zoo.single_threaded_env(),
        FXBENCH_MODELS=",".join(_zoo.SCALING_MODELS),
        FXBENCH_CPU_DIR=str(cpu_dir),
        FXBENCH_SIZE=str(size),
        FXBENCH_MARKED="1" if marked else "0",
    )
    cmd = [_zoo.PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(root)]
    launched = time.time()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the benchmark session failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    seen = {p.name: json.loads(p.read_text()) for p in cpu_dir.iterdir()}
    main = seen.pop("controller", None) or seen["serial"]
    tests = seen or {"serial": main}  # the workers, or the serial process
    timeline = Timeline(
        main_configured=main["configured"] - launched,
        workers_configured=max(t["configured"] for t in tests.values()) - launched,
        tests_done=max(t["finished"] for t in tests.values()) - launched,
        exited=wall,
        torch=bool(main["torch"]),
    )
    return wall, max(t["cpu"] for t in tests.values()), timeline


def _median_timeline(runs: list[tuple[float, float, Timeline]]) -> Timeline:
    timelines = [t for _, _, t in runs]
    return Timeline(
        *(statistics.median(getattr(t, field) for t in timelines) for field in Timeline._fields[:-1]),
        torch=any(t.torch for t in timelines),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="sessions of each kind (default 3)")
    parser.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument(
        "--dist", default="load", choices=("load", "worksteal"),
        help="pytest-xdist's distribution for -n 2 (default load, xdist's own default); worksteal "
        "moves queued tests to a worker that ran out, which evens out a suite of unequal models",
    )  # fmt: skip
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fxbench-scaling-") as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (root / "test_scaling.py").write_text(textwrap.dedent(TESTS))
        startup = [session(root, ["--collect-only"], args.size)[1] for _ in range(2)]  # also warms file caches
        serial, parallel, plain_serial, plain_parallel = [], [], [], []
        for _ in range(args.reps):
            serial.append(session(root, [], args.size))
            parallel.append(session(root, ["-n", "2", "--dist", args.dist], args.size))
            plain_serial.append(session(root, [], args.size, marked=False))
            plain_parallel.append(session(root, ["-n", "2", "--dist", args.dist], args.size, marked=False))
    s, p = statistics.median(w for w, _, _ in serial), statistics.median(w for w, _, _ in parallel)
    sc, pc = statistics.median(c for _, c, _ in serial), statistics.median(c for _, c, _ in parallel)
    st, pt = _median_timeline(serial), _median_timeline(parallel)
    ps = statistics.median(w for w, _, _ in plain_serial)
    pp = statistics.median(w for w, _, _ in plain_parallel)
    psc = statistics.median(c for _, c, _ in plain_serial)
    ppc = statistics.median(c for _, c, _ in plain_parallel)
    start_cpu = min(startup)
    work = sc - start_cpu
    bound = (start_cpu + work) / (start_cpu + work / 2)
    print(f"P4 scaling: {len(_zoo.SCALING_MODELS)} marked torchvision model tests at 2x3x{args.size}x{args.size} (forward checked, then backward), "
          f"{os.cpu_count()} CPUs, {args.reps} alternating sessions each, -n 2 --dist {args.dist}")
    print(f"  suite: {', '.join(_zoo.SCALING_MODELS)}")
    print(f"  serial  wall s: {', '.join(f'{t:.1f}' for t, _, _ in serial)}  (median {s:.1f}); "
          f"CPU s of the process: median {sc:.1f}")
    print(f"  -n 2    wall s: {', '.join(f'{t:.1f}' for t, _, _ in parallel)}  (median {p:.1f}); "
          f"CPU s of the busiest worker: median {pc:.1f}")
    print(f"  serial  timeline s: configured {st.main_configured:.1f}, tests done {st.tests_done:.1f}, "
          f"exited {st.exited:.1f}; torch imported before the tests: yes (the test module imports it)")
    print(f"  -n 2    timeline s: controller configured {pt.main_configured:.1f}, last worker configured "
          f"{pt.workers_configured:.1f}, tests done {pt.tests_done:.1f}, exited {pt.exited:.1f}; "
          f"controller imported torch: {'yes' if pt.torch else 'no'}")
    print(f"  start-up CPU s per process (--collect-only): {start_cpu:.1f}; checks: {work:.1f} s serial, "
          f"so two workers can give at most {bound:.2f}x")
    print(f"  the same tests unmarked: serial wall {ps:.1f} s, CPU {psc:.1f} s; -n 2 wall {pp:.1f} s, "
          f"busiest worker CPU {ppc:.1f} s: speed-up {ps / pp:.2f}x wall, {psc / ppc:.2f}x CPU on the "
          f"critical path (what this machine gives the suite without pytest-fxtrace)")
    print(f"  load average before: {load_before:.1f}, after: {os.getloadavg()[0]:.1f} (1 min)")
    print(f"P4 speed-up serial / -n 2, wall:                    {s / p:.2f}x   target >= 1.7x (idle cores)")
    print(f"P4 speed-up serial / -n 2, CPU on the critical path: {sc / pc:.2f}x   target >= 1.7x")


if __name__ == "__main__":
    main()
