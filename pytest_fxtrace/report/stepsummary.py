"""The GitHub Actions step summary: short Markdown appended to ``$GITHUB_STEP_SUMMARY``.

The counts per status, then one table row per failing check with its statement, place
and fix (and its backend, when more than one backend ran), one row per graph-break site
and recompile of the failing compile checks, and where the full (HTML) report is. GitHub refuses a step's summary over
1 MiB, so rows that would pass ``limit`` bytes are left out and counted.

Everything from the user's code goes into code spans, whose text Markdown and
GitHub's renderer show as it is (a ``<script>`` stays text); a code span in a table
cell keeps ``|`` as ``\\|``, and its delimiter is longer than any run of backticks in it.
Pytest-free and torch-free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_fxtrace.report import sites
from pytest_fxtrace.report.records import CheckRecord, Unfinished, several_backends, sort_records
from pytest_fxtrace.report.summary import counts_line, plain

LIMIT = 1024 * 1024  # GitHub's limit for one step's summary, in bytes
_MARGIN = 1024  # what GitHub or a later step may add: stay clearly under the limit


def code(text: object) -> str:
    """``text`` as an inline code span for a table cell: one line, ``|`` escaped, the
    backtick fence longer than any run of backticks inside."""
    value = " ".join(str(text).split())  # newlines and tabs would end the cell
    if not value:
        return ""
    value = value.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _row(record: CheckRecord, backends: bool) -> str:
    status = record.status + (f" ({record.category})" if record.category else "")
    where = code(record.where) if record.where else ""
    statement = code(record.source) if record.source else ""
    if not record.source and not record.where:
        statement = code(record.text.splitlines()[0] if record.text else "")
    fix = ""
    if record.suggestion and record.suggestion.get("verified"):
        fix = code(record.suggestion.get("text", ""))
    module = code(f"{record.model_name}.{record.module}" if record.module else record.model_name)
    backend = f" {code(record.backend)} |" if backends else ""
    return f"| {code(record.nodeid)} | {module} |{backend} {status} | {where} | {statement} | {fix} |"


def run_url(environ: Mapping[str, str]) -> str | None:
    """This workflow run's page (its artifacts are listed there), from the runner's variables."""
    server, repo, run = (environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else None


def _site_rows(records: Sequence[CheckRecord]) -> list[str]:
    """One table row per graph-break site and per recompile of the failing compile checks (a
    check the baseline xpassed has its own row: its sites are baselined)."""
    rows = []
    for record in records:
        if record.status == "xpassed":
            continue
        for site in record.graph_breaks or ():
            statement = code(site["statement"]) if site.get("statement") else ""
            what = code(f"{sites.break_kind(site)}: {site.get('reason') or ''}")
            rows.append(f"| {code(record.nodeid)} | graph break | {code(sites.where(site))} | "
                        f"{code(site.get('module') or '')} | {statement} | {what} |")
        for item in record.recompiles or ():
            kind = "recompile" if item.get("counted", True) else "recompile (not counted)"
            rows.append(f"| {code(record.nodeid)} | {kind} | {code(sites.where(item))} | | | "
                        f"{code(item.get('reason') or '')} |")
    return rows


_SITE_HEAD = [
    "",
    "#### graph breaks and recompiles (torch.compile)",
    "",
    "| test | kind | location | submodule | statement | why |",
    "|---|---|---|---|---|---|",
]


def step_summary(
    records: Sequence[CheckRecord],
    *,
    html_path: str | None = None,
    unfinished: Sequence[Unfinished] = (),
    environ: Mapping[str, str] | None = None,
    limit: int = LIMIT - _MARGIN,
) -> str:
    """The Markdown, at most ``limit`` bytes (UTF-8): the failing checks' table, then their
    graph-break sites and recompiles (compile checks), one a row.

    Example::

        step_summary(records, html_path="fx-report.html")
        # '### pytest-fxtrace: 3 checks: 2 passed, 1 untraceable\\n...'
    """
    environ = os.environ if environ is None else environ
    records = sort_records(records)
    failing = [r for r in records if r.failed]
    head = [f"### pytest-fxtrace: {plain(counts_line(records))}", ""]
    tail = _tail(unfinished, html_path, environ)
    backends = several_backends(records)
    used = len("\n".join(head).encode()) + len("\n".join(tail).encode()) + 200  # 200: the "cut" line
    body = list(head)
    rows = [_row(record, backends) for record in failing]
    table = [
        f"#### {len(failing)} failing",
        "",
        "| test | model |" + (" backend |" if backends else "") + " status | location | statement | verified fix |",
        "|---|---|" + ("---|" if backends else "") + "---|---|---|---|",
    ]
    cut = []
    blocks = ((table, rows, "failing checks"), (_SITE_HEAD, _site_rows(failing), "graph-break sites and recompiles"))
    for head_lines, block, what in blocks:
        if not block:
            continue
        used += len("\n".join(head_lines).encode()) + 1
        kept = []
        for row in block:
            used += len(row.encode()) + 1
            if used > limit:
                break
            kept.append(row)
        if len(kept) < len(block):
            cut.append(f"{len(block) - len(kept)} {what}")
        if kept:
            body += head_lines + kept
    if cut:
        body += ["", f"{' and '.join(cut)} not shown here (GitHub's 1 MiB summary limit); "
                 "the HTML and JSON reports have them all."]
    out = "\n".join(body + tail) + "\n"
    if len(out.encode()) > limit:  # not even the counts fit what is left of the summary
        return ""
    return out


def _tail(unfinished: Sequence[Unfinished], html_path: str | None, environ: Mapping[str, str]) -> list[str]:
    """What follows the table: tests a crashed worker took with it, and where the HTML page is."""
    tail = [""]
    if unfinished:
        tail.append(f"{len(unfinished)} test(s) with no recorded result (a worker crashed): "
                    + ", ".join(code(u.nodeid) for u in unfinished[:20])
                    + (f" and {len(unfinished) - 20} more" if len(unfinished) > 20 else ""))
        tail.append("")
    if html_path:
        where = code(Path(html_path).name)
        url = run_url(environ)
        artifact = f" in this run's artifacts ({url})" if url else " in this run's artifacts"
        tail.append(f"Module trees, coverage and fixes of every check: the HTML report {where}{artifact}.")
    else:
        tail.append("Module trees, coverage and fixes of every check: run pytest with `--fx-html=fx-report.html` "
                    "and upload that file as an artifact.")
    tail.append("")
    return tail


def append_step_summary(
    path: str | os.PathLike[str],
    records: Sequence[CheckRecord],
    *,
    html_path: str | None = None,
    unfinished: Sequence[Unfinished] = (),
    environ: Mapping[str, str] | None = None,
) -> None:
    """Append ``step_summary`` to ``path``, within what GitHub's limit leaves of it."""
    try:
        present = os.path.getsize(path)
    except OSError:
        present = 0
    limit = LIMIT - _MARGIN - present
    text = ""
    if limit > 0:
        text = step_summary(records, html_path=html_path, unfinished=unfinished, environ=environ, limit=limit)
    if text:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
