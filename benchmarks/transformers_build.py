"""How many architectures --fx-zoo=transformers builds and runs eagerly (not model-error),
and why the rest do not: each model built and given inputs as the zoo does
(``registries.build_case``: the shrunk config, the first input layout that runs), no backend.

    python benchmarks/transformers_build.py              # every architecture (~3 min on 2 cores)
    python benchmarks/transformers_build.py --every 10   # a sample

Prints the count built, the largest model's parameters, then the model-errors grouped by
reason (numbers masked), the list docs/zoo.md keeps.
"""

from __future__ import annotations

import argparse
import collections
import re
import signal
import time
from typing import Any

LIMIT = 120  # seconds a model may take to build and run once


def survey(every: int) -> list[dict[str, Any]]:
    import torch

    from pytest_fxtrace.zoo.registries import build_case
    from pytest_fxtrace.zoo.transformers_zoo import TransformersZoo

    torch.set_num_threads(1)
    zoo = TransformersZoo()

    def alarm(*_: Any) -> None:
        raise TimeoutError(f"over {LIMIT} s")

    signal.signal(signal.SIGALRM, alarm)
    rows = []
    for name in zoo.names()[::every]:
        start = time.perf_counter()
        signal.alarm(LIMIT)
        try:
            case = build_case(zoo, name)
            rows.append({"name": name, "params": sum(p.numel() for p in case.model.parameters())})
        except Exception as exc:
            rows.append({"name": name, "error": str(exc)})
        finally:
            signal.alarm(0)
        rows[-1]["seconds"] = time.perf_counter() - start
    return rows


def reason(error: str) -> str:
    """The error without the model's name and numbers: models failing alike group together."""
    text = re.sub(r"^\S+ could not be built: |^\S+: example_inputs failed: ", "", error)
    text = re.sub(r" \(config shrunk: .*", "", text)
    text = re.sub(r"^\w+\(config\) raised ", "model(config) raised ", text)
    return re.sub(r"\d+", "N", text)[:110]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1, help="every Nth architecture (a sample)")
    args = parser.parse_args()
    import transformers

    start = time.perf_counter()
    rows = survey(args.every)
    built = [r for r in rows if "params" in r]
    print(f"transformers {transformers.__version__}: {len(rows)} architectures, {len(built)} built "
          f"({len(built) / len(rows):.0%}), {time.perf_counter() - start:.0f} s")
    print(f"largest: {max(built, key=lambda r: r['params'])['name']} ({max(r['params'] for r in built):,} parameters)")
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for row in rows:
        if "error" in row:
            groups[reason(row["error"])].append(row["name"])
    for text, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"{len(names):3d}  {text}: {', '.join(names)}")


if __name__ == "__main__":
    main()
