"""What the per-module statuses of a report (``localize.module_tree``) cost per check,
next to the trace itself: CPU time, three torchvision models (untrained, eval).

    python benchmarks/module_tree_cost.py
"""

from __future__ import annotations

import time

import torchvision

from pytest_fxtrace import symbolic_trace
from pytest_fxtrace.collection import module_tree


def main() -> None:
    for name in ("resnet18", "resnet50", "densenet121"):
        model = getattr(torchvision.models, name)().eval()
        start = time.process_time()
        gm = symbolic_trace(model)
        trace = time.process_time() - start
        reps = 20
        start = time.process_time()
        for _ in range(reps):
            tree = module_tree(model, graph_module=gm)
        cost = (time.process_time() - start) / reps
        print(
            f"{name}: {len(tree)} modules, module_tree {cost * 1e3:.2f} ms CPU, "
            f"symbolic_trace {trace * 1e3:.0f} ms CPU ({cost / trace:.1%})"
        )


if __name__ == "__main__":
    main()
