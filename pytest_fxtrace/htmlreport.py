"""``--fx-html``: one self-contained HTML page of a session's checks.

The page is a small script over one JSON document embedded in it (no network, no
graphviz): the counts per status and backend, a table of the checks filterable by
status, category and backend, and per check the message, the failing statement, the
fix, the coverage and the model's module tree coloured traced / leaf / failing / not
reached (``TraceReport.modules``, carried by ``CheckRecord.modules``).

Everything from the user's code (test ids, model and module names, messages, source
lines, diffs) reaches the page only as JSON string data, which the script puts into
the page as text nodes (never as HTML); the embedded JSON escapes ``<``, ``>`` and
``&`` so nothing in it can close its ``<script>`` element.

Pytest-free and torch-free, like ``report.py``: the controller of an xdist run renders
the page from the records its workers sent.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from .report import CheckRecord, Unfinished, sort_records
from .types import STATUSES

# a module tree's statuses as one letter each (types.MODULE_STATUSES); the page says
# "failing" for failed and "not reached" for unvisited and unused
_TREE_STATUS = {"traced": "t", "leaf": "l", "failed": "f", "unvisited": "u", "unused": "n"}


def record_key(record: CheckRecord) -> str:
    """The check's anchor in the page (``fx-report.html#<key>``, percent-encoded):
    the test's node id, and the model's index within the test after the first."""
    index = record.order[1]
    return record.nodeid if index == 0 else f"{record.nodeid}@{index}"


def record_backend(record: CheckRecord) -> str:
    """The record's backend; records from before backends existed were torch.fx's."""
    return str(getattr(record, "backend", None) or "fx")


class _Types:
    """Class names, each stored once for the whole page."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        index = self._index.get(name)
        if index is None:
            index = self._index[name] = len(self.names)
            self.names.append(name)
        return index


def _tree(modules: Sequence[dict[str, Any]], types: _Types) -> list[list[Any]]:
    """``modules`` (pre-order) as compact rows: ``[depth, name, type, status, params]``,
    plus ``category, "path:line"`` for a failing module."""
    rows = []
    for entry in modules:
        path = str(entry.get("path", ""))
        row: list[Any] = [
            path.count(".") + 1 if path else 0,
            path.rpartition(".")[2],
            types(str(entry.get("type", ""))),
            _TREE_STATUS.get(str(entry.get("status")), "u"),
            int(entry.get("params") or 0),
        ]
        if entry.get("status") == "failed":
            where = entry.get("location")
            row += [entry.get("category"), f"{where['path']}:{where['line']}" if where else None]
        rows.append(row)
    return rows


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
    types = _Types()
    trees: list[list[list[Any]]] = []
    tree_index: dict[str, int] = {}
    checks = []
    for record in sort_records(records):
        tree = None
        if record.modules:
            rows = _tree(record.modules, types)
            key = json.dumps(rows, separators=(",", ":"))
            tree = tree_index.get(key)
            if tree is None:  # a model checked in many tests is stored once
                tree = tree_index[key] = len(trees)
                trees.append(rows)
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
                    {"text": str(suggestion.get("text", "")), "verified": bool(suggestion.get("verified"))}
                    if suggestion
                    else None
                ),
                "text": record.text,
                "seconds": record.trace_seconds,
                "tree": tree,
            }
        )
    return {
        "torch": torch_version,
        "created": created,
        "statuses": list(STATUSES),
        "types": types.names,
        "trees": trees,
        "checks": checks,
        "unfinished": [{"test": u.nodeid, "reason": u.reason} for u in unfinished],
    }


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
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        '<noscript><p class="noscript">This report is drawn by a small inline script; '
        "allow JavaScript for this file (the same data is in the --fx-report JSON).</p></noscript>\n"
        '<div id="app"></div>\n'
        f'<script type="application/json" id="fx-data">{script_json(data)}</script>\n'
        f"<script>{_JS}</script>\n</body>\n</html>\n"
    )


