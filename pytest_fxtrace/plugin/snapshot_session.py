"""Golden snapshots in a pytest session: hold each passing check against its file,
keep the books (``Ledger``), and on the controller find, report and delete orphans.

The engine (``pytest_fxtrace/snapshot/``) names, normalises, reads, writes and diffs; this module
only knows which test and model a snapshot belongs to and what the run selected.
Under pytest-xdist each worker hands its ledger over in
``config.workeroutput["fxtrace_snapshots"]``; the controller merges them in
``pytest_testnodedown`` and alone looks for orphans. An update run's workers also append
each file they write to a log the controller names (``workerinput``), so that after Ctrl-C,
when a worker's ledger never reaches the controller, every rewritten file is still named.

Imports no torch: the controller's bookkeeping runs without it; holding a check
(which only happens once a model was checked) asks the engine for what it needs.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace._compat import tmp_path_factory
from pytest_fxtrace.backends.spec import backend_words, lists_attributes
from pytest_fxtrace.snapshot import (
    Ledger,
    SnapshotFileError,
    SnapshotId,
    check_snapshot_dir,
    default_path_roots,
    find_orphans,
    make_snapshot,
    read_snapshot,
    same_code,
    snapshot_body,
    snapshot_files,
    stale_temp_files,
    tidy,
    unified_diff,
    write_atomic,
)
from pytest_fxtrace.types import Status, Verdict

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions
    from pytest_fxtrace.tracereport import TraceReport

WORKEROUTPUT_KEY = "fxtrace_snapshots"
WRITTEN_LOG_KEY = "fxtrace_snapshot_writes"  # workerinput: the log of the files written
SNAPSHOTS = pytest.StashKey["SnapshotSession"]()
_MODELS_SEEN = pytest.StashKey[dict[tuple[str, str], int]]()  # (model, backend) -> checks so far
DIFF_LINES = 40  # lines of a mismatch diff shown below -vv


def _torch_version() -> str:
    import torch  # a snapshot is only written after a check, which imported torch

    return str(torch.__version__)


def _posix(path: str | os.PathLike[str]) -> str:
    return Path(os.path.abspath(path)).as_posix()


def _test_id(item: pytest.Item) -> str:
    """The node id without its module: ``TestX::test_y[p]``."""
    _, sep, rest = item.nodeid.partition("::")
    return rest if sep else item.name


def _test_key(item: pytest.Item) -> tuple[str, str]:
    module = _posix(item.path)
    return module, f"{module}::{_test_id(item)}"


class SnapshotSession:
    """The session's snapshot state and hooks, one per ``pytest.Config``.

    Example (what plugin.py does)::

        SnapshotSession.install(config)
        ...
        hold_snapshots(item, reports, options)  # before the verdict
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        try:
            self.directory = check_snapshot_dir(config.getini("fxtrace_snapshot_dir"))
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-fxtrace: ini {exc}") from None
        self.update = bool(config.getoption("fx_snapshot_update", False))
        self.keep_orphans = bool(config.getoption("fx_snapshot_keep_orphans", False))
        self.is_worker = hasattr(config, "workerinput")
        self.roots = default_path_roots(config.rootpath)
        self.ledger = Ledger()
        self.lost_workers = 0
        self.orphans: list[Path] = []
        self.deleted: list[Path] = []
        self.kept_because: str | None = None
        self._keys: dict[str, str] = {}  # node id -> test key, for this process's items
        # an update run under xdist: the log of the files the workers wrote ("created\tkey" lines)
        worker_input = getattr(config, "workerinput", {})
        written = worker_input.get(WRITTEN_LOG_KEY) if self.update else None
        self.written_log: Path | None = Path(written) if written else None

    @classmethod
    def install(cls, config: pytest.Config) -> SnapshotSession:
        session = cls(config)
        config.stash[SNAPSHOTS] = session
        config.pluginmanager.register(session, "fxtrace-snapshots")
        config.add_cleanup(lambda: config.pluginmanager.unregister(session))
        return session

    # -- what the run collected and selected ----------------------------------------------

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        module, key = _test_key(item)
        self.ledger.modules.add(module)
        self.ledger.collected.add(key)
        self._keys[item.nodeid] = key

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            path = report.nodeid.partition("::")[0]
            self.ledger.broken_modules.add(_posix(self.config.rootpath / path))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.ledger.deselected += len(items)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_MODELS_SEEN] = {}  # a rerun names its models from 1 again

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        key = self._keys.get(report.nodeid)  # None on an xdist controller: workers report it
        if key is not None and report.when == "call" and report.passed:
            self.ledger.passed.add(key)

    # -- holding a check against its snapshot --------------------------------------------

    def hold(self, item: pytest.Item, reports: list[TraceReport], options: TraceOptions) -> list[Verdict | None]:
        """Compare (or, with ``--fx-snapshot-update``, write) the code of each passing check;
        a missing or different snapshot turns the report into a failure. One verdict per
        report (None: the snapshot has nothing to say)."""
        if not options.snapshot or options.xfail:
            return [None] * len(reports)
        from pytest_fxtrace.tracereport import (
            report_label as model_label,  # the engine: imported once a model was checked
        )

        seen = item.stash.setdefault(_MODELS_SEEN, {})
        verdicts: list[Verdict | None] = []
        for report in reports:
            # every checked model counts, so names stay put when an earlier model fails; each
            # backend counts its own (a model checked by fx and export is ResNet in both files)
            key = (report.model_name, report.backend)
            seen[key] = index = seen.get(key, 0) + 1
            if not report.ok or report.code is None:
                verdicts.append(None)
                continue
            snapshot_id = SnapshotId(
                item.path.parent, item.path.name, _test_id(item), report.model_name, index, report.backend
            )
            try:
                verdicts.append(self._hold_one(item, report, snapshot_id))
            except (SnapshotFileError, OSError) as exc:
                # a broken or unwritable snapshot fails this check with what to do, not a traceback
                if isinstance(exc, SnapshotFileError):
                    message = f"{model_label(report)}: {exc}"
                else:
                    message = (
                        f"{model_label(report)}: cannot write the snapshot "
                        f"{getattr(exc, 'filename', None) or snapshot_id.path(self.directory)}: "
                        f"{exc.strerror or exc}; make its directory writable (ini fxtrace_snapshot_dir "
                        "names it)"
                    )
                verdicts.append(Verdict(False, Status.SNAPSHOT_MISMATCH, message))
        return verdicts

    def normalize(self, item: pytest.Item, code: str, graph_module: Any = None) -> str:
        """The snapshot body: the normalised code and the list of what the graph calls
        and reads (``snapshot.snapshot_body``), then each ``pytest_fxtrace_normalize_code``
        implementation in hook order, each given the previous one's result."""
        text = snapshot_body(code, graph_module, self.roots)
        caller = item.ihook.pytest_fxtrace_normalize_code
        for impl in reversed(caller.get_hookimpls()):
            if impl.hookwrapper or getattr(impl, "wrapper", False):
                continue
            given = {"code": text, "config": self.config}
            result = impl.function(*(given[name] for name in impl.argnames))
            if result is None:
                continue
            if not isinstance(result, str):
                raise TypeError(
                    f"pytest_fxtrace_normalize_code in {impl.plugin_name} returned "
                    f"{type(result).__name__}; return the normalised code as str, or None"
                )
            text = tidy(result)
        return text

    def _hold_one(self, item: pytest.Item, report: TraceReport, snapshot_id: SnapshotId) -> Verdict | None:
        from pytest_fxtrace.tracereport import report_label as model_label

        path = snapshot_id.path(self.directory)
        key = path.as_posix()
        # torch.fx's code calls the GraphModule's submodules and attributes, listed after it;
        # an exported program's code lists its own inputs (export_code)
        body = self.normalize(item, report.code or "", report.graph_module if lists_attributes(report.backend) else None)
        broken = False
        try:
            expected = read_snapshot(path)
        except SnapshotFileError:
            if not self.update:
                raise
            expected, broken = None, True  # an update run writes over a broken file
        self.ledger.used.add(key)
        if expected is not None and same_code(expected.body, body):
            return None
        shown = self._shown(path)
        if self.update:
            write_atomic(path, make_snapshot(snapshot_id, report.model or "", _torch_version(), body).render())
            created = expected is None and not broken
            (self.ledger.created if created else self.ledger.updated).add(key)
            if self.written_log is not None:  # one short line, appended at once: whole after a kill
                with open(self.written_log, "a", encoding="utf-8") as log:
                    log.write(f"{'created' if created else 'updated'}\t{key}\n")
            message = f"{report.message}; snapshot {'created' if created else 'updated'}: {shown}"
            return Verdict(report.ok, report.status, message)
        accept = f"pytest --fx-snapshot-update {shlex.quote(self._node_arg(item))}"
        label = model_label(report)
        if expected is None:
            self.ledger.missing.add(key)
            return Verdict(
                False,
                Status.SNAPSHOT_MISSING,
                f"{label} {backend_words(report.backend).past} and matched eager, but has no "
                f"golden snapshot of its generated code yet ({shown})\n  create it with: {accept}",
            )
        self.ledger.mismatched.add(key)
        actual = self._write_actual(snapshot_id, report, body)
        limit = None if self.config.get_verbosity() >= 2 else DIFF_LINES
        diff = unified_diff(expected.body, body, f"{shown} (snapshot)", "generated now", limit)
        lines = [
            f"{label}: the generated code differs from the golden snapshot {shown} "
            f"({diff.counts()})",
            *("    " + line for line in diff.text.splitlines()),
        ]
        if diff.cut:
            lines.append(f"    ... {diff.left_out()} (-vv shows all)")
        if actual is not None:
            lines.append(f"  actual code: {actual}")
        written_on, running = expected.header.get("torch"), _torch_version()
        if written_on and written_on != running:
            lines.append(
                f"  the snapshot was written on torch {written_on}, this is torch {running}: "
                "torch releases can generate different code for the same model"
            )
        lines.append(f"  accept the change with: {accept}")
        return Verdict(False, Status.SNAPSHOT_MISMATCH, "\n".join(lines))

    def _write_actual(self, snapshot_id: SnapshotId, report: TraceReport, body: str) -> Path | None:
        """The new code under pytest's basetemp, as the snapshot file would be written."""
        factory = tmp_path_factory(self.config)
        if factory is None:  # -p no:tmpdir
            return None
        path = (
            factory.getbasetemp()
            / "fxtrace-actual"
            / snapshot_id.path(".").relative_to(snapshot_id.module_dir)
        )
        write_atomic(path, make_snapshot(snapshot_id, report.model or "", _torch_version(), body).render())
        return path

    def _shown(self, path: Path) -> str:
        return os.path.relpath(path, self.config.invocation_params.dir)

    def _node_arg(self, item: pytest.Item) -> str:
        module = os.path.relpath(item.path, self.config.invocation_params.dir)
        return f"{Path(module).as_posix()}::{_test_id(item)}"

    # -- xdist ---------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if not self.update:
            return
        if self.written_log is None:
            handle, name = tempfile.mkstemp(prefix="fxtrace-written-", suffix=".log")
            os.close(handle)
            self.written_log = Path(name)
            self.config.add_cleanup(lambda: Path(name).unlink(missing_ok=True))  # if the end never read it
        node.workerinput[WRITTEN_LOG_KEY] = str(self.written_log)

    def _read_written_log(self) -> None:
        """The files the workers wrote, from their log (a worker's ledger may never have
        come back: Ctrl-C); the log is removed."""
        log, self.written_log = self.written_log, None
        if log is None:
            return
        try:
            lines = log.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        log.unlink(missing_ok=True)
        for line in lines:
            what, _, key = line.partition("\t")
            if key and what in ("created", "updated"):
                (self.ledger.created if what == "created" else self.ledger.updated).add(key)
                self.ledger.used.add(key)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        data = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if data is None:
            self.lost_workers += 1
            return
        self.ledger.merge(Ledger.from_json(data))

    # -- the end of the run --------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = self.ledger.to_json()  # type: ignore[attr-defined]  # pytest-xdist's, on a worker's config
            return
        self._read_written_log()
        roots = sorted(
            {(Path(module).parent, Path(module).parent / self.directory) for module in self.ledger.modules}
        )
        files = [
            (path, module_dir.as_posix(), snapshot)
            for module_dir, root in roots
            for path, snapshot in snapshot_files(root)
        ]
        node_ids = any("::" in arg for arg in self.config.args)
        self.orphans = find_orphans(self.ledger, files, module_complete=not node_ids)
        if not self.update:
            return
        for _, root in roots:
            for temp in stale_temp_files(root):
                temp.unlink(missing_ok=True)
        self.kept_because = self._partial_reason(exitstatus)
        if self.orphans and self.kept_because is None:
            for path in self.orphans:
                path.unlink(missing_ok=True)
                self.deleted.append(path)
                try:
                    path.parent.rmdir()  # only succeeds once the module's last snapshot is gone
                except OSError:
                    pass
            self.orphans = []

    def _partial_reason(self, exitstatus: int) -> str | None:
        """Why this run may not delete orphans (None: it selected every test)."""
        if self.keep_orphans:
            return "asked to by --fx-snapshot-keep-orphans"
        option = self.config.option
        for name, flag in (
            ("keyword", "-k"),
            ("markexpr", "-m"),
            ("lf", "--lf"),
            ("deselect", "--deselect"),
            ("stepwise", "--sw"),
            ("stepwise_skip", "--sw-skip"),
        ):
            if getattr(option, name, None):
                return f"this run did not select every test ({flag})"
        if any("::" in arg for arg in self.config.args):
            return "this run did not select every test (node ids)"
        if self.ledger.deselected:
            return f"this run did not select every test ({self.ledger.deselected} deselected)"
        if self.ledger.broken_modules:
            return "some test modules failed to collect"
        if self.lost_workers:
            return "an xdist worker did not report back"
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "the run was interrupted"
        return None

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.is_worker:
            return
        ledger = self.ledger
        changed = [
            *(("created", Path(p)) for p in sorted(ledger.created)),
            *(("updated", Path(p)) for p in sorted(ledger.updated)),
            *(("deleted", p) for p in sorted(self.deleted)),
        ]
        failing = len(ledger.missing) + len(ledger.mismatched)
        if not (changed or self.orphans or failing):
            return
        write = terminalreporter.write_line
        terminalreporter.write_sep("-", "fxtrace snapshots")
        counts = [
            f"{len(items)} {what}"
            for what, items in (
                ("created", ledger.created),
                ("updated", ledger.updated),
                ("deleted", self.deleted),
                ("missing", ledger.missing),
                ("differing", ledger.mismatched),
                ("orphaned", self.orphans),
            )
            if items
        ]
        write(", ".join(counts))
        for what, path in changed:
            write(f"  {what:8} {self._shown(path)}")
        for path in self.orphans:
            write(f"  orphaned {self._shown(path)}")
        if failing:
            write("accept the generated code with: pytest --fx-snapshot-update")
        if self.orphans and not self.update:
            write(
                "orphaned snapshots belong to no test; delete them with a full run: pytest --fx-snapshot-update"
            )
        elif self.orphans:
            write(f"orphaned snapshots kept: {self.kept_because}")


def hold_snapshots(item: pytest.Item, reports: list[TraceReport], options: TraceOptions) -> list[Verdict | None]:
    """The item's checks held against their snapshots, if on: a verdict per report."""
    session = item.config.stash.get(SNAPSHOTS, None)
    if session is None:
        return [None] * len(reports)
    return session.hold(item, reports, options)
