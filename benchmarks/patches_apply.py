"""Every ``.patch`` a timm zoo run wrote (``--fx-patch-dir``), applied with ``patch -p1`` to a
pristine copy of timm, and each model it was written for then traced with plain
``torch.fx.symbolic_trace`` (no plugin) and compared with eager on the zoo's input (issue 42).

Identical patches (68 models share timm's padding helper) are applied once, and their models
checked in one interpreter whose ``timm`` is the patched copy; timm as installed is never
written. Prints, per distinct patch, the file it changes, its models and how many traced and
matched.

    pytest --fx-zoo=timm --fx-zoo-filter=... --fx-patch-dir=patches   # first: the patches
    python benchmarks/patches_apply.py patches [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHECK = """
import sys, torch, timm
from pytest_fxtrace.zoo.registries import TimmZoo
assert timm.__file__.startswith(sys.argv[1]), timm.__file__
zoo = TimmZoo()
for name in sys.argv[2:]:
    model = zoo.build(name).eval()
    torch.manual_seed(0)
    (x,) = zoo.example_inputs(name, model)
    try:
        traced = torch.fx.symbolic_trace(model)
        with torch.no_grad():
            torch.testing.assert_close(traced(x), model(x))
        print("ok", name, flush=True)
    except Exception as exc:
        print("failed", name, type(exc).__name__, str(exc).splitlines()[0][:160], flush=True)
"""


def model_of(patch: Path) -> str:
    """``zoo_timm_tf_efficientnet_b0.EfficientNet.fx.patch`` -> ``tf_efficientnet_b0``."""
    return patch.name.removeprefix("zoo_timm_").split(".")[0]


def check(text: str, names: list[str], timm_dir: Path) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="pristine-timm-") as work:
        shutil.copytree(timm_dir, Path(work) / "timm", ignore=shutil.ignore_patterns("__pycache__"))
        applied = subprocess.run(["patch", "-p1", "-s"], input=text, cwd=work, capture_output=True, text=True)
        if applied.returncode != 0:
            return [f"failed {name} patch -p1: {applied.stdout}{applied.stderr}".strip() for name in names]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([work, str(Path(__file__).resolve().parents[1])]), OMP_NUM_THREADS="1")
        run = subprocess.run([sys.executable, "-c", CHECK, work, *names], cwd=work, env=env, capture_output=True, text=True)
        lines = [line for line in run.stdout.splitlines() if line.startswith(("ok ", "failed "))]
        done = {line.split()[1] for line in lines}
        return lines + [f"failed {name} the interpreter ended: {run.stderr.strip().splitlines()[-1:]}" for name in names if name not in done]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import timm

    timm_dir = Path(timm.__file__).parent
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for patch in sorted(args.folder.glob("zoo_timm_*.patch")):
        groups[patch.read_text()].append(model_of(patch))
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        results = dict(zip(groups, pool.map(lambda item: check(item[0], item[1], timm_dir), groups.items()), strict=True))
    total = passed = 0
    for text, names in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines = results[text]
        ok = sum(line.startswith("ok ") for line in lines)
        total, passed = total + len(names), passed + ok
        changed = text.splitlines()[0].removeprefix("--- a/")
        print(f"{changed}: {ok} of {len(names)} traced with plain torch.fx and matched eager")
        for line in lines:
            if not line.startswith("ok "):
                print(f"  {line}")
    print(f"all: {passed} of {total} models, {len(groups)} distinct patches")


if __name__ == "__main__":
    main()
