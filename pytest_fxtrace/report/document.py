"""The session's JSON report as one document (``report_json``, ``dump_json``), the torch
version it names, and a check's junit-xml properties: what a session writes of its
``CheckRecord``s for machines (``report/records.py`` holds the records themselves)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_fxtrace.dims import DimVerdict
from pytest_fxtrace.report import sites
from pytest_fxtrace.report.records import (
    REPORT_VERSION,
    CheckRecord,
    Unfinished,
    sort_records,
)


def report_json(
    records: Iterable[CheckRecord],
    torch_version: str,
    unfinished: Sequence[Unfinished] = (),
    durations: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The ``--fx-report`` document; ``unfinished`` appears only when a worker lost results.

    ``durations`` (node id -> seconds of the test's setup, call and teardown, as pytest
    measured them) gives ``"durations"``: one entry per checked test, in the records' order,
    what ``python -m pytest_fxtrace.merge --durations`` turns into pytest-split's file."""
    ordered = sort_records(records)
    document: dict[str, Any] = {
        "version": REPORT_VERSION,
        "torch": torch_version,
        "results": [record.to_json() for record in ordered],
    }
    timed = {r.nodeid: durations[r.nodeid] for r in ordered if durations and r.nodeid in durations}
    if timed:
        document["durations"] = timed
    if unfinished:
        document["unfinished"] = [dataclasses.asdict(u) for u in unfinished]
    return document


def loaded_torch_version() -> str | None:
    """``torch.__version__`` if this process has imported torch, else None."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    return str(version) if version is not None else None


def installed_torch_version() -> str:
    """What ``torch.__version__`` would say, found without importing torch (a session
    that checked no model never imports it): the literal in the installed
    ``torch/version.py``, else the distribution's version, else ``"not installed"``."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            tree = ast.parse(Path(folder, "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and target.id == "__version__"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                return value.value
    from importlib import metadata  # rarely needed; not worth its import time at start-up

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def dump_json(document: Mapping[str, Any]) -> str:
    """The report's text: indented, but each record's module tree on one line (indented, a
    tree's nodes would take a line per number)."""
    token = secrets.token_hex(8)  # in no string of the document
    trees: list[str] = []
    results = []
    for record in document.get("results") or ():
        modules = record.get("modules")
        if isinstance(modules, Mapping):
            record = {**record, "modules": f"{token}-{len(trees)}"}
            trees.append(json.dumps(modules, ensure_ascii=False, separators=(",", ":")))
        results.append(record)
    held = {**document, "results": results} if trees else document
    text = json.dumps(held, indent=2, ensure_ascii=False)
    if trees:
        text = re.sub(f'"{token}-(\\d+)"', lambda found: trees[int(found.group(1))], text)
    return text + "\n"


# -- junit-xml -------------------------------------------------------------------------


def junit_properties(record: CheckRecord) -> list[tuple[str, str]]:
    """``<property>`` pairs for one checked model; a test checking two models has two
    groups, each starting at ``fx_model``. A compile check adds one ``fx_graph_break`` per
    site and one ``fx_recompile`` per recompile (``report/sites.py`` words them); a check of
    dimensions asked dynamic (``dynamic=``) one ``fx_dim`` per dimension."""
    return [
        ("fx_model", record.model or ""),
        ("fx_backend", record.backend),
        ("fx_status", record.status),
        ("fx_category", record.category or ""),
        ("fx_location", record.where),
        ("fx_module", record.module),
        *(("fx_graph_break", sites.break_text(site)) for site in record.graph_breaks or ()),
        *(("fx_recompile", sites.recompile_text(item)) for item in record.recompiles or ()),
        *(("fx_dim", DimVerdict.from_json(item).line()) for item in record.dims or ()),
    ]


__all__ = ["dump_json", "installed_torch_version", "junit_properties", "loaded_torch_version", "report_json"]
