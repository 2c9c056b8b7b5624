"""The terminal summary: the counts line and the table of checks (test, model, status,
category, location, submodule, fix), fitted to the terminal's width, then the compile
checks' graph-break sites and recompiles.

Reads ``CheckRecord``s only; knows nothing of the engine, files or pytest (the session
prints the lines it returns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pytest_fxtrace.report import sites
from pytest_fxtrace.report.records import CheckRecord, Unfinished, several_backends, sort_records
from pytest_fxtrace.types import STATUSES

# -- terminal summary ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Span:
    """A piece of a summary line and its colour (a TerminalWriter markup name)."""

    text: str
    style: str | None = None


Line = list[Span]

SHORT_ROWS = 10  # table rows shown without -v
_GAP = "  "
_HEADERS = ("test", "model", "status", "category", "location", "submodule", "fix")
# (column, narrowest width) in the order they give way: the test id first, then the
# others, then the test id again; narrower than that a cell says nothing, so a very
# narrow terminal wraps the row. Test ids and paths keep their end.
_SHRINKABLE = ((0, 28), (4, 20), (5, 14), (1, 10), (0, 16), (4, 14))


def status_style(status: str) -> str:
    if status == "passed":
        return "green"
    if status == "xfailed":
        return "yellow"
    return "red"


def counts_line(records: Sequence[CheckRecord], prefix: str = "") -> Line:
    """``12 checks: 9 passed, 2 untraceable, 1 mismatch`` with colours."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
    noun = "check" if len(records) == 1 else "checks"
    line: Line = [Span(f"{prefix}{len(records)} {noun}: ", "bold")]
    for i, status in enumerate(order):
        if i:
            line.append(Span(", "))
        line.append(Span(f"{counts[status]} {status}", status_style(status)))
    return line


def _submodule(record: CheckRecord) -> str:
    if not record.module:
        return "-"
    return f"{record.module} ({record.module_type})" if record.module_type else record.module


def table_row(record: CheckRecord, backends: bool = False) -> tuple[str, ...]:
    """One row of the table; ``backends``: with the backend column (more than one ran)."""
    return (
        record.nodeid,
        record.model_name or "-",
        *((record.backend,) if backends else ()),
        record.status,
        record.category or "-",
        record.shown_where or "-",
        _submodule(record),
        "yes" if record.verified_fix else "no",
    )


def _shorten(text: str, width: int, keep_end: bool) -> str:
    if len(text) <= width:
        return text
    if width <= 3:
        return text[-width:] if keep_end else text[:width]
    return "..." + text[-(width - 3) :] if keep_end else text[: width - 3] + "..."


def _fit(widths: list[int], total_width: int, shift: int = 0) -> list[int]:
    """Narrow the long columns (test id first) until the row fits the terminal, or
    every column is as narrow as it can usefully be (``shift``: columns inserted after
    the model's)."""
    widths = list(widths)
    excess = sum(widths) + len(_GAP) * (len(widths) - 1) - total_width
    for column, narrowest in _SHRINKABLE:
        column = column + shift if column >= 2 else column
        if excess <= 0:
            break
        give = min(excess, max(0, widths[column] - narrowest))
        widths[column] -= give
        excess -= give
    return widths


def table_lines(records: Sequence[CheckRecord], width: int | None, backends: bool = False) -> list[Line]:
    """The table of ``records``; ``width=None`` keeps every cell whole; ``backends`` adds
    the backend column after the model's."""
    rows = [table_row(r, backends) for r in records]
    headers = (*_HEADERS[:2], "backend", *_HEADERS[2:]) if backends else _HEADERS
    status_column = headers.index("status")
    keep_end = {0, headers.index("location")}  # the test id and the path keep their end
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    if width is not None:
        widths = _fit(widths, width, shift=1 if backends else 0)

    def cells(row: Sequence[str], styles: Sequence[str | None]) -> Line:
        line: Line = []
        for i, (text, style) in enumerate(zip(row, styles, strict=True)):
            text = _shorten(text, widths[i], i in keep_end)
            last = i == len(row) - 1
            line.append(Span(text if last else text.ljust(widths[i]), style))
            if not last:
                line.append(Span(_GAP))
        return line

    lines = [cells(headers, ["bold"] * len(headers))]
    for record, row in zip(records, rows, strict=True):
        styles: list[str | None] = [None] * len(row)
        styles[status_column] = status_style(record.status)
        lines.append(cells(row, styles))
    return lines


