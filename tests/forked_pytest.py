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

Nothing of the package under test is changed by this; it is how the suite starts its
sessions, in one place.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

# read by a process when it starts, or by a library when it is imported (the zygote imported
# them with its own environment): a session whose environment differs here runs fresh
START_UP_PREFIXES = (
    "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "TORCH", "PYTORCH_", "LD_", "CUDA_",
    "MALLOC", "ATEN_", "DNNL_", "ONEDNN_", "NUMEXPR_", "TRANSFORMERS_", "HF_", "TIMM_",
)
RUNTIME_PYTHON_VARIABLES = ("PYTHONPATH",)  # read when sys.path is set up, which the fork redoes

# what the sessions import, once: pytest, torch with its capture paths, and the model libraries installed beside it. On 2
# cores (CPU s, this suite's environment): Python + pytest 0.3, torch 2.7, torchvision +2.2,
# torch._dynamo +1.7, timm +3 more, the price of every session that used them before
PRELOAD = ("numpy", "torch", "torch.fx", "torch.export", "torch._dynamo", "torchvision", "timm")


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    duration: float


def _starts_differently(env: dict[str, str], base: dict[str, str]) -> str | None:
    """The first start-up variable whose value differs between the two environments."""
    for key in sorted(set(env) | set(base)):
        if key.startswith(START_UP_PREFIXES) and key not in RUNTIME_PYTHON_VARIABLES:
            if env.get(key) != base.get(key):
                return key
    return None


def _shadows_a_preload(cwd: str, env: dict[str, str]) -> str | None:
    """A module the zygote imported that the session would import from elsewhere: a
    package or module of that name in its directory or on its ``PYTHONPATH`` (a test's
    fake ``torch`` of another version)."""
    tops = {name.split(".")[0] for name in PRELOAD} | {"pytest", "_pytest"}
    for folder in [cwd, *_pythonpath(env)]:
        for top in sorted(tops):
            if os.path.isdir(os.path.join(folder, top)) or os.path.isfile(os.path.join(folder, f"{top}.py")):
                return os.path.join(folder, top)
    return None


class Zygote:
    """The forking process of one test process, started on first use."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tempfile.gettempdir(), env=self.env, text=True,
        )
        self.lock = threading.Lock()
        ready = self._reply()
        if ready.get("ready") is not True:
            raise RuntimeError(f"the zygote did not start: {ready}")

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self.proc.poll()})")
        return json.loads(line)

    def run(self, args: list[str], cwd: str, env: dict[str, str], timeout: float | None) -> Finished:
        assert self.proc.stdin is not None
        with self.lock, tempfile.TemporaryDirectory(prefix="fxtrace-fork-") as out:
            outs = {"stdout": os.path.join(out, "stdout"), "stderr": os.path.join(out, "stderr")}
            start = time.monotonic()
            request = {"args": args, "cwd": cwd, "env": env, **outs}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._reply()["pid"]
            done = _Waiter(self)
            returncode = done.wait(timeout)
            if returncode is None:
                _kill_group(pid)
                returncode = done.wait(None)
                raise subprocess.TimeoutExpired(["python", "-m", "pytest", *args], timeout or 0)
            texts = [Path(outs[name]).read_text(errors="replace") for name in ("stdout", "stderr")]
            return Finished(returncode, texts[0], texts[1], time.monotonic() - start)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class _Waiter:
    """The zygote's reply that the session's process ended, read in a thread so that the
    caller can stop waiting at its time limit."""

    def __init__(self, zygote: Zygote) -> None:
        self.result: dict = {}
        self.thread = threading.Thread(target=lambda: self.result.update(zygote._reply()), daemon=True)
        self.thread.start()

    def wait(self, timeout: float | None) -> int | None:
        self.thread.join(timeout)
        return None if self.thread.is_alive() else int(self.result["returncode"])


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


def run_pytest(
    args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None,
    timeout: float | None = None, fresh: bool = False,
) -> Finished:
    """``python -m pytest *args`` in ``cwd`` with environment ``env`` (default: this process's),
    forked from the zygote unless the session must start fresh (see the module's text)."""
    environ = dict(os.environ if env is None else env)
    cwd = os.fspath(cwd)
    if fresh or os.environ.get("FXTRACE_TESTS_SUBPROCESS") == "1" or not hasattr(os, "fork"):
        return _subprocess(args, cwd, environ, timeout)
    zygote = _the_zygote()
    if _starts_differently(environ, zygote.env) or _shadows_a_preload(cwd, environ):
        return _subprocess(args, cwd, environ, timeout)
    return zygote.run(args, cwd, environ, timeout)


def pytest_process(
    args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``run_pytest`` as ``subprocess.run([python, -m, pytest, *args], capture_output=True,
    text=True)`` returns it."""
    done = run_pytest(args, cwd=cwd, env=env, timeout=timeout)
    return subprocess.CompletedProcess(["python", "-m", "pytest", *args], done.returncode, done.stdout, done.stderr)


def _subprocess(args: list[str], cwd: str, env: dict[str, str], timeout: float | None) -> Finished:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return Finished(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


# --- the zygote's side --------------------------------------------------------------------


def _serve() -> None:
    reply = os.fdopen(os.dup(1), "w")  # replies go here; stray prints of imports go nowhere
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    site_path = [entry for entry in sys.path if entry and entry not in _pythonpath(os.environ)]
    import pytest  # noqa: F401

    # not the entry-point plugins: pytest marks them for assertion rewriting before it
    # imports them, and pytest-xdist keeps the sys.path of its import for its workers
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()  # nothing of the zygote's own output may reach a session's files
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _session(request, site_path, devnull, reply)  # never returns
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()
        _, status = os.waitpid(pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
        reply.write(json.dumps({"returncode": returncode}) + "\n")
        reply.flush()


def _pythonpath(env: dict[str, str] | os._Environ[str]) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _session(request: dict, site_path: list[str], devnull: int, reply) -> None:  # noqa: ANN001
    code = 1
    try:
        os.setpgid(0, 0)  # its own group: a time limit kills it and the workers it started
        reply.close()
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.dup2(devnull, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = [request["cwd"], *_pythonpath(request["env"]), *site_path]
        importlib.invalidate_caches()
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        import pytest

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
        code = int(pytest.main())  # what `python -m pytest` exits with
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # a fresh process would end by finalising the interpreter: the exit handlers run (the
    # session's, and those of the imports the zygote made for it), then the process ends
    # without returning into the zygote's loop
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    sys.path[:] = [entry for entry in sys.path[1:]]  # not this folder: the session's modules are its own
    _serve()
