"""How many architectures --fx-zoo=transformers builds and runs eagerly (not model-error),
and why the rest do not: each model built and given inputs as the zoo does
(``registries.build_case``: the shrunk config, the first input layout that runs), no backend.

    python benchmarks/transformers_build.py              # every architecture (7-20 min on 2 cores)
    python benchmarks/transformers_build.py --every 10   # a sample
    python benchmarks/transformers_build.py --only MimiModel,swin   # by class or model type

The figures docs/zoo.md keeps are measured in tox's ``zoo-transformers5`` environment
(transformers 5.24.0 with Pillow, timm and scipy, as transformers' CI installs them):
``.bootstrap/bin/tox -e zoo-transformers5 --notest``, then
``.tox/zoo-transformers5/bin/python benchmarks/transformers_build.py`` (or
``tox -e zoo-transformers5 -- --only ...``).

Prints the count built, the largest model's parameters, then the model-errors grouped by
reason (numbers masked), the list docs/zoo.md keeps.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

LIMIT = 120  # seconds a model may take to build and run once


def survey(every: int, only: list[str]) -> list[dict[str, Any]]:
    import torch

    from pytest_fxtrace.zoo.registries import build_case
    from pytest_fxtrace.zoo.transformers_zoo import TransformersZoo

    torch.set_num_threads(1)
    zoo = TransformersZoo()

    def alarm(*_: Any) -> None:
        raise TimeoutError(f"over {LIMIT} s")

    signal.signal(signal.SIGALRM, alarm)
    rows = []
    names = [n for n in zoo.names() if n in only or zoo.model_type(n) in only] if only else zoo.names()
    for name in names[::every]:
        start = time.perf_counter()
        signal.alarm(LIMIT)
        try:
            case = build_case(zoo, name)
            level = zoo.shrink_level(name)
            rows.append({"name": name, "params": sum(p.numel() for p in case.model.parameters()), "level": level})
        except Exception as exc:
            rows.append({"name": name, "error": str(exc)})
        finally:
            signal.alarm(0)
        rows[-1]["seconds"] = time.perf_counter() - start
    return rows


def reason(error: str) -> str:
    """The error without the model's name and numbers: models failing alike group together."""
    text = re.sub(r"^\S+ could not be built: |^\S+: example_inputs failed: ", "", error)
    text = re.sub(r" \(config shrunk: .*| \[gentler shrinks failed too: .*", "", text)
    text = re.sub(r"^\w+\(config\) raised ", "model(config) raised ", text)
    return re.sub(r"\d+", "N", text)[:110]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1, help="every Nth architecture (a sample)")
    parser.add_argument("--only", default="", help="these classes or model types, comma-separated")
    parser.add_argument("--json", default="", help="write each model's row (params and level, or error) here")
    args = parser.parse_args()
    import transformers

    start = time.perf_counter()
    rows = survey(args.every, [n for n in args.only.split(",") if n])
    built = [r for r in rows if "params" in r]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"transformers {transformers.__version__}: {len(rows)} architectures, {len(built)} built "
          f"({len(built) / max(len(rows), 1):.0%}), {time.perf_counter() - start:.0f} s")
    if built:
        show_built(built)
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for row in rows:
        if "error" in row:
            groups[reason(row["error"])].append(row["name"])
    for text, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"{len(names):3d}  {text}: {', '.join(names)}")


def show_built(built: list[dict[str, Any]]) -> None:
    """The largest model, and how many each shrink level built (those past the first by name)."""
    from pytest_fxtrace.zoo.shrink import LEVELS

    largest = max(built, key=lambda r: r["params"])
    print(f"largest: {largest['name']} ({largest['params']:,} parameters)")
    levels = collections.Counter(r["level"] for r in built)
    print("shrink level of those built: " + ", ".join(f"{lv.name} {levels[lv.name]}" for lv in LEVELS if levels[lv.name]))
    for row in built:
        if row["level"] != LEVELS[0].name:
            print(f"     {row['name']}: {row['level']} ({row['params']:,} parameters)")


if __name__ == "__main__":
    main()