SHORT_SITES = 5  # graph-break sites and recompiles shown per check without -v


def compile_lines(records: Sequence[CheckRecord], width: int | None) -> list[Line]:
    """Under the table: each compile check's graph-break sites and recompiles, one a line
    (``width=None``: all of them, whole; else ``SHORT_SITES`` a check, shortened to ``width``)."""
    found = [r for r in records if r.graph_breaks or r.recompiles]
    if not found:
        return []
    lines: list[Line] = [[Span("graph breaks and recompiles (torch.compile):", "bold")]]
    for record in found:
        lines.append([Span(f"  {record.nodeid} ({record.model_name}): "), Span(
            sites.compile_counts(record.graph_breaks, record.recompiles), status_style(record.status)
        )])  # fmt: skip
        items = [f"    {sites.break_text(site)}" for site in record.graph_breaks or ()]
        items += [f"    recompile: {sites.recompile_text(item)}" for item in record.recompiles or ()]
        shown = items if width is None else items[:SHORT_SITES]
        lines.extend([Span(text if width is None else _shorten(text, width, False))] for text in shown)
        if len(shown) < len(items):
            lines.append([Span(f"    ... and {len(items) - len(shown)} more (-v shows them all)")])
    return lines


def summary_lines(
    records: Sequence[CheckRecord],
    *,
    verbosity: int = 0,
    width: int | None = 80,
    unfinished: Sequence[Unfinished] = (),
    report_path: str | None = None,
    html_path: str | None = None,
) -> list[Line]:
    """The body of the ``fxtrace`` terminal summary section.

    Default: counts per status, then up to ``SHORT_ROWS`` non-passing checks (failures
    first, then expected failures) fitted to ``width`` (None: every cell whole), and under
    them the graph-break sites and recompiles of the compile checks among them
    (``compile_lines``). ``verbosity >= 1``: every row, nothing shortened. ``-q``: counts and
    failing rows only. ``-qq``: the counts line.

    Example::

        for line in summary_lines(records, verbosity=0, width=120):
            print("".join(span.text for span in line))
    """
    records = sort_records(records)
    if not records and not unfinished:
        return []
    lines: list[Line] = [counts_line(records, prefix="fxtrace: " if verbosity < 0 else "")]
    if verbosity <= -2:
        return lines
    failing = [r for r in records if r.failed]
    expected = [r for r in records if r.status == "xfailed"]
    rows = failing if verbosity < 0 else failing + expected
    if rows:
        shown = rows if verbosity >= 1 else rows[:SHORT_ROWS]
        backends = several_backends(records)
        lines.extend(table_lines(shown, None if verbosity >= 1 else width, backends))
        if len(shown) < len(rows):
            lines.append([Span(f"... and {len(rows) - len(shown)} more (-v shows every check)")])
        if verbosity >= 0:
            lines.extend(compile_lines(shown, None if verbosity >= 1 else width))
    if unfinished:
        lines.append([Span(f"{len(unfinished)} test(s) with no recorded result:", "yellow")])
        for entry in unfinished:
            lines.append([Span(f"  {entry.nodeid}: {entry.reason}")])
    if report_path:
        lines.append([Span(f"JSON report: {report_path}")])
    if html_path:
        lines.append([Span(f"HTML report: {html_path}")])
    return lines


def plain(line: Line) -> str:
    return "".join(span.text for span in line)
