"""P3: memory over a long session -- one pytest session checking 40 torchvision models.

Each test builds its model (``_zoo.MEMORY_MODELS``, untrained, 1x3x64x64), calls it
under ``@pytest.mark.traceable``, and lets it go. After every test (and its
teardown) the session records the process's peak RSS (``ru_maxrss``), its RSS after
a ``gc.collect()``, and how many ``torch.fx.GraphModule`` objects and recorded
calls (``CapturedCall``, ``ModelState``, ``ModelChecker``) are still alive. The same session without the marker is the control.

Figures:

* peak RSS growth from after the 5th test to the end (target <= 10 %); the largest
  models are among the first five, so later growth is accumulation;
* GraphModules and recorded calls alive after any test (must be 0).

Usage::

    python benchmarks/memory.py [--no-control]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import _zoo

CONFTEST = '''
import gc, json, os, resource
import pytest, torch
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.state import ModelState
from pytest_fxtrace.check import ModelChecker

CAPTURED = (CapturedCall, ModelState, ModelChecker)
torch.set_num_threads(1)
ROWS = []

def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    gc.collect()
    objects = gc.get_objects()
    ROWS.append({
        "test": nodeid.rpartition("[")[2].rstrip("]"),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_mib": _rss_mib(),
        "graph_modules": sum(isinstance(o, torch.fx.GraphModule) for o in objects),
        "captured": sum(isinstance(o, CAPTURED) for o in objects),
    })
    del objects

def pytest_sessionfinish(session):
    with open(os.environ["FXBENCH_OUT"], "w") as f:
        json.dump(ROWS, f)
'''

TESTS = '''
import os
import pytest, torch
import _zoo

MODELS = os.environ["FXBENCH_MODELS"].split(",")
MARK = [pytest.mark.traceable] if os.environ["FXBENCH_MARKED"] == "1" else []

@pytest.mark.parametrize("name", [pytest.param(n, marks=MARK, id=n) for n in MODELS])
def test_model(name):
    model = _zoo.build(name)
    out = model(_zoo.example_input())
    assert out.shape == (1, 1000)
'''


def run(marked: bool) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="fxbench-memory-") as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (root / "test_memory.py").write_text(textwrap.dedent(TESTS))
        out = root / "rows.json"
        env = dict(
            _zoo.single_threaded_env(),
            FXBENCH_OUT=str(out),
            FXBENCH_MODELS=",".join(_zoo.MEMORY_MODELS),
            FXBENCH_MARKED="1" if marked else "0",
        )
        cmd = [_zoo.PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root)]
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the benchmark session failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def summarize(label: str, rows: list[dict]) -> float:
    fifth, last = rows[4], rows[-1]
    growth = (last["peak_mib"] - fifth["peak_mib"]) / fifth["peak_mib"]
    settled = (last["rss_mib"] - fifth["rss_mib"]) / fifth["rss_mib"]
    print(f"{label}: {len(rows)} tests")
    print(f"  peak RSS after test 5 {fifth['peak_mib']:8.1f} MiB, at the end {last['peak_mib']:8.1f} MiB: "
          f"growth {growth:+.1%}")
    print(f"  RSS after gc, test 5  {fifth['rss_mib']:8.1f} MiB, at the end {last['rss_mib']:8.1f} MiB: "
          f"growth {settled:+.1%}")
    print(f"  alive after a test, max: GraphModules {max(r['graph_modules'] for r in rows)}, "
          f"recorded calls/states/checkers {max(r['captured'] for r in rows)}")
    return growth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-control", action="store_true", help="skip the unmarked control session")
    parser.add_argument("--rows", action="store_true", help="print the figures after every test")
    args = parser.parse_args()
    rows = run(marked=True)
    if args.rows:
        for i, r in enumerate(rows, 1):
            print(f"  {i:2d} {r['test']:22s} peak {r['peak_mib']:7.1f}  rss {r['rss_mib']:7.1f}  "
                  f"gm {r['graph_modules']}  captured {r['captured']}")
    print(f"P3 memory: one pytest session, {len(_zoo.MEMORY_MODELS)} torchvision models, 1x3x64x64")
    growth = summarize("marked (@pytest.mark.traceable)", rows)
    if not args.no_control:
        summarize("control (same tests, unmarked)", run(marked=False))
    print(f"P3 peak RSS growth, marked: {growth:+.1%}   target <= +10%")


if __name__ == "__main__":
    main()
