"""A zoo run's verdicts per model family, as a Markdown table: what the README's tables are
made from.

    python benchmarks/zoo_full.py torchvision --fx-backend=compile --out tv-compile
    python benchmarks/zoo_families.py tv-compile/report.json

Families are torchvision's (``torchvision.models.<family>``); for another registry every
model is in one family. Per family: models, verdicts, the range of graph-break sites and
counted recompiles of a compile check, and the statements that break most often
(``file:line``, how many models).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any


def family_of(nodeid: str) -> str:
    source, _, name = nodeid.partition("::")
    if source.endswith("torchvision"):
        from pytest_fxtrace.zoo.registries import load_registry

        return load_registry("torchvision").family(name) or "classification"
    return source


def _span(values: list[int]) -> str:
    return f"{min(values)}" if min(values) == max(values) else f"{min(values)}-{max(values)}"


def _short(path: str | None) -> str:
    parts = (path or "?").split("/")
    return "/".join(parts[parts.index("site-packages") + 1 :] if "site-packages" in parts else parts[-2:])


def row(family: str, records: list[dict[str, Any]], top: int) -> str:
    verdicts = collections.Counter(r["status"] for r in records)
    sites = [len(r.get("graph_breaks") or []) for r in records]
    recompiles = [len(r.get("recompiles") or []) for r in records]
    where: collections.Counter[str] = collections.Counter()
    for r in records:
        where.update({f"`{_short(s['path'])}:{s['line']}`" for s in r.get("graph_breaks") or []})
    common = ", ".join(f"{site} ({n})" for site, n in where.most_common(top))
    shown = ", ".join(f"{n} {status}" for status, n in verdicts.most_common())
    return f"| {family} | {len(records)} | {shown} | {_span(sites)} | {_span(recompiles)} | {common} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=4, help="the breaking statements to name per family")
    args = parser.parse_args()
    results = json.loads(args.report.read_text())["results"]
    families: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for record in results:
        families[family_of(record["nodeid"])].append(record)
    print("| family | models | verdicts | break sites | recompiles | breaking statements (models) |")
    print("|---|---|---|---|---|---|")
    for family, records in sorted(families.items(), key=lambda item: -len(item[1])):
        print(row(family, records, args.top))


if __name__ == "__main__":
    main()
