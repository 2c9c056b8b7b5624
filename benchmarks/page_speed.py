"""How fast the ``--fx-html`` page opens and filters with many rows, in headless Chromium.

The rows are synthesised from a real ``--fx-report`` (e.g. ``benchmarks/zoo_full.py timm
--every 20``'s): its records repeated under new node ids until there are ``--rows`` of
them, so the statuses, messages and module trees are real ones. The page is rendered as
``python -m pytest_fxtrace.merge --html`` renders it, opened from a file in Debian's
``chromium`` through Playwright (as ``tests/test_html_session.py`` drives it), and timed:

- first paint: the browser's ``first-contentful-paint``, from navigation start;
- script: the page's own script, start to end (the table built);
- each filter change (a status box unticked, a category chosen, text typed, all shown
  again): from the event to the next frame painted (two animation frames), median of
  ``--reps``;
- beside each wall time, the CPU time of the page's main thread over it (Chrome's
  ``ThreadTime`` through the DevTools protocol): on a machine shared with other work the
  wall time waits for a core, the CPU time does not.

    python benchmarks/page_speed.py --report /tmp/zoo-timm-XXXX/report.json --rows 10000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pytest_fxtrace.report.html import render_html
from pytest_fxtrace.report.merge import records

BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip

# one filter change, timed from the event to the frame after it is painted
CHANGE = """async ([kind, value]) => {
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  await frame();
  const start = performance.now();
  if (kind === "box") { const b = document.querySelector(`.filters input[value="${value}"]`); b.click(); }
  if (kind === "select") { const s = document.querySelector('select[aria-label="Category"]');
    s.value = value; s.dispatchEvent(new Event("change")); }
  if (kind === "text") { const t = document.querySelector('input[type="search"]');
    t.value = value; t.dispatchEvent(new Event("input")); }
  await frame();
  return performance.now() - start;
}"""


def synthesise(report: Path, rows: int) -> dict:
    """``rows`` records: the report's, repeated under new node ids, in collection order."""
    document = json.loads(report.read_text(encoding="utf-8"))
    real = document["results"]
    results = []
    for index in range(rows):
        record = dict(real[index % len(real)])
        name = record["nodeid"].rpartition("::")[2]
        record["nodeid"] = f"zoo/timm::{name}-{index // len(real):03d}"
        results.append(record)
    results.sort(key=lambda r: r["nodeid"])
    return {"version": 1, "torch": document["torch"], "results": results}


def measure(page_path: Path, reps: int) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=BROWSER_ARGS,
            viewport={"width": 1280, "height": 860}, offline=True,
        )  # fmt: skip
        opened = []
        for _ in range(reps):  # a fresh tab each time: its main thread's CPU time starts at 0
            page = context.new_page()
            cdp = context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.goto(page_path.as_uri())
            page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0")
            opened.append(page.evaluate(
                "() => [performance.getEntriesByName('first-contentful-paint')[0].startTime,"
                " performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd]"
            ) + [_thread_ms(cdp)])  # fmt: skip
            if len(opened) < reps:
                page.close()
        category = page.evaluate("() => [...document.querySelectorAll('select[aria-label=\"Category\"] option')]"
                                 ".map(o => o.value).filter(Boolean)[0] || ''")
        status = page.evaluate("() => [...document.querySelectorAll('.filters input[type=checkbox]')]"
                               ".map(b => b.value).sort((a, b) => (b === 'passed') - (a === 'passed'))[0]")
        changes = {f"untick {status}": ("box", status), f"tick {status}": ("box", status),
                   f"category {category}": ("select", category), "all categories": ("select", ""),
                   "text 'vit'": ("text", "vit"), "text cleared": ("text", "")}  # fmt: skip
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in changes}
        for _ in range(reps):
            for name, change in changes.items():
                before = _thread_ms(cdp)
                wall = page.evaluate(CHANGE, list(change))
                timings[name].append((wall, _thread_ms(cdp) - before))
        shown = page.evaluate("() => document.querySelector('.shown').textContent")
        context.close()
    return {
        "first paint ms": statistics.median(o[0] for o in opened),
        "DOMContentLoaded ms": statistics.median(o[1] for o in opened),
        "load cpu ms": statistics.median(o[2] for o in opened),
        "changes ms": {
            name: (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
            for name, values in timings.items()
        },
        "shown": shown,
    }


def _thread_ms(cdp: object) -> float:
    """CPU time of the page's main thread so far, in ms."""
    metrics = cdp.send("Performance.getMetrics")["metrics"]  # type: ignore[attr-defined]
    return 1000 * next(m["value"] for m in metrics if m["name"] == "ThreadTime")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, required=True, help="a real --fx-report to synthesise rows from")
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="keep the page here")
    args = parser.parse_args()
    document = synthesise(args.report, args.rows)
    start = time.perf_counter()
    html = render_html(records(document), document["torch"])
    rendered = time.perf_counter() - start
    out = args.out or Path(tempfile.mkdtemp(prefix="page-speed-")) / "fx-report.html"
    out.write_text(html, encoding="utf-8")
    figures = measure(out, args.reps)
    print(f"{args.rows} rows from {args.report}: page {len(html.encode()) / 1e6:.2f} MB, rendered in {rendered:.1f} s")
    print(f"first paint {figures['first paint ms']:.0f} ms, DOMContentLoaded {figures['DOMContentLoaded ms']:.0f} ms,"
          f" main-thread CPU to load {figures['load cpu ms']:.0f} ms (median of {args.reps}); bound: first paint < 1000 ms")
    for name, (wall, cpu) in figures["changes ms"].items():  # type: ignore[union-attr]
        print(f"  filter change, {name}: {wall:.0f} ms, main-thread CPU {cpu:.0f} ms (bound < 200 ms)")
    print(f"page: {out}")


if __name__ == "__main__":
    main()