_CSS = r"""
:root{--ok:#1a7f37;--ok-bg:#dafbe1;--bad:#cf222e;--bad-bg:#ffebe9;--xf:#9a6700;--xf-bg:#fff8c5;
--leaf:#0969da;--leaf-bg:#ddf4ff;--none:#6e7781;--none-bg:#eef1f4;--line:#d0d7de;--muted:#57606a;--fg:#1f2328}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);background:#f6f8fa}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,"SF Mono",Menlo,Consolas,monospace;font-size:12.5px}
header{background:#fff;border-bottom:1px solid var(--line);padding:16px 24px 12px}
h1{font-size:20px;margin:0 0 2px}
.meta{color:var(--muted);font-size:13px}
.counts{display:flex;flex-wrap:wrap;gap:8px;margin-top:12px}
.count{border:1px solid var(--line);border-radius:8px;padding:6px 12px;background:#fff;cursor:pointer;min-width:92px;text-align:left;font:inherit}
.count b{display:block;font-size:20px;line-height:1.2}
.count.passed b{color:var(--ok)}.count.bad b{color:var(--bad)}.count.xfailed b{color:var(--xf)}
.count:hover{border-color:#8c959f}
.backends{margin-top:8px;color:var(--muted);font-size:13px}
main{padding:12px 24px 40px}
.filters{display:flex;flex-wrap:wrap;align-items:center;gap:6px 14px;background:#fff;border:1px solid var(--line);
border-radius:8px;padding:8px 12px;position:sticky;top:0;z-index:2}
.filters label{white-space:nowrap;cursor:pointer}
.filters select,.filters input[type=search]{font:inherit;padding:3px 6px;border:1px solid var(--line);border-radius:6px}
.filters input[type=search]{min-width:220px}
.shown{margin-left:auto;color:var(--muted)}
.warn{background:var(--xf-bg);border:1px solid #d4a72c;border-radius:8px;padding:8px 12px;margin:0 0 12px}
table.checks{width:100%;border-collapse:separate;border-spacing:0;margin-top:10px;background:#fff;border:1px solid var(--line);border-radius:8px}
.checks th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em;
padding:8px 10px;border-bottom:1px solid var(--line);background:#fff}
.checks td{padding:7px 10px;border-top:1px solid #eaeef2;vertical-align:top}
.checks tr.row{cursor:pointer}.checks tr.row:hover td,.checks tr.row:hover+tr.subrow td{background:#f6f8fa}
.checks tr.row.open td{background:#f0f6ff}
.test{min-width:240px;overflow-wrap:anywhere}
.toggle{border:0;background:none;padding:0 4px 0 0;cursor:pointer;color:var(--muted);font:inherit;width:16px}
.status{display:inline-block;border-radius:12px;padding:0 8px;font-size:12px;font-weight:600;white-space:nowrap}
.status.passed{color:var(--ok);background:var(--ok-bg)}.status.bad{color:var(--bad);background:var(--bad-bg)}
.status.xfailed{color:var(--xf);background:var(--xf-bg)}
.checks tr.subrow td{border-top:0;padding-top:0;cursor:pointer}
td.sub{color:var(--muted);font-size:13px}
td.sub>div{margin:1px 0}
.sub code{color:var(--fg);background:#f6f8fa;border:1px solid #eaeef2;border-radius:4px;padding:0 4px;white-space:pre-wrap}
.sub code.src{background:var(--bad-bg);border-color:#ffcecb}
.sub .fixline code{border-color:#b6e3c0;background:#f0fff4}
.checks tr.row.open+tr.subrow td{background:#f0f6ff}
td.nw{white-space:nowrap}
td.loc{white-space:nowrap;max-width:240px;overflow:hidden;text-overflow:ellipsis}
.cov{display:inline-block;width:56px;height:6px;border-radius:3px;background:var(--none-bg);vertical-align:middle;margin-right:6px;overflow:hidden}
.cov i{display:block;height:100%;background:var(--ok)}
tr.detail>td{background:#fbfcfd;padding:12px 16px 16px}
tr.detail>td>div{width:0;min-width:100%}
.sides{display:flex;gap:16px;align-items:flex-start}.sides>.side{flex:1 1 0;min-width:0}
.side h3{margin:0 0 6px;font-size:14px}
.cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:0 12px;align-items:start}
.cols.one{grid-template-columns:minmax(0,1fr)}
@media (max-width:1000px){.cols{grid-template-columns:minmax(0,1fr)}}
.box{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 12px;margin:0 0 10px}
.box h4{margin:0 0 6px;font-size:12px;text-transform:uppercase;letter-spacing:.03em;color:var(--muted)}
pre{margin:0;white-space:pre-wrap;word-break:break-word}
pre.fix{background:#f0fff4;border:1px solid #b6e3c0;border-radius:6px;padding:8px 10px}
pre.fix.unverified{background:#f6f8fa;border-color:var(--line)}
.copy{float:right;font:inherit;font-size:12px;border:1px solid var(--line);background:#fff;border-radius:6px;padding:1px 8px;cursor:pointer}
.badge{font-size:11px;font-weight:600;border-radius:10px;padding:0 6px;margin-left:6px}
.badge.ok{color:var(--ok);background:var(--ok-bg)}.badge.no{color:var(--muted);background:var(--none-bg)}
.stmt{display:block;background:var(--bad-bg);border-left:3px solid var(--bad);padding:4px 8px;border-radius:4px;margin-top:4px}
.diff-add{color:#116329;background:#e6ffec}.diff-del{color:#82071e;background:#ffebe9}.diff-hunk{color:#0550ae}
.legend{display:flex;flex-wrap:wrap;gap:10px;font-size:12px;color:var(--muted);margin-bottom:6px;align-items:center}
.legend .tools{margin-left:auto}
.legend button{font:inherit;font-size:12px;border:1px solid var(--line);background:#fff;border-radius:6px;padding:0 8px;cursor:pointer}
.dot{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:4px;vertical-align:-1px}
.dot.t{background:var(--ok)}.dot.l{background:var(--leaf)}.dot.f{background:var(--bad)}.dot.u,.dot.n{background:#afb8c1}
ul.tree{list-style:none;margin:0;padding-left:18px}
.tree-root>ul.tree{padding-left:0}
.node{display:flex;flex-wrap:wrap;align-items:baseline;gap:2px 8px;padding:1px 6px;border-radius:4px;border-left:3px solid transparent}
.node.t{border-left-color:var(--ok)}.node.l{border-left-color:var(--leaf);background:#f5faff}
.node.f{border-left-color:var(--bad);background:var(--bad-bg)}.node.u,.node.n{border-left-color:#afb8c1;color:var(--none)}
.node.c{border-left-color:#d0d7de}.dot.c{background:#fff;border:2px solid #afb8c1}
.node .tw{width:14px;border:0;background:none;padding:0;cursor:pointer;color:var(--muted);font:inherit}
.node .tw:disabled{cursor:default}
.node .name{font-weight:600}.node.u .name,.node.n .name{font-weight:400}
.node .cls{color:var(--muted)}.node .share{color:var(--muted);font-size:12px}
.node .why{color:var(--bad);font-size:12px;font-weight:600}
.node .st{font-size:11px;color:var(--muted)}
li.closed>ul{display:none}
.empty{color:var(--muted);font-style:italic}
.noscript{margin:24px;padding:12px;background:var(--xf-bg)}
"""

