"""``--fx-isolate``: zoo checks in spawned child processes, so one model's crash,
memory blow-up or native-code hang costs that model, not the session.

Each pytest process (an xdist worker included) keeps one child: a fresh interpreter
(``python -m pytest_fxtrace.zoo.child``, never a fork: fork is unsafe with CUDA and
torch's threads) that imports torch once and then checks model after model, so a
model does not pay for ``import torch``. The parent sends a ``Job`` (registry, model
name, the ini / command line option layers), watches the child's resident memory
(``/proc/<pid>/status``) and the clock, and gets back the ``TraceReport`` without its
GraphModule. A child that dies (a signal, ``os.abort()``), passes ``--fx-max-rss`` or
the time limit (``--fx-timeout``; the child is killed, native code included) is
replaced, and the model's record says ``crashed`` or ``timeout``.

The child writes its stdout and stderr to a log file; a crash's record quotes its tail.
Under ``-n N`` each child gets its share of the CPUs as torch's thread count
(``OMP_NUM_THREADS``, unless the user set it): N children with a thread per CPU each
oversubscribe the machine, and OpenMP's spinning barriers then make a check up to 20x
slower (measured: the same 8-conv loop took 7.7 s with two 2-thread processes on 2 cores
at once, 0.36 s alone).
User hooks (``pytest_fxtrace_make_tracer`` / ``_compare`` in a conftest.py) do not run
in the child: it has no pytest session.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.types import Status
from pytest_fxtrace.zoo.child import Job
from pytest_fxtrace.zoo.threads import child_threads

if TYPE_CHECKING:
    from pytest_fxtrace.tracereport import TraceReport

START_LIMIT = 300.0  # seconds a child may take to import torch and the engine
POLL = 0.05  # seconds between memory checks
GRACE = 1.0  # seconds past the time limit before the child is killed: the check's own alarm speaks first


@dataclasses.dataclass
class Outcome:
    """What came back: a report (``payload``), or why nothing did."""

    payload: Any = None
    crashed: str | None = None
    timed_out: bool = False
    peak_rss: int = 0  # bytes, as the parent saw it


def _rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _gb(n: float) -> str:
    return f"{n / 2**30:g} GB"


class Child:
    """One spawned checking process."""

    def __init__(self, log_dir: str) -> None:
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        fd, self.log = tempfile.mkstemp(prefix="fxtrace-child-", suffix=".log", dir=log_dir)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.setdefault("OMP_NUM_THREADS", child_threads(env))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_fxtrace.zoo.child", str(job_r), str(res_w)],
            pass_fds=(job_r, res_w),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env=env,
            start_new_session=True,  # a Ctrl-C to pytest is pytest's to handle
        )
        os.close(fd)
        os.close(job_r)
        os.close(res_w)
        self.jobs = Connection(job_w, readable=False)
        self.results = Connection(res_r, writable=False)
        self.peak_rss = 0
        self.checks = 0

    def wait_ready(self) -> str | None:
        """None once the child has imported the engine, else why it did not."""
        outcome = self._wait(START_LIMIT, None)
        if outcome.payload == "ready":
            return None
        return outcome.crashed or "the checking process did not start"

    def run(self, job: Job, limit: float | None, max_rss: int | None) -> Outcome:
        try:
            self.jobs.send(job)
        except OSError as exc:
            return Outcome(crashed=f"the checking process could not take the job ({exc})")
        self.checks += 1
        return self._wait(limit, max_rss)

    def _wait(self, limit: float | None, max_rss: int | None) -> Outcome:
        deadline = None if limit is None else time.monotonic() + limit
        peak = 0
        while True:
            try:
                if self.results.poll(POLL):
                    payload = self.results.recv()
                    return Outcome(payload=payload, peak_rss=peak)
            except (EOFError, OSError):
                pass  # the child closed its end: it died
            code = self.proc.poll()
            if code is not None:
                return Outcome(crashed=self._death(code), peak_rss=peak)
            rss = _rss(self.proc.pid)
            peak = max(peak, rss)
            self.peak_rss = max(self.peak_rss, rss)
            if max_rss is not None and rss > max_rss:
                self.kill()
                return Outcome(
                    crashed=f"its process reached {rss / 2**20:.0f} MB of memory, past --fx-max-rss={_gb(max_rss)}",
                    peak_rss=peak,
                )
            if deadline is not None and time.monotonic() > deadline:
                self.kill()
                return Outcome(timed_out=True, peak_rss=peak)

    def _death(self, code: int) -> str:
        if code < 0:
            try:
                what = f"signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"signal {-code}"
        else:
            what = f"exit status {code}"
        return f"its process died ({what}){self._log_tail()}"

    def _log_tail(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                lines = [line.rstrip() for line in f.read().splitlines()[-6:] if line.strip()]
        except OSError:
            return ""
        return ("; its last output:\n    " + "\n    ".join(lines)) if lines else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.jobs.close()
        self.results.close()

    def close(self) -> None:
        try:
            self.jobs.send(None)
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        try:
            os.unlink(self.log)
        except OSError:
            pass


class Pool:
    """This process's checking child, started on first use and replaced when it dies."""

    def __init__(self, config: pytest.Config, max_rss: int | None) -> None:
        self.config = config
        self.max_rss = max_rss
        self.child: Child | None = None
        self.started = 0
        self.peak_rss = 0
        self.log_dir = tempfile.mkdtemp(prefix="fxtrace-isolate-")

    def run(self, job: Job, options: Any) -> Any:
        """The model's ``TraceReport``: the child's, or ``crashed`` / ``timeout``."""
        child = self.child
        if child is None or not child.alive():
            child = self.child = Child(self.log_dir)
            self.started += 1
            problem = child.wait_ready()
            if problem is not None:
                self._drop()
                return _failed(job, Status.CRASHED, f"{job.name}: {problem}", options)
        limit = None if options.timeout is None else options.timeout + GRACE
        outcome = child.run(job, limit, self.max_rss)
        self.peak_rss = max(self.peak_rss, child.peak_rss)
        if outcome.timed_out:
            self._drop()
            return _failed(
                job,
                Status.TIMEOUT,
                f"{job.name}: the check did not finish within timeout={options.timeout:g} s and its "
                "process was killed; raise the limit (--fx-timeout, ini fxtrace_timeout) or exclude "
                "the model (--fx-zoo-exclude)",
                options,
            )
        if outcome.crashed is not None:
            self._drop()
            return _failed(job, Status.CRASHED, f"{job.name} crashed the check: {outcome.crashed}", options)
        report = dataclasses.replace(outcome.payload, options=options)
        if self.max_rss is not None and _rss(child.proc.pid) > self.max_rss:
            self._drop()  # what the last model left behind would count against the next one
        return report

    def _drop(self) -> None:
        if self.child is not None:
            self.child.kill()
            try:
                os.unlink(self.child.log)
            except OSError:
                pass
            self.child = None

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None
        try:
            os.rmdir(self.log_dir)
        except OSError:
            pass


