"""``--fx-html``: one self-contained HTML page of a session's checks.

The page is a small script over one JSON document embedded in it (no network, no
graphviz): the counts per status and backend, a table of the checks filterable by
status, category and backend (the failing ones first: the script orders the rows, the
data keeps the JSON report's collection order), and per check the message, the failing
statement, the fix, the coverage and the model's module tree coloured traced / leaf /
failing / not reached (``TraceReport.modules``, carried by ``CheckRecord.modules``; each
distinct subtree stored once for the whole page, report/trees.py, and drawn when opened); a
compile check's graph-break sites and recompiles, and in its tree the submodules whose
``forward`` holds a break.

Everything from the user's code (test ids, model and module names, messages, source
lines, diffs) reaches the page only as JSON string data, which the script puts into
the page as text nodes (never as HTML); the embedded JSON escapes ``<``, ``>`` and
``&`` so nothing in it can close its ``<script>`` element.

The page's style and script are files of their own, ``page/report.css`` and
``page/report.js`` (package data), read once and inlined into every page.

Pytest-free and torch-free, like ``records.py``: the controller of an xdist run renders
the page from the records its workers sent.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND, backend_words
from pytest_fxtrace.report import sites
from pytest_fxtrace.report.records import CheckRecord, Unfinished, sort_records
from pytest_fxtrace.report.trees import STATUS_LETTERS, Nodes, Types
from pytest_fxtrace.types import STATUSES, ModuleNode, ModuleStatus


def record_key(record: CheckRecord) -> str:
    """The check's anchor in the page (``fx-report.html#<key>``, percent-encoded):
    the test's node id, and the model's index within the test after the first."""
    index = record.order[1]
    return record.nodeid if index == 0 else f"{record.nodeid}@{index}"


def record_backend(record: CheckRecord) -> str:
    """The record's backend; records from before backends existed were torch.fx's."""
    return str(getattr(record, "backend", None) or DEFAULT_BACKEND)


def _tree(modules: Sequence[ModuleNode], types: Types, breaks: Sequence[Mapping[str, Any]] = ()) -> list[list[Any]]:
    """``modules`` (pre-order) as compact rows: ``[depth, name, type, status, params]``,
    plus ``category, "path:line"`` for a failing module, and for a module whose ``forward``
    holds a graph break (``breaks``: a compile check's sites) that isn't the failing one,
    status ``"b"`` with its first site's category and line."""
    broken: dict[str, Mapping[str, Any]] = {}
    for site in breaks:
        broken.setdefault(str(site.get("module") or ""), site)
    rows = []
    for node in modules:
        path = node.path
        row: list[Any] = [
            path.count(".") + 1 if path else 0,
            path.rpartition(".")[2],
            types(node.type),
            STATUS_LETTERS[node.status],
            node.params,
        ]
        if node.status == ModuleStatus.FAILED:
            failure = node.failure
            where = failure.location if failure is not None else None
            row += [failure.category if failure is not None else None, f"{where[0]}:{where[1]}" if where else None]
        elif path in broken:
            row[3] = "b"
            row += [broken[path].get("category"), sites.where(broken[path]) or None]
        rows.append(row)
    return rows


def tree_rows(data: Mapping[str, Any], root: int) -> list[list[Any]]:
    """A check's module tree as the page's script draws it: ``_tree``'s rows, expanded
    from the page's shared nodes (``page_data(...)["nodes"]``) at ``root`` (its ``"tree"``)."""
    nodes, rows = data["nodes"], []
    todo: list[tuple[int, str, int]] = [(0, "", root)]
    while todo:
        depth, name, index = todo.pop()
        node = nodes[index]
        rows.append([depth, name, *node[:3], *node[4:]])
        children = node[3]
        todo.extend((depth + 1, children[i], children[i + 1]) for i in range(len(children) - 2, -1, -2))
    return rows


def _compile_data(record: CheckRecord) -> dict[str, Any]:
    """A compile check's graph-break sites and recompiles for the page (``{}``: another backend)."""
    if record.graph_breaks is None and record.recompiles is None:
        return {}
    return {
        "breaks": [
            {"where": sites.where(site) or None, "module": site.get("module") or "", "statement": site.get("statement"),
             "kind": sites.break_kind(site), "reason": site.get("reason") or ""}
            for site in record.graph_breaks or ()
        ],
        "recompiles": [
            {"reason": item.get("reason") or "", "where": sites.where(item) or None, "counted": item.get("counted", True)}
            for item in record.recompiles or ()
        ],
    }  # fmt: skip


def page_data(
    records: Iterable[CheckRecord],
    torch_version: str,
    unfinished: Sequence[Unfinished] = (),
    created: str = "",
) -> dict[str, Any]:
    """The document the page's script renders.

    Example::

        page_data(records, "2.14.1")["checks"][0]["status"]  # "passed"
    """
    types, nodes = Types(), Nodes()
    checks = []
    for record in sort_records(records):
        tree = None
        if record.modules:  # its root among the page's shared nodes (report/trees.py)
            rows = _tree(record.modules, types, record.graph_breaks or ())
            tree = nodes.share((row[0], row[1], row[2:5], row[5:]) for row in rows)
        suggestion = record.suggestion
        checks.append(
            {
                "key": record_key(record),
                "test": record.nodeid,
                "model": record.model,
                "backend": record_backend(record),
                "status": record.status,
                "category": record.category,
                "where": record.where or None,
                "source": record.source,
                "module": record.module,
                "moduleType": record.module_type,
                "coverage": record.coverage,
                "nodes": record.nodes,
                "fix": (
                    {
                        "text": str(suggestion.get("text", "")),
                        "verified": bool(suggestion.get("verified")),
                        "partial": bool(suggestion.get("partial")),  # verified, leaves some: the check still fails
                        **({"patch": str(suggestion["patch"])} if suggestion.get("patch") else {}),  # a verified patch's diff
                        **({"patchText": str(suggestion["patch_text"])} if suggestion.get("patch_text") else {}),  # beside a fix
                    }
                    if suggestion
                    else None
                ),
                "text": record.text,
                "seconds": record.trace_seconds,
                "past": _past(record_backend(record)),  # "traced", "exported", "compiled"
                "tree": tree,
                **_compile_data(record),
                **({"dims": [{**d, "where": sites.where(d) or None} for d in record.dims]} if record.dims else {}),
            }
        )
    return {
        "torch": torch_version,
        "created": created,
        "statuses": list(STATUSES),
        "types": types.names,
        "nodes": nodes.nodes,
        "checks": checks,
        "unfinished": [{"test": u.nodeid, "reason": u.reason} for u in unfinished],
    }


@functools.cache
def _past(backend: str) -> str:
    """The verb of a backend's capture, once per backend a page shows."""
    return backend_words(backend.partition(" ")[0]).past


def script_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>`` or
    ``&`` (so no ``</script>``, no ``<!--``), no JavaScript line separators."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)  # only ever inside JSON strings
    return text


def render_html(
    records: Iterable[CheckRecord],
    torch_version: str,
    unfinished: Sequence[Unfinished] = (),
    created: str = "",
) -> str:
    """The whole page.

    Example::

        write_atomic("fx-report.html", render_html(records, "2.14.1"))
    """
    data = page_data(records, torch_version, unfinished, created)
    failing = sum(1 for c in data["checks"] if c["status"] not in ("passed", "xfailed"))
    title = f"pytest-fxtrace: {len(data['checks'])} checks, {failing} failing"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        # the page may run its own inline script and style, and load nothing
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{html.escape(title)}</title>\n<style>{_page_file('report.css')}</style>\n</head>\n<body>\n"
        '<noscript><p class="noscript">This report is drawn by a small inline script; '
        "allow JavaScript for this file (the same data is in the --fx-report JSON).</p></noscript>\n"
        '<div id="app"></div>\n'
        f'<script type="application/json" id="fx-data">{script_json(data)}</script>\n'
        f"<script>{_page_file('report.js')}</script>\n</body>\n</html>\n"
    )


@functools.cache
def _page_file(name: str) -> str:
    """The page's style or script (``page/<name>``, shipped with the package)."""
    return resources.files(__package__).joinpath("page").joinpath(name).read_text(encoding="utf-8")
