"""Inner pytest sessions started by forking a process that has already imported torch.

Most tests of this suite run a pytest session in a project directory, as a user would: a fresh
``python -m pytest``. Each such process used to pay a Python start and the imports of pytest,
its plugins, torch and torchvision before doing anything (~3-5 CPU s on 2 cores, hundreds of
times per suite). Here one *zygote* process per test process imports them once; each session
is a fork of it that first sets up what a fresh ``python -m pytest`` in that directory sees
(working directory, environment, ``sys.path`` with the directory and ``PYTHONPATH`` first,
``sys.argv``, stdin from ``/dev/null``, stdout and stderr into files, fresh ``random`` and
numpy seeds) and then runs ``pytest``'s console entry. Each session is still its own process:
what one does to its process (modules it imports, torch's global state, threads) is never
seen by the next, and a crash or hang costs that session alone.

The sessions' own pytest-xdist workers are forked the same way: a forked session's
``sys.executable`` is a small script (the zygote's *shim*) that hands execnet's worker
bootstrap (``python -u -c LINE``, its stdin, stdout and stderr) to the zygote, which forks a
worker set up as that process would start (directory, environment, ``sys.path``, a fresh
random stream, the session's process group) and sends its exit status back for the shim to
exit with. Sessions may run side by side (``start_pytest``; ``run_pytest`` waits for one).
Anything else started through ``sys.executable`` (``--fx-isolate``'s checking
processes, a test's own subprocess) is the real Python, which the shim execs.

What a fork cannot give is how a process *starts*. A session runs as a real subprocess
instead when:

- its environment differs from the zygote's in a variable read at start-up or at import
  (``PYTHON*`` but ``PYTHONPATH``, thread counts ``OMP_*``/``MKL_*``/..., ``TORCH*``,
  ``LD_*``, ...): hash seeds, thread pools and torch's import-time configuration;
- a module the zygote imported would come from elsewhere in the session: a ``torch``
  package or module in its directory or on its ``PYTHONPATH`` (a fake older torch);
- the test is marked ``fresh_process`` (start-up tests: what a session imports, how long it
  takes; signals sent to the process);
- ``FXTRACE_TESTS_SUBPROCESS=1`` is set: every session the old way (to compare, or to rule
  this module out when a test behaves differently).

A worker is started, not forked, for the first two reasons too (its session may have set a
start-up variable before starting it), and under ``FXTRACE_TESTS_FORK_WORKERS=0`` (to compare).

Nothing of the package under test is changed by this; it is how the suite starts its
sessions, in one place.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# read by a process when it starts, or by a library when it is imported (the zygote imported
# them with its own environment): a session whose environment differs here runs fresh
START_UP_PREFIXES = (
    "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "TORCH", "PYTORCH_", "LD_", "CUDA_",
    "MALLOC", "ATEN_", "DNNL_", "ONEDNN_", "NUMEXPR_", "TRANSFORMERS_", "HF_", "TIMM_",
)
# read at run time, not at start-up: PYTHONPATH when the fork sets up sys.path; the inductor
# cache folder whenever torch needs it (torch writes it into the environment of a session
# that compiled, from where its xdist workers inherit it)
RUNTIME_VARIABLES = ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")
_STARTED_PYTHONPATH = os.environ.get("PYTHONPATH")  # when conftest imported this module

# what the sessions import, once: pytest, torch with its capture paths, and the model libraries installed beside it. On 2
# cores (CPU s, this suite's environment): Python + pytest 0.3, torch 2.7, torchvision +2.2,
# torch._dynamo +1.7, timm +3 more, the price of every session that used them before
# torch.export._trace: what torch.export imports on its first export (networkx among it), a
# session's first export check 0.41 -> 0.09 CPU s
PRELOAD = ("numpy", "torch", "torch.fx", "torch.export", "torch.export._trace", "torch._dynamo", "torchvision", "timm")
# and the plugin under test, where pytest would not assertion-rewrite it (it cannot rewrite a
# module imported before it): an editable install, whose distribution lists a finder rather
# than the package's files. Its import is compiled from source under PYTHONDONTWRITEBYTECODE=1:
# a trivial forked session 0.41 -> 0.20 CPU s, a forked worker 0.5 -> 0.23; the whole suite
# -n 2: 547 -> 490 CPU s, 305 -> 278 s wall
PLUGIN = "pytest_fxtrace.plugin"
# with it, the engine a session's first check imports (the checks, each backend)
ENGINE = (
    "pytest_fxtrace.entry",
    "pytest_fxtrace.backends.fx.backend",
    "pytest_fxtrace.backends.export.backend",
    "pytest_fxtrace.backends.compile.backend",
)


@functools.cache  # read once per process, not at each session's start
def _plugin_modules() -> tuple[str, ...]:
    """The modules of the plugins pytest loads from their entry points (pytest-xdist,
    pytest-html, ...)."""
    return tuple(entry.value.partition(":")[0] for entry in importlib.metadata.entry_points(group="pytest11"))


def _warm_pytest() -> None:
    """A session run here on an empty folder, for what every session imports as it starts:
    pytest's own plugins and the entry-point plugins, those imported (so assertion-rewritten,
    as a started session has them) by pytest's import hook, so no session warns that it
    cannot rewrite them. Not this package's plugin: the session may not change this process.
    A trivial forked session 0.25 -> 0.1 CPU s (cProfile)."""
    import pytest

    with tempfile.TemporaryDirectory(prefix="fxtrace-warm-up-") as empty, contextlib.suppress(Exception):
        pytest.main(["-p", "no:cacheprovider", "-p", "no:fxtrace", "--collect-only", "-q", f"--rootdir={empty}", empty])


def _pytest_would_rewrite(package: str) -> bool:
    """Whether pytest marks ``package``'s modules for assertion rewriting, as an entry-point
    plugin's whose distribution lists their files (pytest's ``_mark_plugins_for_rewrite``)."""
    try:
        files = importlib.metadata.distribution(package.replace("_", "-")).files or []
    except importlib.metadata.PackageNotFoundError:
        return True
    return any(str(file).startswith(f"{package}/") for file in files)


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    duration: float


def _starts_differently(env: dict[str, str], base: dict[str, str]) -> str | None:
    """The first start-up variable whose value differs between the two environments."""
    for key in sorted(set(env) | set(base)):
        if key.startswith(START_UP_PREFIXES) and key not in RUNTIME_VARIABLES:
            if env.get(key) != base.get(key):
                return key
    return None


def _shadows_a_preload(cwd: str, env: dict[str, str]) -> str | None:
    """A module the zygote imported that the session would import from elsewhere: a
    package or module of that name in its directory or on its ``PYTHONPATH`` (a test's
    fake ``torch`` of another version)."""
    tops = {name.split(".")[0] for name in (*PRELOAD, PLUGIN, *_plugin_modules())} | {"pytest", "_pytest"}
    for folder in [cwd, *_pythonpath(env)]:
        for top in sorted(tops):
            if os.path.isdir(os.path.join(folder, top)) or os.path.isfile(os.path.join(folder, f"{top}.py")):
                return os.path.join(folder, top)
    return None


class Session:
    """A pytest session under way: a forked or a started process whose stdout and stderr go
    to files of its own, until ``wait`` reads them."""

    def __init__(self, args: list[str], *, pid: int, wait: Callable[[float | None], int | None]) -> None:
        self.args, self.pid, self._wait = args, pid, wait
        self.folder = tempfile.TemporaryDirectory(prefix="fxtrace-session-")
        self.stdout = os.path.join(self.folder.name, "stdout")
        self.stderr = os.path.join(self.folder.name, "stderr")
        self.start = time.monotonic()

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> Finished:
        """Its end, or at ``timeout`` its process group killed and ``TimeoutExpired``."""
        try:
            returncode = self._wait(timeout)
            if returncode is None:
                _kill_group(self.pid)
                self._wait(None)
                raise subprocess.TimeoutExpired(["python", "-m", "pytest", *self.args], timeout or 0)
            texts = [Path(path).read_text(errors="replace") for path in (self.stdout, self.stderr)]
            return Finished(returncode, texts[0], texts[1], time.monotonic() - self.start)
        finally:
            self.folder.cleanup()


class Zygote:
    """The forking process of one test process, started on first use. Sessions may run side
    by side: a thread reads the zygote's replies (a session's pid, later its exit status)."""

    def __init__(self) -> None:
        # this process's environment, but the PYTHONPATH it started with: a test may have set
        # its own (a fake torch first) when it starts the first session, and the zygote's
        # imports are every session's. A session's own is set in its fork (RUNTIME_VARIABLES)
        self.env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        if _STARTED_PYTHONPATH is not None:
            self.env["PYTHONPATH"] = _STARTED_PYTHONPATH
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tempfile.gettempdir(), env=self.env, text=True,
        )
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline() or "{}")
        if ready.get("ready") is not True:
            raise RuntimeError(f"the zygote did not start ({self.proc.poll()})")
        self.requests = threading.Lock()  # one request at a time, answered by its pid
        self.replies = threading.Condition()
        self.pids: list[int] = []
        self.codes: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            reply = json.loads(line)
            with self.replies:
                if "returncode" in reply:
                    self.codes[reply["pid"]] = reply["returncode"]
                else:
                    self.pids.append(reply["pid"])
                self.replies.notify_all()
        with self.replies:
            self.gone = True
            self.replies.notify_all()

    def start(self, args: list[str], cwd: str, env: dict[str, str]) -> Session:
        assert self.proc.stdin is not None
        with self.requests:
            session = Session(args, pid=0, wait=lambda timeout: self._returncode(session.pid, timeout))
            request = {"args": args, "cwd": cwd, "env": env, "stdout": session.stdout, "stderr": session.stderr}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            with self.replies:
                self.replies.wait_for(lambda: self.pids or self.gone)
                if not self.pids:
                    raise RuntimeError(f"the zygote exited ({self.proc.poll()})")
                session.pid = self.pids.pop(0)
        return session

    def _returncode(self, pid: int, timeout: float | None) -> int | None:
        with self.replies:
            self.replies.wait_for(lambda: pid in self.codes or self.gone, timeout)
            if pid not in self.codes and self.gone:
                raise RuntimeError(f"the zygote exited ({self.proc.poll()}) while session {pid} ran")
            return self.codes.pop(pid, None)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_zygote: Zygote | None = None


def _the_zygote() -> Zygote:
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = Zygote()
        # waited for at exit, so that its sessions' CPU counts towards this process's
        # children (`time pytest ...` sees it, as it saw the subprocesses')
        atexit.register(_zygote.close)
    return _zygote


def start_pytest(
    args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None, fresh: bool = False,
) -> Session:
    """``python -m pytest *args`` started in ``cwd`` with environment ``env`` (default: this
    process's), forked from the zygote unless the session must start fresh (see the module's
    text); sessions may run side by side."""
    environ = dict(os.environ if env is None else env)
    cwd = os.fspath(cwd)
    if fresh or os.environ.get("FXTRACE_TESTS_SUBPROCESS") == "1" or not hasattr(os, "fork"):
        return _subprocess(args, cwd, environ)
    zygote = _the_zygote()
    if _starts_differently(environ, zygote.env) or _shadows_a_preload(cwd, environ):
        return _subprocess(args, cwd, environ)
    return zygote.start(args, cwd, environ)


def run_pytest(
    args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None,
    timeout: float | None = None, fresh: bool = False,
) -> Finished:
    """``start_pytest``, waited for: its end, or at ``timeout`` its process group killed and
    ``subprocess.TimeoutExpired``."""
    return start_pytest(args, cwd=cwd, env=env, fresh=fresh).wait(timeout)


def pytest_process(
    args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``run_pytest`` as ``subprocess.run([python, -m, pytest, *args], capture_output=True,
    text=True)`` returns it."""
    done = run_pytest(args, cwd=cwd, env=env, timeout=timeout)
    return subprocess.CompletedProcess(["python", "-m", "pytest", *args], done.returncode, done.stdout, done.stderr)


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell has it, then ``extra``: without this
    suite's own pytest variables (``PYTEST_*``, which its xdist worker sets), its CI's
    (``GITHUB_*``: a session would annotate this suite's job), and the terminal size its worker
    passes on (``COLUMNS``, ``LINES``)."""
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "GITHUB_")) and key not in ("COLUMNS", "LINES")
    }
    env.update(extra)
    return env


def run_in_project(project: str | os.PathLike[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -p no:cacheprovider *args`` in ``project``, with ``user_env(**env)``."""
    return pytest_process(["-p", "no:cacheprovider", *args], cwd=project, env=user_env(**env), timeout=600)


def _subprocess(args: list[str], cwd: str, env: dict[str, str]) -> Session:
    def wait(timeout: float | None) -> int | None:
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    session = Session(args, pid=0, wait=wait)
    with open(session.stdout, "w") as stdout, open(session.stderr, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=stderr, start_new_session=True,  # a group of its own, as a forked one
        )
    session.pid = process.pid
    return session


# --- the zygote's side --------------------------------------------------------------------
#
# The zygote serves two kinds of request in one loop, without threads: a session (a line on
# its stdin from the test process: fork, reply the pid, later the exit status) and a Python
# a session starts with the zygote's worker shim as ``sys.executable`` (pytest-xdist's
# workers, ``[python, -u, -c, bootstrap]``: a connection on its socket carrying the shim's
# stdin, stdout and stderr; fork one that runs the bootstrap, later send the exit status).
# Anything else the shim is asked to run, and a worker whose environment starts differently,
# is the real Python, exec'd by the shim.

# execnet's (pytest-xdist's) bootstrap for a popen gateway: ``python [-u] [-B] -c LINE``
XDIST_BOOTSTRAP = "import sys;exec(eval(sys.stdin.readline()))"

SHIM = """#!{python} -IS
# pytest-xdist's workers of a forked session (tests/forked_pytest.py): the bootstrap line is
# forked from the zygote at {socket}; anything else is the real Python
import json, os, signal, socket, sys

python, args = {python!r}, sys.argv[1:]
flags = set(args[:-2])
if args[-2:] == ["-c", {boot!r}] and flags <= {{"-u", "-B"}}:
    conn = socket.socket(socket.AF_UNIX)
    conn.connect({socket!r})
    request = {{"cwd": os.getcwd(), "env": dict(os.environ), "flags": sorted(flags), "pgid": os.getpgrp()}}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    conn.shutdown(socket.SHUT_WR)
    reply = b""
    while not reply.endswith(b"\\n"):
        chunk = conn.recv(4096)
        if not chunk:
            os._exit(1)  # the zygote went away
        reply += chunk
    answer = json.loads(reply)
    if "exit" in answer:
        if answer["exit"] < 0:  # ended by a signal: end by the same one
            signal.signal(-answer["exit"], signal.SIG_DFL)
            os.kill(os.getpid(), -answer["exit"])
        os._exit(answer["exit"])
os.execv(python, [python, *args])
"""


class _Serving:
    """The zygote's state: its sessions and workers by pid, and where replies go."""

    def __init__(self, reply, site_path: list[str], devnull: int, env: dict[str, str]) -> None:  # noqa: ANN001
        self.reply, self.site_path, self.devnull, self.env = reply, site_path, devnull, env
        self.sessions: set[int] = set()
        self.workers: dict[int, socket.socket] = {}
        self.events: selectors.BaseSelector | None = None
        self.folder = tempfile.mkdtemp(prefix="fxtrace-zygote-")
        self.shim = os.path.join(self.folder, "python")
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(os.path.join(self.folder, "socket"))
        self.listener.listen(16)
        text = SHIM.format(python=sys.executable, socket=self.listener.getsockname(), boot=XDIST_BOOTSTRAP)
        Path(self.shim).write_text(text)
        os.chmod(self.shim, 0o700)
        self.wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through the pipe

    def send(self, message: dict) -> None:
        self.reply.write(json.dumps(message) + "\n")
        self.reply.flush()

    def in_child(self) -> None:
        """What a forked session or worker must not keep of the zygote's serving."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for conn in self.workers.values():
            conn.close()
        for resource in (self.listener, self.reply, *([self.events] if self.events else [])):
            resource.close()
        os.close(self.wakeup_r)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if pid in self.sessions:
                self.sessions.discard(pid)
                self.send({"pid": pid, "returncode": code})
            elif pid in self.workers:
                conn = self.workers.pop(pid)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
                conn.close()


def _serve() -> None:
    atexit.register(_exit_now)  # before any import registers one: it runs last (_end)
    start_env = dict(os.environ)  # before the imports: what a worker's start is compared with
    reply = os.fdopen(os.dup(1), "w")  # replies go here; stray prints of imports go nowhere
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    site_path = [entry for entry in sys.path if entry and entry not in _pythonpath(os.environ)]
    # numpy's OpenBLAS starts a pool of threads when it loads (blas_thread_server, one per
    # core but the caller): with them the zygote could not fork safely (_only_thread). A BLAS
    # of one thread in the zygote, so in every forked process; a session's own environment
    # (with the variable as the test set it) is put in place in its fork, as the rest
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import pytest  # noqa: F401

    # the entry-point plugins not by name: pytest marks them for assertion rewriting before it
    # imports them (_warm_pytest imports them so), and pytest-xdist keeps the sys.path of its
    # import for its workers (_as_started gives it each process's)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    if not _pytest_would_rewrite(PLUGIN.split(".")[0]):
        for name in (PLUGIN, *ENGINE):
            importlib.import_module(name)
    # inspect's table of which module holds which file, built on the first lookup of a
    # source file (TorchDynamo's first compile, a diagnosis): 0.16 CPU s, once here
    inspect.getmodule(compile("", "<zygote>", "exec"))
    _warm_pytest()
    # what the imports made stays out of the collector's reach: a forked process's first
    # collections would otherwise walk (and so write, copying each page) every object of them.
    # Measured, the whole suite -n 2: a forked session 1.34 -> 0.80 CPU s on average (188 of
    # them), a forked worker 1.61 -> 0.99, the suite 741 -> 547 CPU s, 411 -> 305 s wall
    gc.freeze()
    serving = _Serving(reply, site_path, devnull, start_env)
    zygote = os.getpid()
    try:
        serving.send({"ready": True})
        _loop(serving)
    finally:
        if os.getpid() == zygote:  # not a session or worker leaving through here (_end)
            shutil.rmtree(serving.folder, ignore_errors=True)


def _loop(serving: _Serving) -> None:
    pending = b""
    serving.events = events = selectors.DefaultSelector()
    events.register(0, selectors.EVENT_READ, "session")
    events.register(serving.listener, selectors.EVENT_READ, "worker")
    events.register(serving.wakeup_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in events.select():
            if key.data == "child":
                os.read(serving.wakeup_r, 4096)
                serving.reap()
            elif key.data == "worker":
                _fork_worker(serving, serving.listener.accept()[0])
            else:
                chunk = os.read(0, 1 << 20)
                if not chunk:
                    return  # the test process closed our stdin: its end
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    _fork_session(serving, json.loads(line))


def _only_thread() -> None:
    """Refuse to fork with a second thread alive: the child would get a copy of whatever
    lock that thread held (an intra-op pool of torch's, a logging handler's) and hang on it
    one day, so the zygote must stay single-threaded (imports, warm-up session and all)."""
    with contextlib.suppress(OSError):  # no /proc: nothing to tell by
        threads = os.listdir(f"/proc/{os.getpid()}/task")
        if len(threads) != 1:
            names = ", ".join(sorted(t.name for t in threading.enumerate()))
            raise RuntimeError(
                f"the zygote has {len(threads)} threads, so it cannot fork safely (Python's: {names}); "
                "whatever started them (an import or the warm-up session) must not run in the zygote"
            )


def _fork() -> int:
    _only_thread()
    return os.fork()


def _fork_session(serving: _Serving, request: dict) -> None:
    sys.stdout.flush()  # nothing of the zygote's own output may reach a session's files
    sys.stderr.flush()
    pid = _fork()
    if pid == 0:
        serving.in_child()
        _session(request, serving)  # never returns
    serving.sessions.add(pid)
    serving.send({"pid": pid})


def _fork_worker(serving: _Serving, conn: socket.socket) -> None:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while chunk := conn.recv(1 << 20):
        message += chunk
    request = json.loads(message)
    fresh = _starts_differently(request["env"], serving.env) or _shadows_a_preload(request["cwd"], request["env"])
    if fresh or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.sendall(b'{"fresh": true}\n')  # the shim execs the real Python
        conn.close()
        return
    pid = _fork()
    if pid == 0:
        serving.in_child()
        _worker(request, fds, serving)  # never returns
    for fd in fds:
        os.close(fd)
    serving.workers[pid] = conn


def _worker(request: dict, fds: list[int], serving: _Serving) -> None:
    """``python [-u] [-B] -c XDIST_BOOTSTRAP`` as the session's worker would have started."""
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, request["pgid"])  # the session's group: its time limit kills workers too
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _as_started(request["cwd"], request["env"], "", serving.site_path, shim=serving.shim)
        unbuffered = "-u" in request["flags"]
        sys.dont_write_bytecode = sys.dont_write_bytecode or "-B" in request["flags"]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0 if unbuffered else -1, closefd=False), write_through=unbuffered)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), write_through=True)  # noqa: SIM115
        sys.argv = ["-c"]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(XDIST_BOOTSTRAP, main.__dict__)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    _end(code)


