"""Size of the ``--fx-html`` page for 50 real models (the issue's bound: <= 1.5 MB).

The 50 timm families of ``timm_survey.py`` (random weights), each traced with
``pytest_fxtrace.symbolic_trace``; a model that does not trace is localized with
``recursive_trace``. Each gives one record with its module tree, as a check of a
session writing ``--fx-html`` does, plus a failing message of the usual length; the
page is rendered from the 50 records and its size printed (and written with --out).

    python benchmarks/html_size.py [--models a,b,c] [--out fx-report.html]
"""

from __future__ import annotations

import argparse
import time
import warnings

import timm
import torch
from timm_survey import FAMILIES

import pytest_fxtrace
from pytest_fxtrace.collection import module_tree
from pytest_fxtrace.report.html import render_html
from pytest_fxtrace.report.records import CheckRecord, write_atomic


def record_of(index: int, name: str) -> CheckRecord:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    dotted = f"{type(model).__module__}.{type(model).__qualname__}"
    nodeid = f"tests/test_zoo.py::test_zoo[{name}]"
    try:
        gm = pytest_fxtrace.symbolic_trace(model)
    except Exception as exc:  # untraceable: localize, as a failing check does
        collection = pytest_fxtrace.recursive_trace(model)
        tree = module_tree(model, collection)
        deepest = collection.deepest_failures()
        first = deepest[0] if deepest else collection.records[""]
        diag = first.diagnosis
        message = (
            f"{type(model).__name__}.{first.path} ({first.type_name}) is not traceable: {diag.reason if diag else exc}\n"
            f"  error: {type(exc).__name__}: {str(exc)[:300]}\n"
            f"  category: {diag.category if diag else 'other'}\n"
            f"  traced: {collection.summary()}\n"
            f"  per-module:\n" + "\n".join("    " + line for line in collection.table(limit=60).splitlines())
        )
        location = (diag.location.path, diag.location.line) if diag and diag.location else None
        return CheckRecord(
            nodeid=nodeid, model=dotted, status="untraceable", category=diag.category if diag else "other",
            location=location, module=first.path, coverage=collection.coverage, modules=tree,
            module_type=first.type_name, text=message, source=diag.location.source if location else None,
            suggestion={"text": f"@pytest.mark.traceable(leaf_modules=[{first.type_name!r}])", "verified": True,
                        "options": {"leaf_modules": [first.type_name]}},
            order=(index, 0),
        )  # fmt: skip
    return CheckRecord(
        nodeid=nodeid, model=dotted, status="passed", module="", nodes=len(gm.graph.nodes), coverage=1.0,
        modules=module_tree(model, graph_module=gm), order=(index, 0),
        text=f"{type(model).__name__} traced ({len(gm.graph.nodes)} nodes) and matched eager on 1 recorded call",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=FAMILIES, help="comma-separated timm model names")
    parser.add_argument("--out", default=None, help="also write the page here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    names = args.models.split(",")
    start = time.perf_counter()
    records = [record_of(i, name) for i, name in enumerate(names)]
    page = render_html(records, torch.__version__, created="(benchmark)")
    size = len(page.encode())
    modules = sum(len(r.modules or ()) for r in records)
    failing = sum(r.status != "passed" for r in records)
    print(f"{len(records)} models ({failing} untraceable), {modules} modules in all")
    print(f"HTML page: {size} bytes = {size / 1e6:.3f} MB ({size / len(records) / 1e3:.1f} kB per model); bound 1.5 MB")
    print(f"(built in {time.perf_counter() - start:.0f} s)")
    if args.out:
        write_atomic(args.out, page)


if __name__ == "__main__":
    main()
