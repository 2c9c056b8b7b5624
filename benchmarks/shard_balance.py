"""How evenly shards share a zoo: pytest-shard's hash against pytest-split's durations.

Reads the ``"durations"`` of a ``--fx-report`` (each checked test's seconds; e.g.
``benchmarks/zoo_full.py timm --every 20``'s report, or the merged report of a whole run)
and splits its tests into ``--shards`` groups three ways: pytest-shard's (sha256 of the
node id), and pytest-split's two algorithms fed those durations (``least_duration``,
``duration_based_chunks``), each with its own code. Prints each group's summed seconds and
longest / mean: the figure the issue bounds at 1.10. The sums are the durations the
groups were cut from, so this predicts a shard's time; it does not run one. With
``--resample N`` the tests' durations are drawn N times (with replacement, seeded) under
new node ids: a registry of N models whose costs are distributed as the sample's.

    python benchmarks/shard_balance.py /tmp/zoo-timm-XXXX/report.json --shards 4 --resample 1281
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
from pathlib import Path
from types import SimpleNamespace

from pytest_split import algorithms


def hash_groups(durations: dict[str, float], shards: int) -> list[float]:
    """pytest-shard's split: a test goes to sha256(node id) % shards."""
    sums = [0.0] * shards
    for nodeid, seconds in durations.items():
        sums[int.from_bytes(hashlib.sha256(nodeid.encode()).digest(), "little") % shards] += seconds
    return sums


def split_groups(durations: dict[str, float], shards: int, algorithm: str) -> list[float]:
    """pytest-split's split of the tests in collection order (sorted node ids, as zoo items are)."""
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in sorted(durations)]
    groups = algorithms.Algorithms[algorithm].value(shards, items, durations)
    return [sum(durations[item.nodeid] for item in group.selected) for group in groups]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--resample", type=int, default=0, help="draw this many tests from the report's durations")
    args = parser.parse_args()
    durations = json.loads(args.report.read_text(encoding="utf-8"))["durations"]
    if args.resample:
        rng = random.Random(0)
        values = list(durations.values())
        durations = {f"zoo/timm::model_{i:04d}": rng.choice(values) for i in range(args.resample)}
    print(f"{len(durations)} tests, {sum(durations.values()):.0f} s in all, {args.shards} shards")
    splits = {
        "pytest-shard (hash)": hash_groups(durations, args.shards),
        "pytest-split least_duration": split_groups(durations, args.shards, "least_duration"),
        "pytest-split duration_based_chunks": split_groups(durations, args.shards, "duration_based_chunks"),
    }
    for name, sums in splits.items():
        ratio = max(sums) / statistics.mean(sums)
        print(f"  {name}: {' / '.join(f'{s:.0f}' for s in sums)} s, longest / mean {ratio:.3f}")


if __name__ == "__main__":
    main()
