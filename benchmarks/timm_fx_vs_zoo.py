"""Zoo mode against timm's own FX test, on the same models, in the same run.

timm's ``tests/test_models.py`` (from timm's repository, unchanged) is run with
``-k test_model_forward_fx -n 2`` on a sample of its CI-selected models (every Nth of
the list its CI runs, ``GITHUB_ACTIONS`` set so its memory excludes apply); then
``pytest --fx-zoo=timm --fx-zoo-notrace -n 2`` on the same models (those timm's test
did not skip), then the same with ``--fx-isolate``; rounds interleaved. Prints each
run's wall time, the ratios to timm's, and whether the verdicts agree (timm passed
<-> ours passed).

    python benchmarks/timm_fx_vs_zoo.py --every 12 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TIMM_REPO = "/work/.mirror/huggingface+pytorch-image-models/repo"


def timm_tests(folder: Path, repo: str) -> Path:
    """timm's tests/test_models.py, byte for byte, in a folder of its own."""
    tests = folder / "timm_tests"
    (tests / "tests").mkdir(parents=True, exist_ok=True)
    source = subprocess.run(
        ["git", f"--git-dir={repo}", "show", "HEAD:tests/test_models.py"], capture_output=True, check=True
    ).stdout
    (tests / "tests" / "test_models.py").write_bytes(source)
    (tests / "tests" / "__init__.py").write_bytes(b"")
    return tests


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["GITHUB_ACTIONS"] = "true"  # timm's CI model list (its memory excludes)
    return out


def model_of(nodeid: str) -> str:
    params = nodeid.rpartition("[")[2].rstrip("]")
    return re.sub(r"^1-|-1$", "", params)


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env())
    return time.perf_counter() - start, proc


def junit_outcomes(path: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = model_of(case.get("name", ""))
        if case.find("skipped") is not None:
            out[name] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        else:
            out[name] = "passed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--repo", default=TIMM_REPO)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="timm-vs-zoo-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tests = timm_tests(out, args.repo)
    empty = out / "zoo_run"
    empty.mkdir(exist_ok=True)
    py = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    collected = subprocess.run(
        [*py, "tests/test_models.py", "-k", "test_model_forward_fx", "--collect-only"],
        cwd=tests, capture_output=True, text=True, env=env(),
    ).stdout.splitlines()
    ids = [line for line in collected if "test_model_forward_fx[" in line]
    sample = ids[:: args.every]
    print(f"timm's CI-selected FX models: {len(ids)}; sample (every {args.every}th): {len(sample)}")
    walls: dict[str, list[float]] = {"timm": [], "zoo": [], "zoo --fx-isolate": []}
    timm_verdicts: dict[str, str] = {}
    ours: dict[str, dict[str, str]] = {}
    for round_ in range(args.rounds):
        wall, proc = timed([*py, "-n", "2", f"--junitxml={out / 'timm.xml'}", *sample], tests)
        walls["timm"].append(wall)
        timm_verdicts = junit_outcomes(out / "timm.xml")
        (out / f"timm-{round_}.txt").write_text(proc.stdout + proc.stderr)
        checked = sorted(m for m, v in timm_verdicts.items() if v != "skipped")
        filters = [f"--fx-zoo-filter={m}" for m in checked]
        for label, extra in (("zoo", []), ("zoo --fx-isolate", ["--fx-isolate"])):
            report = out / f"{label.replace(' ', '')}-{round_}.json"
            wall, proc = timed(
                [*py, "-n", "2", "--fx-zoo=timm", "--fx-zoo-notrace", f"--fx-report={report}", *filters, *extra],
                empty,
            )
            walls[label].append(wall)
            (out / f"{label.replace(' ', '')}-{round_}.txt").write_text(proc.stdout + proc.stderr)
            ours[label] = {r["nodeid"].rpartition("::")[2]: r["status"] for r in json.loads(report.read_text())["results"]}
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.0f} s" for k, v in walls.items()))
    counts = {v: sum(1 for x in timm_verdicts.values() if x == v) for v in ("passed", "failed", "skipped")}
    print(f"timm's test: {counts}")
    base = statistics.median(walls["timm"])
    for label in ("zoo", "zoo --fx-isolate"):
        ratio = statistics.median(walls[label]) / base
        disagree = [
            f"{m}: timm {v}, ours {ours[label].get(m)}"
            for m, v in sorted(timm_verdicts.items())
            if v != "skipped" and (v == "passed") != (ours[label].get(m) == "passed")
        ]
        print(f"{label}: median {statistics.median(walls[label]):.0f} s, ratio to timm's {ratio:.2f}x, "
              f"verdicts agree on {len([m for m in timm_verdicts if timm_verdicts[m] != 'skipped']) - len(disagree)}"
              f" of {len([m for m in timm_verdicts if timm_verdicts[m] != 'skipped'])}")
        for line in disagree:
            print(f"  disagree: {line}")
    print(f"outputs: {out}")


if __name__ == "__main__":
    main()