_JS = r"""
(function () {
"use strict";
var D = JSON.parse(document.getElementById("fx-data").textContent);
var GOOD = {passed: 1, xfailed: 1};
var TREE = {t: "traced", l: "leaf", f: "failing", u: "not reached", n: "not reached (never called)",
  c: "container: not called itself, its modules were"};
function shortPath(p) {  // a library's file: from its package on
  var i = p.lastIndexOf("site-packages/");
  return i >= 0 ? p.slice(i + 14) : p;
}

function el(tag, cls, kids) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  (kids || []).forEach(function (k) {
    if (k === null || k === undefined || k === false) return;
    e.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
  });
  return e;
}
function statusClass(s) { return s === "passed" ? "passed" : s === "xfailed" ? "xfailed" : "bad"; }
function pct(x) { return x === null || x === undefined ? "" : Math.round(x * 100) + "%"; }
function short(model) { var i = model ? model.lastIndexOf(".") : -1; return model ? model.slice(i + 1) : "-"; }
function order(list) {
  var known = D.statuses.filter(function (s) { return list.indexOf(s) >= 0; });
  return known.concat(list.filter(function (s) { return known.indexOf(s) < 0; }).sort());
}
function countBy(key) {
  var c = {};
  D.checks.forEach(function (x) { c[x[key]] = (c[x[key]] || 0) + 1; });
  return c;
}

var app = document.getElementById("app");
var checks = D.checks;
var statusCounts = countBy("status");
var statuses = order(Object.keys(statusCounts));
var backends = Object.keys(countBy("backend")).sort();
var categories = Object.keys(countBy("category")).filter(function (c) { return c !== "null"; }).sort();
var failing = checks.filter(function (c) { return !GOOD[c.status]; }).length;

// -- header -------------------------------------------------------------------------
var header = el("header", null, [
  el("h1", null, ["pytest-fxtrace report"]),
  el("div", "meta", [checks.length + (checks.length === 1 ? " check" : " checks") + ", " + failing +
    " failing \u00b7 torch " + D.torch + (D.created ? " \u00b7 " + D.created : "")])
]);
var counts = el("div", "counts");
statuses.forEach(function (s) {
  var b = el("button", "count " + statusClass(s) + " " + s, [el("b", null, [statusCounts[s]]), s]);
  b.type = "button";
  b.title = "show only " + s;
  b.addEventListener("click", function () { only(s); });
  counts.appendChild(b);
});
header.appendChild(counts);
if (backends.length > 1) {
  var per = backends.map(function (b) {
    var c = {};
    checks.forEach(function (x) { if (x.backend === b) c[x.status] = (c[x.status] || 0) + 1; });
    return b + ": " + order(Object.keys(c)).map(function (s) { return c[s] + " " + s; }).join(", ");
  });
  header.appendChild(el("div", "backends", [per.join(" \u00b7 ")]));
}
app.appendChild(header);
var main = el("main");
app.appendChild(main);
if (D.unfinished.length) {
  var warn = el("div", "warn", [el("b", null, [D.unfinished.length + " test(s) with no recorded result:"])]);
  D.unfinished.forEach(function (u) { warn.appendChild(el("div", "mono", [u.test + ": " + u.reason])); });
  main.appendChild(warn);
}

// -- filters ------------------------------------------------------------------------
var filters = el("div", "filters", [el("b", null, ["Status"])]);
var boxes = {};
statuses.forEach(function (s) {
  var box = el("input");
  box.type = "checkbox"; box.checked = true; box.value = s;
  box.addEventListener("change", apply);
  boxes[s] = box;
  filters.appendChild(el("label", "status-filter", [box, " ", el("span", "status " + statusClass(s), [s])]));
});
function select(label, values, all) {
  var sel = el("select");
  sel.appendChild(el("option", null, [all])).value = "";
  values.forEach(function (v) { sel.appendChild(el("option", null, [v])).value = v; });
  sel.setAttribute("aria-label", label);
  sel.addEventListener("change", apply);
  filters.appendChild(el("label", null, [el("b", null, [label]), " ", sel]));
  return sel;
}
var category = categories.length ? select("Category", categories, "all categories") : null;
var backend = backends.length > 1 ? select("Backend", backends, "all backends") : null;
var search = el("input");
search.type = "search"; search.placeholder = "filter test, model, module";
search.setAttribute("aria-label", "filter by text");
search.addEventListener("input", apply);
filters.appendChild(search);
var shown = el("span", "shown");
filters.appendChild(shown);
main.appendChild(filters);

// -- table --------------------------------------------------------------------------
var table = el("table", "checks");
var heads = ["", "status", "test", "model", "category", "location", "submodule", "coverage", "fix"];
if (backends.length > 1) heads.splice(4, 0, "backend");
var thead = el("tr");
heads.forEach(function (h) { thead.appendChild(el("th", null, [h])); });
table.appendChild(el("thead", null, [thead]));
var tbody = el("tbody");
table.appendChild(tbody);
main.appendChild(table);
if (!checks.length) main.appendChild(el("p", "empty", ["No model was checked in this session."]));

var groups = {};  // the same test and model under several backends: side by side
checks.forEach(function (c) { (groups[c.test + "\u0000" + c.model] = groups[c.test + "\u0000" + c.model] || []).push(c); });

var rows = [];
checks.forEach(function (c) {
  var tw = el("button", "toggle", ["\u25b8"]);
  tw.type = "button"; tw.setAttribute("aria-label", "details");
  var testCell = el("td", "test", [el("span", "mono", [c.test])]);
  var subrow = null;  // a failing check's statement and fix, across the table
  if (c.status !== "passed") {
    var sub = el("td", "sub");
    sub.colSpan = heads.length - 2;
    if (c.source) sub.appendChild(el("div", null, [el("code", "src", [c.source])].concat(c.where ? [" at ", el("span", "mono", [shortPath(c.where)])] : [])));
    else sub.appendChild(el("div", null, [(c.text || "").split("\n")[0]]));
    if (c.fix && c.fix.verified) sub.appendChild(el("div", "fixline", ["fix: ", el("code", null, [c.fix.text])]));
    subrow = el("tr", "subrow", [el("td"), el("td"), sub]);
  }
  var cov = c.coverage === null || c.coverage === undefined ? "" :
    el("span", null, [el("span", "cov", [(function () { var i = el("i"); i.style.width = pct(c.coverage); return i; })()]), pct(c.coverage)]);
  var cells = [
    el("td", null, [tw]),
    el("td", "nw", [el("span", "status " + statusClass(c.status), [c.status])]),
    testCell,
    el("td", "mono", [short(c.model)]),
    el("td", "nw", [c.category || "-"]),
    (function () { var td = el("td", "mono loc", [c.where ? shortPath(c.where) : "-"]); td.title = c.where || ""; return td; })(),
    el("td", "mono", [c.module ? c.module + (c.moduleType ? " (" + c.moduleType + ")" : "") : "-"]),
    el("td", "nw", [cov]),
    el("td", "nw", [c.fix ? (c.fix.verified ? el("span", "badge ok", ["verified"]) : el("span", "badge no", ["none"])) : "-"])
  ];
  if (backends.length > 1) cells.splice(4, 0, el("td", null, [c.backend]));
  var tr = el("tr", "row", cells);
  tr.id = c.key;
  tr.setAttribute("data-status", c.status);
  var detail = null;
  function toggle(force) {
    var open = force === undefined ? !detail || detail.hidden : force;
    if (open && !detail) {
      detail = el("tr", "detail", [el("td", null, [details(groups[c.test + "\u0000" + c.model], c)])]);
      detail.firstChild.colSpan = heads.length;
      var after = subrow || tr;
      tr.parentNode.insertBefore(detail, after.nextSibling);
    }
    if (detail) detail.hidden = !open;
    tr.classList.toggle("open", open);
    tw.textContent = open ? "\u25be" : "\u25b8";
  }
  tr.addEventListener("click", function (e) {
    if (e.target.closest && e.target.closest("a,select,input")) return;
    toggle();
  });
  if (subrow) subrow.addEventListener("click", function (e) { if (!(e.target.closest && e.target.closest("code"))) toggle(); });
  var row = {check: c, tr: tr, toggle: toggle, hide: function (h) {
    tr.hidden = h;
    if (subrow) subrow.hidden = h;
    if (detail) detail.hidden = h || !tr.classList.contains("open");
  }};
  rows.push(row);
  tbody.appendChild(tr);
  if (subrow) tbody.appendChild(subrow);
});

function only(s) {
  Object.keys(boxes).forEach(function (k) { boxes[k].checked = k === s; });
  apply();
}
function apply() {
  var text = search.value.toLowerCase();
  var n = 0;
  rows.forEach(function (r) {
    var c = r.check;
    var ok = boxes[c.status].checked &&
      (!category || !category.value || c.category === category.value) &&
      (!backend || !backend.value || c.backend === backend.value) &&
      (!text || (c.test + " " + c.model + " " + (c.module || "")).toLowerCase().indexOf(text) >= 0);
    r.hide(!ok);
    if (ok) n++;
  });
  shown.textContent = n + " of " + checks.length + " shown";
}

// -- one check ----------------------------------------------------------------------
function details(group, c) {
  if (group.length < 2) return side(c, false);
  var wrap = el("div", "sides");
  group.forEach(function (x) { wrap.appendChild(side(x, true)); });
  return wrap;
}
function box(title, kids) { return el("div", "box", [el("h4", null, [title])].concat(kids)); }
function side(c, titled) {
  var s = el("div", "side");
  if (titled) s.appendChild(el("h3", null, [c.backend + " ", el("span", "status " + statusClass(c.status), [c.status])]));
  s.appendChild(el("div", "meta mono", [c.model + (c.nodes !== null && c.nodes !== undefined ? " \u00b7 " + c.nodes + " nodes" : "") +
    " \u00b7 traced in " + (c.seconds || 0).toFixed(3) + " s"]));
  if (c.source || c.where) {
    s.appendChild(box("failing statement", [el("span", "mono", [c.where || ""]), c.source ? el("code", "stmt", [c.source]) : null]));
  }
  if (c.fix) {
    var copy = el("button", "copy", ["copy"]);
    copy.type = "button";
    var pre = el("pre", "fix" + (c.fix.verified ? "" : " unverified"), [c.fix.text]);
    copy.addEventListener("click", function (e) {
      e.stopPropagation();
      var range = document.createRange(); range.selectNodeContents(pre);
      var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      try { if (navigator.clipboard) navigator.clipboard.writeText(c.fix.text); else document.execCommand("copy"); } catch (err) { /* selected: copy by hand */ }
    });
    s.appendChild(box("fix", [el("span", c.fix.verified ? "badge ok" : "badge no", [c.fix.verified ? "verified: traced and matched eager" : "not verified"]), copy, pre]));
  }
  s.appendChild(box(c.status === "passed" ? "result" : "what the test said", [message(c)]));
  if (c.tree === null || c.tree === undefined) return s;
  // the text on the left, the module tree on the right (below, on a narrow screen)
  var texts = el("div", "texts");
  while (s.firstChild) texts.appendChild(s.firstChild);
  var covered = c.coverage !== null && c.coverage !== undefined ? " \u00b7 " + pct(c.coverage) + " traced" : "";
  s.appendChild(el("div", titled ? "cols one" : "cols", [texts, box("module tree" + covered, [tree(D.trees[c.tree])])]));
  return s;
}
function message(c) {
  var pre = el("pre");
  (c.text || "").split("\n").forEach(function (line, i) {
    if (i) pre.appendChild(document.createTextNode("\n"));
    var cls = null;
    if (/^ {4}@@/.test(line)) cls = "diff-hunk";
    else if (/^ {4}\+(?!\+\+ )/.test(line)) cls = "diff-add";
    else if (/^ {4}-(?!-- )/.test(line)) cls = "diff-del";
    pre.appendChild(c.status.indexOf("snapshot") === 0 && cls ? el("span", cls, [line]) : document.createTextNode(line));
  });
  return pre;
}

// -- module tree --------------------------------------------------------------------
function tree(rows) {
  // rows: [depth, name, type, status, params, category?, where?] in pre-order
  var total = rows.length ? rows[0][4] : 0;
  var nodes = rows.map(function (r) { return {r: r, kids: [], bad: r[3] === "f"}; });
  var stack = [];
  nodes.forEach(function (n) {
    while (stack.length && stack[stack.length - 1].r[0] >= n.r[0]) stack.pop();
    if (stack.length) stack[stack.length - 1].kids.push(n);
    stack.push(n);
  });
  for (var i = nodes.length - 1; i >= 0; i--) nodes[i].kids.forEach(function (k) {
    if (k.bad || k.badBelow) nodes[i].badBelow = true;
    if ("tlf".indexOf(k.r[3]) >= 0 || k.reachedBelow) nodes[i].reachedBelow = true;
  });
  function line(n) {
    var r = n.r.slice();
    if ((r[3] === "u" || r[3] === "n") && n.reachedBelow) r[3] = "c";  // a ModuleList, ModuleDict
    var li = el("li");
    var tw = el("button", "tw", [n.kids.length ? "\u25b8" : ""]);
    tw.type = "button"; tw.disabled = !n.kids.length;
    var parts = [tw, el("span", "dot " + r[3]), el("span", "name mono", [r[1] || "(root)"]), el("span", "cls mono", [D.types[r[2]]])];
    if (total) parts.push(el("span", "share", [r[4] ? (100 * r[4] / total < 0.1 ? "<0.1" : (100 * r[4] / total).toFixed(100 * r[4] / total < 10 ? 1 : 0)) + "% params" : "no params"]));
    if (r[3] !== "t" && r[3] !== "c") parts.push(el("span", "st", [TREE[r[3]]]));
    if (r[3] === "f" && (r[5] || r[6])) {
      var why = el("span", "why", [(r[5] || "") + (r[6] ? " at " + shortPath(r[6]) : "")]);
      why.title = r[6] || "";
      parts.push(why);
    }
    var node = el("div", "node " + r[3], parts);
    node.title = TREE[r[3]];
    li.appendChild(node);
    var ul = null;
    function open(yes) {
      if (!n.kids.length) return;
      if (yes && !ul) { ul = el("ul", "tree"); n.kids.forEach(function (k) { ul.appendChild(line(k)); }); li.appendChild(ul); }
      li.classList.toggle("closed", !yes);
      tw.textContent = yes ? "\u25be" : "\u25b8";
    }
    n.open = open;
    li.classList.add("closed");
    tw.addEventListener("click", function (e) { e.stopPropagation(); open(li.classList.contains("closed")); });
    if (n.kids.length && (r[0] === 0 || n.badBelow)) open(true);  // the way to each failing module
    return li;
  }
  function all(yes) {
    function walk(n) { if (n.open) n.open(yes); if (yes || n.kids.length) n.kids.forEach(function (k) { if (k.open || yes) walk(k); }); }
    nodes.length && walk(nodes[0]);
  }
  var legend = el("div", "legend", ["t", "l", "f", "u"].map(function (s) { return el("span", null, [el("span", "dot " + s), TREE[s]]); }));
  var tools = el("span", "tools");
  [["expand all", true], ["collapse", false]].forEach(function (b) {
    var btn = el("button", null, [b[0]]); btn.type = "button";
    btn.addEventListener("click", function (e) { e.stopPropagation(); all(b[1]); if (!b[1] && nodes.length) nodes[0].open(true); });
    tools.appendChild(btn);
  });
  legend.appendChild(tools);
  var root = el("div", "tree-root", [legend]);
  var ul = el("ul", "tree");
  if (nodes.length) ul.appendChild(line(nodes[0]));
  root.appendChild(ul);
  root.addEventListener("click", function (e) { e.stopPropagation(); });
  return root;
}

// -- #<test id>: open that check ----------------------------------------------------
function follow() {
  var key = decodeURIComponent(location.hash.slice(1));
  if (!key) return;
  rows.forEach(function (r) {
    if (r.check.key === key) { r.hide(false); r.toggle(true); r.tr.scrollIntoView({block: "start"}); }
  });
}
window.addEventListener("hashchange", follow);
apply();
follow();
})();
"""