def _failed(job: Job, status: Status, message: str, options: Any) -> TraceReport:
    from pytest_fxtrace.tracereport import TraceReport

    return TraceReport(
        ok=False, status=status, model=f"{job.source}:{job.name}", message=message, options=options,
        backend=options.backend[0] if options.backend else DEFAULT_BACKEND,
    )  # fmt: skip


# -- pytest ---------------------------------------------------------------------------

POOL = pytest.StashKey["Pool | None"]()


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxtrace")
    group.addoption(
        "--fx-isolate",
        action="store_true",
        default=None,
        help="check zoo models in spawned child processes (crashes, memory and hangs cost one model)",
    )
    group.addoption(
        "--fx-max-rss",
        metavar="GB",
        default=None,
        help="with --fx-isolate: kill a check whose process passes this much resident memory",
    )
    parser.addini("fxtrace_isolate", "see --fx-isolate", type="bool", default=False)
    parser.addini("fxtrace_max_rss", "see --fx-max-rss (GB)", default="")


def register(config: pytest.Config) -> None:
    """Called from ``plugin.pytest_configure``: the pool (started lazily) when asked for."""
    isolate = config.getoption("fx_isolate")
    if isolate is None:
        isolate = config.getini("fxtrace_isolate")
    raw = config.getoption("fx_max_rss") or config.getini("fxtrace_max_rss") or None
    max_rss = None
    if raw is not None:
        try:
            max_rss = int(float(raw) * 2**30)
            if max_rss <= 0:
                raise ValueError
        except ValueError:
            raise pytest.UsageError(f"--fx-max-rss={raw}: expected a positive number of GB, e.g. --fx-max-rss=4") from None
        if not isolate:
            raise pytest.UsageError("--fx-max-rss needs --fx-isolate: only a child process can be killed for its memory")
    if not isolate:
        config.stash[POOL] = None
        return
    pool = Pool(config, max_rss)
    config.stash[POOL] = pool
    config.add_cleanup(pool.close)
    summary = PoolSummary(config, pool)
    config.pluginmanager.register(summary, "fxtrace-isolate")
    config.add_cleanup(lambda: config.pluginmanager.unregister(summary))


class PoolSummary:
    """One summary line: how many checking processes each pytest process started and
    the most resident memory one reached (xdist workers hand theirs over)."""

    KEY = "fxtrace_isolate"

    def __init__(self, config: pytest.Config, pool: Pool) -> None:
        self.config = config
        self.pool = pool
        self.stats: dict[str, tuple[int, int]] = {}  # process -> (children started, peak RSS)

    def pytest_sessionfinish(self) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:
            output[self.KEY] = (self.pool.started, self.pool.peak_rss)
        elif self.pool.started:
            self.stats["main"] = (self.pool.started, self.pool.peak_rss)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        stats = getattr(node, "workeroutput", {}).get(self.KEY)
        if stats and stats[0]:
            self.stats[node.gateway.id] = tuple(stats)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if hasattr(self.config, "workerinput") or not self.stats:
            return
        parts = [f"{name}: {started} started, peak {peak / 2**30:.2f} GB" for name, (started, peak) in sorted(self.stats.items())]
        terminalreporter.write_line("fxtrace isolated checks (processes per pytest process, peak RSS): " + "; ".join(parts))


def pool_for(config: pytest.Config) -> Pool | None:
    return config.stash.get(POOL, None)
