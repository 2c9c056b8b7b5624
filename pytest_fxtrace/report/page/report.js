
(function () {
"use strict";
var D = JSON.parse(document.getElementById("fx-data").textContent);
var GOOD = {passed: 1, xfailed: 1};
var TREE = {t: "traced", l: "leaf", f: "failing", u: "not reached", n: "not reached (never called)",
  c: "container: not called itself, its modules were", b: "holds a graph break"};
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
// a test id or path as text that wraps only between its parts (<wbr>): after "/" and "::",
// before "[" and before a "." that starts a name (not a decimal point, not ".py": a file
// name stays whole). overflow-wrap:anywhere on the whole cell let the table squeeze the
// column to one letter's width and cut names anywhere; it stays only as the fallback for a
// part too long for any column (a long parameter id), which would widen the table past the window
var LONG_PART = 80;  // characters
function breakable(text) {
  var span = el("span"), start = 0;
  function part(end) {
    var piece = text.slice(start, end);
    if (start) span.appendChild(document.createElement("wbr"));
    span.appendChild(piece.length > LONG_PART ? el("span", "brk", [piece]) : document.createTextNode(piece));
    start = end;
  }
  for (var i = 1; i < text.length; i++) {
    var c = text.charAt(i), before = text.charAt(i - 1);
    if (before === "/" || (before === ":" && text.charAt(i - 2) === ":" && c !== ":") || c === "[" ||
        (c === "." && /[A-Za-z_]/.test(text.charAt(i + 1)) && !/^\.py(\W|$)/.test(text.slice(i, i + 4)))) part(i);
  }
  part(text.length);
  return span;
}
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

// failing checks first; each group keeps the data's order (the collection order, as the JSON
// report's), so the page's data stays the same document
var listed = checks.filter(function (c) { return !GOOD[c.status]; })
  .concat(checks.filter(function (c) { return GOOD[c.status]; }));

var groups = {};  // the same test and model under several backends: side by side
checks.forEach(function (c) { (groups[c.test + "\u0000" + c.model] = groups[c.test + "\u0000" + c.model] || []).push(c); });

// A row's elements are built the first time it is shown, and the table holds at most PAGE
// rows more than the window has scrolled to: 10,000 rows open and filter as fast as a few
// dozen (a filter change redraws the first PAGE of the rows it keeps, not every row; laying
// out a table row costs ~1 ms of the main thread, benchmarks/page_speed.py)
var PAGE = 50;
var rows = listed.map(function (c) { return {check: c}; });
function built(row) {
  if (row.tr) return row;
  var c = row.check;
  var tw = el("button", "toggle", ["\u25b8"]);
  tw.type = "button"; tw.setAttribute("aria-label", "details");
  var testCell = el("td", "test", [el("span", "mono", [breakable(c.test)])]);
  var subrow = null;  // a failing check's statement and fix, across the table
  if (c.status !== "passed") {
    var sub = el("td", "sub");
    sub.colSpan = heads.length - 2;
    if (c.source) sub.appendChild(el("div", null, [el("code", "src", [c.source])].concat(c.where ? [" at ", el("span", "mono", [shortPath(c.where)])] : [])));
    else sub.appendChild(el("div", null, [(c.text || "").split("\n")[0]]));
    if (c.fix && c.fix.verified) sub.appendChild(el("div", "fixline", ["fix: ", el("code", null, [c.fix.text])]));
    if (c.fix && c.fix.patchText) sub.appendChild(el("div", "fixline", ["or patch: ", el("code", null, [c.fix.patchText])]));
    if (c.fix && c.fix.patch) sub.appendChild(el("pre", "patch", [patchHead(c.fix.patch)]));  // the diff, under the row
    if (c.breaks && (c.breaks.length || c.recompiles.length)) sub.appendChild(el("div", null, [compileCounts(c)]));
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
    (function () { var td = el("td", "mono loc", [c.where ? breakable(shortPath(c.where)) : "-"]); td.title = c.where || ""; return td; })(),
    el("td", "mono", [c.module ? c.module + (c.moduleType ? " (" + c.moduleType + ")" : "") : "-"]),
    el("td", "nw", [cov]),
    el("td", "nw", [c.fix ? (c.fix.verified ? el("span", "badge ok", ["verified"]) : el("span", "badge no", ["none"])) : "-"])
  ];
  if (backends.length > 1) cells.splice(4, 0, el("td", null, [c.backend]));
  var tr = el("tr", "row", cells);
  tr.id = c.key;
  tr.setAttribute("data-status", c.status);
  function toggle(force) {
    var open = force === undefined ? !row.detail || row.detail.hidden : force;
    if (open && !row.detail) {
      row.detail = el("tr", "detail", [el("td", null, [details(groups[c.test + "\u0000" + c.model], c)])]);
      row.detail.firstChild.colSpan = heads.length;
      var after = subrow || tr;
      tr.parentNode.insertBefore(row.detail, after.nextSibling);
    }
    if (row.detail) row.detail.hidden = !open;
    tr.classList.toggle("open", open);
    tw.textContent = open ? "\u25be" : "\u25b8";
  }
  tr.addEventListener("click", function (e) {
    if (e.target.closest && e.target.closest("a,select,input")) return;
    toggle();
  });
  if (subrow) subrow.addEventListener("click", function (e) { if (!(e.target.closest && e.target.closest("code"))) toggle(); });
  row.tr = tr; row.subrow = subrow; row.toggle = toggle; row.detail = null;
  return row;
}

var matching = rows;  // the rows the filters keep, in the table's order
var drawn = 0;  // how many of them are in the table
var moreCell = el("td", "more");
moreCell.colSpan = heads.length;
var moreRow = el("tr", "more", [moreCell]);
moreRow.addEventListener("click", function () { draw(drawn + PAGE); });
function draw(upTo) {  // the matching rows up to index upTo in the table
  var end = Math.min(matching.length, upTo), part = document.createDocumentFragment();
  for (; drawn < end; drawn++) {
    var r = built(matching[drawn]);
    part.appendChild(r.tr);
    if (r.subrow) part.appendChild(r.subrow);
    if (r.detail) part.appendChild(r.detail);
  }
  tbody.appendChild(part);
  var left = matching.length - drawn;
  moreCell.textContent = left + " more row" + (left === 1 ? "" : "s") + ": scroll or click to show them";
  if (left) tbody.appendChild(moreRow); else if (moreRow.parentNode) moreRow.parentNode.removeChild(moreRow);
}
if (window.IntersectionObserver) {  // the next rows come as the last ones scroll into view
  new IntersectionObserver(function (seen) {
    if (seen.some(function (e) { return e.isIntersecting; })) draw(drawn + PAGE);
  }, {rootMargin: "1000px"}).observe(moreRow);
}

function only(s) {
  Object.keys(boxes).forEach(function (k) { boxes[k].checked = k === s; });
  apply();
}
function keeps(c, text) {
  return boxes[c.status].checked &&
    (!category || !category.value || c.category === category.value) &&
    (!backend || !backend.value || c.backend === backend.value) &&
    (!text || (c.test + " " + c.model + " " + (c.module || "")).toLowerCase().indexOf(text) >= 0);
}
function apply() {
  var text = search.value.toLowerCase();
  matching = rows.filter(function (r) { return keeps(r.check, text); });
  tbody.textContent = "";
  drawn = 0;
  draw(PAGE);
  shown.textContent = matching.length + " of " + checks.length + " shown";
}

// -- one check ----------------------------------------------------------------------
function details(group, c) {
  if (group.length < 2) return side(c, false);
  var wrap = el("div", "sides");
  group.forEach(function (x) { wrap.appendChild(side(x, true)); });
  return wrap;
}
var PATCH_LINES = 15;  // a verified patch's first lines under its row; the whole diff in its details
function patchHead(diff) {
  var lines = diff.replace(/\n$/, "").split("\n");
  return lines.length <= PATCH_LINES ? lines.join("\n") : lines.slice(0, PATCH_LINES).join("\n") + "\n... " + (lines.length - PATCH_LINES) + " more lines (details)";
}
function box(title, kids) { return el("div", "box", [el("h4", null, [title])].concat(kids)); }
function fixBadge(c) {  // the backend's own verb; a fix that leaves some is not called a pass
  if (!c.fix.verified) return "not verified";
  var verb = (c.past || "traced") + " and matched eager";
  return c.fix.partial ? "verified in part: " + verb + ", but leaves some (applied, the check still fails)" : "verified: " + verb;
}
function side(c, titled) {
  var s = el("div", "side");
  if (titled) s.appendChild(el("h3", null, [c.backend + " ", el("span", "status " + statusClass(c.status), [c.status])]));
  s.appendChild(el("div", "meta mono", [c.model + (c.nodes !== null && c.nodes !== undefined ? " \u00b7 " + c.nodes + " nodes" : "") +
    " \u00b7 " + (c.past || "traced") + " in " + (c.seconds || 0).toFixed(3) + " s"]));
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
    s.appendChild(box("fix", [el("span", c.fix.verified ? "badge ok" : "badge no", [fixBadge(c)]), copy, pre]));
    if (c.fix.patch) s.appendChild(box("verified patch (patch -p1 from the file's import root)",
      (c.fix.patchText ? [el("div", null, [c.fix.patchText])] : []).concat([el("pre", "patch", [c.fix.patch])])));
  }
  s.appendChild(box(c.status === "passed" ? "result" : "what the test said", [message(c)]));
  if (c.breaks && c.breaks.length) s.appendChild(box("graph breaks: " + compileCounts(c), [breakList(c.breaks)]));
  if (c.recompiles && c.recompiles.length) s.appendChild(box("recompiles", [recompileList(c.recompiles)]));
  if (c.dims && c.dims.length) s.appendChild(box("dynamic dimensions", [dimList(c.dims)]));
  if (c.tree === null || c.tree === undefined) return s;
  // the text on the left, the module tree on the right (below, on a narrow screen)
  var texts = el("div", "texts");
  while (s.firstChild) texts.appendChild(s.firstChild);
  var covered = c.coverage !== null && c.coverage !== undefined ? " \u00b7 " + pct(c.coverage) + " " + (c.past || "traced") : "";
  s.appendChild(el("div", titled ? "cols one" : "cols", [texts, box("module tree" + covered, [tree(treeRows(c.tree), c.past || "traced")])]));
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

// -- a compile check's graph breaks and recompiles --------------------------------------
function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
function compileCounts(c) {
  var counted = c.recompiles.filter(function (r) { return r.counted; }).length;
  return plural(c.breaks.length, "graph-break site") + ", " + plural(counted, "recompile");
}
function breakList(breaks) {
  var ul = el("ul", "sites");
  breaks.forEach(function (b) {
    ul.appendChild(el("li", null, [
      el("span", "mono", [b.where ? shortPath(b.where) : "(no line of yours)"]), " ",
      el("span", "mono cls", [b.module || "forward"]),
      b.statement ? el("code", "stmt brkstmt", [b.statement]) : null,
      el("div", "why", [b.kind + ": " + b.reason])
    ]));
  });
  return ul;
}
function dimList(dims) {  // each dimension dynamic= asked for: its verdict, where, the sizes tried
  var ul = el("ul", "sites");
  dims.forEach(function (d) {
    var bad = d.verdict === "specialized" || d.verdict === "unsound";
    var what = d.verdict + (d.value !== null ? " to " + d.value : "") +
      (d.range ? ", range " + d.range[0] + ".." + (d.range[1] === null ? "inf" : d.range[1]) : "") +
      (d.multiple_of ? ", a multiple of " + d.multiple_of : "");
    ul.appendChild(el("li", bad ? "dim bad" : "dim", [
      el("span", "mono", [d.input + " dim " + d.dim + " (" + d.name + ")"]), " ",
      el("span", bad ? "badge no" : "badge ok", [what]),
      d.statement ? el("code", "stmt brkstmt", [d.statement]) : null,
      d.where ? el("span", "mono", [" " + shortPath(d.where)]) : null,
      el("div", "why", ["sizes tried: " + d.sizes.map(function (s) { return s.size + " " + s.result; }).join(", ")])
    ]));
  });
  return ul;
}
function recompileList(recompiles) {
  var ul = el("ul", "sites");
  recompiles.forEach(function (r) {
    ul.appendChild(el("li", r.counted ? null : "uncounted", [r.reason,
      r.where ? el("span", "mono", [" (guarded at " + shortPath(r.where) + ")"]) : null]));
  });
  return ul;
}

// -- module tree --------------------------------------------------------------------
// a tree's rows from the page's shared nodes (each distinct subtree stored once): node =
// [type, status, params, [name, node, name, node, ...], category?, where?]
function treeRows(root) {
  var rows = [], todo = [[0, "", root]];
  while (todo.length) {
    var item = todo.pop(), n = D.nodes[item[2]], kids = n[3];
    rows.push([item[0], item[1], n[0], n[1], n[2]].concat(n.slice(4)));
    for (var i = kids.length - 2; i >= 0; i -= 2) todo.push([item[0] + 1, kids[i], kids[i + 1]]);
  }
  return rows;
}
function tree(rows, past) {  // past: the backend's verb ("traced", "exported", "compiled")
  function said(s) { return s === "t" ? past : TREE[s]; }
  // rows: [depth, name, type, status, params, category?, where?] in pre-order
  var total = rows.length ? rows[0][4] : 0;
  var nodes = rows.map(function (r) { return {r: r, kids: [], bad: r[3] === "f" || r[3] === "b"}; });
  var stack = [];
  nodes.forEach(function (n) {
    while (stack.length && stack[stack.length - 1].r[0] >= n.r[0]) stack.pop();
    if (stack.length) stack[stack.length - 1].kids.push(n);
    stack.push(n);
  });
  for (var i = nodes.length - 1; i >= 0; i--) nodes[i].kids.forEach(function (k) {
    if (k.bad || k.badBelow) nodes[i].badBelow = true;
    if ("tlfb".indexOf(k.r[3]) >= 0 || k.reachedBelow) nodes[i].reachedBelow = true;
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
    if ((r[3] === "f" || r[3] === "b") && (r[5] || r[6])) {
      var why = el("span", "why", [(r[5] || "") + (r[6] ? " at " + shortPath(r[6]) : "")]);
      why.title = r[6] || "";
      parts.push(why);
    }
    var node = el("div", "node " + r[3], parts);
    node.title = said(r[3]);
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
  var shownStatuses = ["t", "l", "f", "u"].concat(rows.some(function (r) { return r[3] === "b"; }) ? ["b"] : []);
  var legend = el("div", "legend", shownStatuses.map(function (s) { return el("span", null, [el("span", "dot " + s), said(s)]); }));
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
// the filter bar sticks to the top of the window: whatever is scrolled into view (this
// check, the browser's own jump to #<test id>) lands below it, however tall it wrapped
function clearBar() { document.documentElement.style.scrollPaddingTop = (filters.offsetHeight + 8) + "px"; }
window.addEventListener("resize", clearBar);
clearBar();
function follow() {
  var key = decodeURIComponent(location.hash.slice(1));
  if (!key) return;
  var r = rows.filter(function (x) { return x.check.key === key; })[0];
  if (!r) return;
  if (matching.indexOf(r) < 0) {  // filtered out: every row shown again
    Object.keys(boxes).forEach(function (k) { boxes[k].checked = true; });
    if (category) category.value = "";
    if (backend) backend.value = "";
    search.value = "";
    apply();
  }
  draw(matching.indexOf(r) + 1);
  r.toggle(true);
  r.tr.scrollIntoView({block: "start"});
}
window.addEventListener("hashchange", follow);
apply();
follow();
})();