def _as_started(cwd: str, env: dict[str, str], first: str, site_path: list[str], *, shim: str) -> None:
    """What a process started in ``cwd`` with ``env`` sees: its directory, its environment,
    ``sys.path`` with ``first`` (the directory, or ``''`` for ``-c``) and ``PYTHONPATH`` before
    the site's, a fresh random stream, and this zygote's shim as the Python it starts."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = [first, *_pythonpath(env), *site_path]
    # pytest-xdist's copy of sys.path as the interpreter started, which its workers get
    # (_warm_pytest imported it here, with the zygote's): this process's
    xdist_plugin = sys.modules.get("xdist.plugin")
    if xdist_plugin is not None and isinstance(getattr(xdist_plugin, "_sys_path", None), list):
        xdist_plugin._sys_path[:] = sys.path
    importlib.invalidate_caches()
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if env.get("FXTRACE_TESTS_FORK_WORKERS") != "0":  # 0: workers started, to compare
        sys.executable = shim


def _end(code: int) -> None:
    """End as a fresh process would, by the interpreter's own exit (``sys.exit``, not
    ``atexit``'s private ``_run_exitfuncs``): its non-daemon threads joined, the exit handlers
    run (the process's own, and those of the imports the zygote made for it), the streams
    flushed, then ``_exit_now``. The exit unwinds the zygote's loop, whose frames the fork
    copied, so nothing of the zygote's own clean-up may run on the way (``_serve``)."""
    _ENDED.append(code)
    sys.exit(code)


_ENDED: list[int] = []  # a forked session's or worker's exit status, once it ends (_end)


def _exit_now() -> None:
    """The last exit handler (the first registered, by the zygote before its imports): a
    forked process ends here, after its threads were joined and every other handler ran,
    without the interpreter's teardown of the modules the zygote imported for it, which a
    session would pay for again and again (a trivial session 0.14 -> 0.51 s wall)."""
    if _ENDED:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(_ENDED[0])


def _pythonpath(env: Mapping[str, str]) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _session(request: dict, serving: _Serving) -> None:
    code = 1
    try:
        os.setpgid(0, 0)  # its own group: a time limit kills it and the workers it started
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.dup2(serving.devnull, 0)
        _as_started(request["cwd"], request["env"], request["cwd"], serving.site_path, shim=serving.shim)
        import pytest

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
        code = int(pytest.main())  # what `python -m pytest` exits with
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    _end(code)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    sys.path[:] = [entry for entry in sys.path[1:]]  # not this folder: the session's modules are its own
    _serve()
