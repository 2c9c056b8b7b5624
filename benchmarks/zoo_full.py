"""A whole registry through zoo mode: ``pytest --fx-zoo=SOURCE -n 2 --fx-isolate`` in an
empty directory, as a user would run it.

Prints the wall time, models per minute, the peak resident memory of each worker's
checking process (from the isolate summary line) and the verdict counts, and keeps the
JSON report and the output under ``--out``.

    python benchmarks/zoo_full.py torchvision
    python benchmarks/zoo_full.py timm      # timm's CI memory excludes applied (~30+ min on 2 cores)
    python benchmarks/zoo_full.py timm --out shard0 --num-shards=3 --shard-id=0   # one of 3 shards
    python benchmarks/zoo_full.py timm --every 20 --in-process   # a sample: every 20th model
    python benchmarks/zoo_full.py transformers --fx-backend=export --every 10   # every architecture's 10th

Also writes the HTML page (``--fx-html``) beside the report and prints both sizes, per
record too, to extrapolate a sample's to the whole registry.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# timm's tests/test_models.py excludes these on GitHub's runners for memory
TIMM_EXCLUDES = (
    "*efficientnet_l2*", "*resnext101_32x48d", "*in21k", "*152x4_bitm", "*101x3_bitm", "*50x3_bitm",
    "*nfnet_f3*", "*nfnet_f4*", "*nfnet_f5*", "*nfnet_f6*", "*nfnet_f7*", "*efficientnetv2_xl*",
    "*resnetrs350*", "*resnetrs420*", "xcit_large_24_p8*", "*huge*", "*giant*", "*gigantic*",
    "*enormous*", "maxvit_xlarge*", "regnet*1280", "regnet*2560", "*_1b_*", "*_3b_*", "*_7b_*",
)


def sample(source: str, excludes: tuple[str, ...], every: int) -> list[str]:
    """Every ``every``-th model of the registry, as zoo mode selects them."""
    from pytest_fxtrace.zoo.registries import load_registry, select

    return select(list(load_registry(source).names()), (), excludes)[::every]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source", choices=("torchvision", "timm", "transformers"))
    parser.add_argument("--workers", default="2")
    parser.add_argument("--timeout", default="300", help="--fx-timeout per model")
    parser.add_argument("--max-rss", default="8", help="--fx-max-rss (GB)")
    parser.add_argument("--out", default=None, help="folder for the report and output (default: a temp dir)")
    parser.add_argument("--every", type=int, default=1, help="check every Nth model of the registry (a sample)")
    parser.add_argument("--in-process", action="store_true", help="check in pytest's processes (no --fx-isolate)")
    # anything else is handed to pytest, e.g. --num-shards=3 --shard-id=0 (pytest-shard)
    args, extra = parser.parse_known_args()
    out = Path(args.out or tempfile.mkdtemp(prefix=f"zoo-{args.source}-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="zoo-empty-"))  # no test file, no conftest
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--fx-zoo={args.source}",
        "-n", args.workers, f"--fx-timeout={args.timeout}",
        f"--fx-report={out / 'report.json'}", f"--fx-html={out / 'report.html'}", "-q", *extra,
    ]
    if not args.in_process:
        command += ["--fx-isolate", f"--fx-max-rss={args.max_rss}"]
    excludes = TIMM_EXCLUDES if args.source == "timm" else ()
    command += [f"--fx-zoo-exclude={glob}" for glob in excludes]
    if args.every > 1:
        command.append(f"--fx-zoo-filter={','.join(sample(args.source, excludes, args.every))}")
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=run_dir, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - start
    (out / "output.txt").write_text(proc.stdout + proc.stderr)
    results = json.loads((out / "report.json").read_text())["results"]
    counts = collections.Counter(r["status"] for r in results)
    isolate_line = next((line for line in proc.stdout.splitlines() if line.startswith("fxtrace isolated")), "")
    print(f"command: {' '.join(command[2:])}")
    print(f"models: {len(results)}, wall {wall:.0f} s, {len(results) / wall * 60:.1f} models/min")
    print(f"verdicts: {dict(sorted(counts.items()))}")
    categories = collections.Counter(r["category"] for r in results if r["status"] not in ("passed", "model-error"))
    print(f"failing by category: {dict(categories.most_common())}")
    for line in patch_share(results):
        print(line)
    print(isolate_line)
    for name in ("report.json", "report.html"):
        size = (out / name).stat().st_size
        print(f"{name}: {size / 1e6:.2f} MB, {size / max(1, len(results)) / 1e3:.1f} kB per record")
    for record in results:
        if record["status"] not in ("passed",):
            print(f"  {record['nodeid']}: {record['status']} {record['category'] or ''}")
    print(f"report and output: {out}")


def patch_share(results: list[dict]) -> list[str]:
    """The share of failing records whose fix carries a verified patch (``suggestion.patch``),
    per category and backend, and the patched statements by file and line (issue 42)."""
    failing = [r for r in results if r["status"] not in ("passed", "model-error", "crashed", "timeout")]
    totals = collections.Counter((r["category"], r["backend"]) for r in failing)
    patched = [r for r in failing if (r.get("suggestion") or {}).get("patch")]
    counts = collections.Counter((r["category"], r["backend"]) for r in patched)
    lines = [f"verified patches: {len(patched)} of {len(failing)} failing records"]
    lines += [f"  {category} / {backend}: {counts[(category, backend)]} of {n}" for (category, backend), n in totals.most_common()]
    sites = collections.Counter(f"{r['location']['path'].rpartition('site-packages/')[2]}:{r['location']['line']}" for r in patched)
    lines += [f"  patched at {site}: {n}" for site, n in sites.most_common()]
    return lines


if __name__ == "__main__":
    main()
