"""Golden snapshots as a user meets them: turning them on, messages, names, files, hooks,
xdist and interrupted update runs (end to end through pytest subprocesses).

One project holds the cases that need only a check run and an update run of their own
models, each in its own test module (a missing snapshot, a capped diff, the ini, hostile
ids, a failing model, swapped leaves, file modes). Its four sessions run once for the
module -- a check, an update, a check after the models changed, an update after that --
and each test reads its behaviour from them. The cases that need a project of their own
(another rootdir, a plugin for the whole session, a usage error, a killed run) keep
pytester.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from shared_project import SharedProject, outcomes

from pytest_fxtrace.testing import MODELS, snapshot_contents, write_project

# the shared project's tests run in one xdist worker under --dist loadgroup (tox's), so its
# sessions run once; the tests with a project of their own are dealt out as usual
shared = pytest.mark.xdist_group(__name__)

STATUS_CONFTEST = """
import pathlib

def pytest_fxtrace_check_finished(item, report):
    with pathlib.Path(__file__).with_name("statuses.txt").open("a") as out:
        out.write(f"{item.name} {report.model_name} {report.status}\\n")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def files(pytester: pytest.Pytester) -> dict[str, bytes]:
    return snapshot_contents(pytester.path)


MISSING_TEST = """
import pytest, torch
from models import Encoder

@pytest.mark.traceable(snapshot=True)
@pytest.mark.parametrize("case", ["a/b", "plain"])
def test_encoder(case):
    Encoder()(torch.randn(1, 3, 8, 8))
"""

DEEP_MODELS = """
import torch
from torch import nn

class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(30))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).{act}()
        return x
"""

DEEP_TEST = """
import torch
from deep_models import Deep

def test_deep(fxtrace):
    fxtrace.check(Deep(), (torch.randn(2, 4),), snapshot=True)
"""

# the project's ini turns snapshots on (every other module's tests say snapshot= themselves)
INI_TEST = """
import pytest, torch
from models import Encoder, Head

@pytest.mark.traceable
def test_on():
    Encoder()(torch.randn(1, 3, 8, 8))

@pytest.mark.traceable(snapshot=False)
def test_off():
    Encoder()(torch.randn(1, 3, 8, 8))

def test_models(fxtrace):
    fxtrace(Encoder(), torch.randn(1, 3, 8, 8))
    fxtrace(Head(), torch.randn(1, 4, 6, 6))
    fxtrace(Encoder(), torch.randn(1, 3, 9, 9))
"""

HOSTILE = [
    "a/b",
    "a_b",
    "../../escape",
    "/etc/passwd",
    "\u00e9t\u00e9",
    "ete",
    "x" * 300,
    "x" * 299 + "y",
    "..",
    "con",
]

HOSTILE_TEST = f"""
import pytest, torch
from models import Head

@pytest.mark.traceable(snapshot=True)
@pytest.mark.parametrize("case", {HOSTILE!r}, ids={HOSTILE!r})
def test_hostile(case):
    Head()(torch.randn(1, 4, 5, 5))
"""

BRANCHY_TEST = """
import pytest, torch
from models import Head

class Branchy(torch.nn.Module):
    def forward(self, x):
        {body}

@pytest.mark.traceable(snapshot=True)
def test_branchy():
    Branchy()(torch.randn(3))
"""

UMASK_TEST = """
import pytest, torch
from models import Encoder

@pytest.mark.traceable(snapshot=True)
def test_umask_encoder():
    Encoder()(torch.randn(1, 3, 8, 8))

@pytest.mark.traceable
def test_untraceable():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    Branchy()(torch.randn(2, 4))
"""

SWAPPABLE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.{norm}(8)
        self.fc = nn.Linear(8, {width})
        self.act = nn.{act}()

    def forward(self, x):
        return self.act(self.fc(self.norm(x)))
"""

# what each swap removes and adds (the same text on every torch: arguments off their
# defaults only; RMSNorm exists from torch 2.4)
SWAPS = [
    ({"act": "GELU"}, "-act: torch.nn.ReLU()", "+act: torch.nn.GELU()"),
    (
        {"width": 12},
        "-fc: torch.nn.Linear(in_features=8, out_features=10)",
        "+fc: torch.nn.Linear(in_features=8, out_features=12)",
    ),
] + (
    [({"norm": "RMSNorm"}, "-norm: torch.nn.LayerNorm((8,))", "+norm: torch.nn.RMSNorm((8,))")]
    if hasattr(torch.nn, "RMSNorm")
    else []
)


NET = {"width": 10, "act": "ReLU", "norm": "LayerNorm"}
NET_TEST = """
import pytest, torch
import net_{key}

@pytest.mark.traceable(snapshot=True)
def test_net_{key}():
    net_{key}.Net()(torch.randn(2, 8))
"""


def swap_key(change: dict[str, object]) -> str:
    """The name a swap's model module and test take: ``net_act``, ``test_net_act``."""
    (key,) = change
    return key


MODULES = ("test_missing", "test_deep", "test_ini", "test_hostile", "test_branchy", "test_net", "test_umask")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One session of the shared project: its output, the status lines the conftest's hook
    wrote (item name, model, status; in order) and every snapshot file after it."""

    result: pytest.RunResult
    statuses: list[str]
    files: dict[str, bytes]

    def statuses_of(self, test: str) -> list[str]:
        return [line for line in self.statuses if line.startswith(test)]

    def files_of(self, module: str) -> dict[str, bytes]:
        return {name: data for name, data in self.files.items() if name.startswith(f"fx_snapshots/{module}/")}


def run_phase(project: SharedProject, *args: str) -> Phase:
    """A session of the shared project with -rA (each test's outcome), in CI, under umask 022
    (the file-mode case reads the modes of what any session wrote)."""
    before = os.umask(0o022)
    try:
        result = project.runpytest_subprocess(
            "-p", "no:cacheprovider", "-rA", *args, env={"CI": "true", "COLUMNS": "200"}
        )
    finally:
        os.umask(before)
    path = project.path / "statuses.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return Phase(result, lines, snapshot_contents(project.path))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    project = SharedProject(tmp_path_factory.mktemp("snapshot_plugin"))
    project.makeini("[pytest]\nfxtrace_snapshot = true\n")
    project.makeconftest(STATUS_CONFTEST)
    project.makepyfile(
        models=MODELS,
        deep_models=DEEP_MODELS.format(act="relu"),
        test_missing=MISSING_TEST,
        test_deep=DEEP_TEST,
        test_ini=INI_TEST,
        test_hostile=HOSTILE_TEST,
        test_branchy=BRANCHY_TEST.format(body="return x * 2"),
        test_net="\n".join(NET_TEST.format(key=swap_key(change)) for change, _, _ in SWAPS),
        test_umask=UMASK_TEST,
    )
    for change, _, _ in SWAPS:
        project.makepyfile(**{f"net_{swap_key(change)}": SWAPPABLE.format(**NET)})
    return project


@pytest.fixture(scope="module")
def first_check(project: SharedProject) -> Phase:
    """Every test, no snapshot on disk yet."""
    return run_phase(project)


@pytest.fixture(scope="module")
def update(project: SharedProject, first_check: Phase) -> Phase:
    """The command the missing snapshot's message prints, the other modules after it, with
    the reports and the baseline the file-mode case reads."""
    others = [f"{module}.py" for module in MODULES if module != "test_missing"]
    return run_phase(
        project, "--fx-snapshot-update", "test_missing.py::test_encoder[a/b]", *others,
        "--fx-report=out/fx.json", "--fx-html=out/fx.html", "--fx-baseline=baseline.json", "--fx-baseline-update",
    )  # fmt: skip


@pytest.fixture(scope="module")
def changed_check(project: SharedProject, update: Phase) -> Phase:
    """A check after the models changed: Deep's activation on its 30 layers, each Net's
    leaf swapped or resized, Branchy's branch on data."""
    project.makepyfile(
        deep_models=DEEP_MODELS.format(act="tanh"),
        test_branchy=BRANCHY_TEST.format(body="return x * 2 if x.sum() > 0 else x"),
    )
    for change, _, _ in SWAPS:
        project.makepyfile(**{f"net_{swap_key(change)}": SWAPPABLE.format(**{**NET, **change})})
    return run_phase(project, f"--basetemp={project.path / 'bt'}")


@pytest.fixture(scope="module")
def second_update(changed_check: Phase, project: SharedProject) -> Phase:
    """An update run of the changed models (every test)."""
    return run_phase(project, "--fx-snapshot-update")


@shared
def test_missing_snapshot_fails_with_the_exact_command_and_is_never_created(
    first_check: Phase, update: Phase
) -> None:
    result = first_check.result
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert outcomes(result)["test_encoder[a/b]"] == outcomes(result)["test_encoder[plain]"] == "FAILED"
    result.stdout.fnmatch_lines(
        [
            "Encoder traced and matched eager, but has no golden snapshot of its generated code yet "
            "(fx_snapshots/test_missing/test_encoder[[]a_b[]]~*.Encoder.fx.txt)",
            "  create it with: pytest --fx-snapshot-update 'test_missing.py::test_encoder[[]a/b[]]'",
        ]
    )
    assert first_check.files == {}
    assert first_check.statuses_of("test_encoder[") == [
        "test_encoder[a/b] Encoder snapshot-missing",
        "test_encoder[plain] Encoder snapshot-missing",
    ]
    # the command it printed creates that snapshot and only that one
    assert update.result.ret == pytest.ExitCode.OK
    (created,) = update.files_of("test_missing")
    assert created.startswith("fx_snapshots/test_missing/test_encoder[a_b]~")
    update.result.stdout.fnmatch_lines(
        [f"{len(update.files)} created", "  created  fx_snapshots/test_missing/test_encoder[[]a_b[]]~*"]
    )
    assert update.statuses_of("test_encoder[") == ["test_encoder[a/b] Encoder passed"]


def diff_lines(result: pytest.RunResult, heading: str) -> list[str]:
    """The indented lines (a diff) right under the line that starts with ``heading``."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.startswith(heading)) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


@shared
def test_mismatch_shows_a_capped_diff_and_writes_the_actual_code_under_basetemp(
    project: SharedProject, update: Phase, changed_check: Phase, second_update: Phase
) -> None:
    assert outcomes(update.result)["test_deep"] == "PASSED"
    ((name, old),) = update.files_of("test_deep").items()
    result = changed_check.result
    assert outcomes(result)["test_deep"] == "FAILED"
    result.stdout.fnmatch_lines(
        [
            f"Deep: the generated code differs from the golden snapshot {name} (60 lines removed, 60 added)",
            f"    --- {name} (snapshot)",
            "    +++ generated now",
            "    -    relu = layers_0.relu();  layers_0 = None",
            "    +    tanh = layers_0.tanh();  layers_0 = None",
            "    ... * more diff lines cut (-vv shows all)",
            "  actual code: */bt/fxtrace-actual/test_deep/test_deep.Deep.fx.txt",
            "  accept the change with: pytest --fx-snapshot-update test_deep.py::test_deep",
        ]
    )
    assert len(diff_lines(result, "Deep: the generated code differs")) <= 45
    assert changed_check.statuses_of("test_deep ") == ["test_deep Deep snapshot-mismatch"]
    assert changed_check.files[name] == old  # a failing run never writes the snapshot
    actual = (project.path / "bt" / "fxtrace-actual" / "test_deep" / "test_deep.Deep.fx.txt").read_bytes()
    assert outcomes(second_update.result)["test_deep"] == "PASSED"
    assert second_update.files[name] == actual  # what was shown is what update writes
    differing = 1 + len(SWAPS)  # Deep and each Net
    result.stdout.fnmatch_lines(
        [f"*{differing} differing*", "accept the generated code with: pytest --fx-snapshot-update"]
    )


@shared
def test_ini_turns_snapshots_on_and_the_marker_turns_them_off(
    first_check: Phase, update: Phase, changed_check: Phase
) -> None:
    tests = ("test_on", "test_off", "test_models")
    assert [outcomes(first_check.result)[test] for test in tests] == ["FAILED", "PASSED", "FAILED"]
    assert update.result.ret == pytest.ExitCode.OK
    assert sorted(update.files_of("test_ini")) == [
        "fx_snapshots/test_ini/test_models.Encoder-2.fx.txt",
        "fx_snapshots/test_ini/test_models.Encoder.fx.txt",
        "fx_snapshots/test_ini/test_models.Head.fx.txt",
        "fx_snapshots/test_ini/test_on.Encoder.fx.txt",
    ]
    text = update.files["fx_snapshots/test_ini/test_models.Head.fx.txt"].decode()
    assert text.splitlines()[1:5] == [
        "# test: test_ini.py::test_models",
        "# model: models.Head",
        f"# torch: {torch.__version__}",
        "",
    ]
    assert "fc = self.fc(mean)" in text
    assert [outcomes(changed_check.result)[test] for test in tests] == ["PASSED"] * 3


@shared
def test_hostile_test_ids_stay_inside_the_snapshot_directory(
    project: SharedProject, update: Phase, changed_check: Phase
) -> None:
    assert update.result.ret == pytest.ExitCode.OK, update.result.stdout.str()
    others = {project.path / "fx_snapshots" / module for module in MODULES if module != "test_hostile"}
    on_disk = [
        p for p in project.path.rglob("*.fx.txt")
        if "runpytest-" not in str(p) and project.path / "bt" not in p.parents and p.parent not in others
    ]  # fmt: skip
    assert len(on_disk) == len(HOSTILE)
    folder = (project.path / "fx_snapshots" / "test_hostile").resolve()
    assert all(p.resolve().parent == folder and p.name.isascii() and len(p.name) < 130 for p in on_disk)
    assert not (project.path.parent / "escape").exists() and not Path("/etc/passwd.Head.fx.txt").exists()
    ran = outcomes(changed_check.result)
    hostile = [word for test, word in ran.items() if test.startswith("test_hostile[")]
    assert hostile == ["PASSED"] * len(HOSTILE)


def test_update_files_are_byte_identical_across_hash_seeds_and_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    contents = []
    for folder, seed, args in (("serial", "1", ("-p", "no:xdist")), ("xdist", "2", ("-n", "2"))):
        write_project(pytester.path / folder)
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        result = run(pytester, *args, "--fx-snapshot-update", folder)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        contents.append(snapshot_contents(pytester.path / folder))
    assert len(contents[0]) == 3 and contents[0] == contents[1]


CHAIN_PLUGIN = """
def pytest_fxtrace_normalize_code(code, config):
    assert "ENCODER-CONV" in code, "the hook did not get the previous hook's result"
    return code + "# seen by the plugin"
"""

CHAIN_CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_fxtrace_normalize_code(code):
    return code.replace("self.conv", "self.ENCODER-CONV")
"""

NONE_CONFTEST = """
def pytest_fxtrace_normalize_code(code, config):
    return None
"""


def test_normalize_hooks_are_chained_in_hook_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(models=MODELS, chain_plugin=CHAIN_PLUGIN)
    pytester.makeconftest(CHAIN_CONFTEST)
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text(NONE_CONFTEST)
    test = """
import pytest, torch
from models import Encoder

@pytest.mark.traceable(snapshot=True)
def test_encoder():
    Encoder()(torch.randn(1, 3, 8, 8))
"""
    (sub / "test_sub.py").write_text(test)
    pytester.makeini("[pytest]\nfxtrace_snapshot_dir = golden/fx\n")
    pytester.syspathinsert()
    result = run(pytester, "-p", "chain_plugin", "--fx-snapshot-update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = (pytester.path / "sub" / "golden" / "fx" / "test_sub" / "test_encoder.Encoder.fx.txt").read_text()
    assert "conv = self.ENCODER-CONV(x)" in text and text.endswith("# seen by the plugin\n")
    assert run(pytester, "-p", "chain_plugin").ret == pytest.ExitCode.OK


def test_bad_snapshot_dir_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfxtrace_snapshot_dir = ../elsewhere\n")
    pytester.makepyfile(test_m="def test_x():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*fxtrace_snapshot_dir = '../elsewhere' must be a plain relative path*"])


@shared
def test_a_failing_model_gets_no_snapshot_and_keeps_its_old_one(update: Phase, second_update: Phase) -> None:
    assert outcomes(update.result)["test_branchy"] == "PASSED"
    before = update.files_of("test_branchy")
    assert list(before) == ["fx_snapshots/test_branchy/test_branchy.Branchy.fx.txt"]
    result = second_update.result  # Branchy now branches on data
    assert result.ret == pytest.ExitCode.TESTS_FAILED and outcomes(result)["test_branchy"] == "FAILED"
    assert second_update.statuses_of("test_branchy ") == ["test_branchy Branchy untraceable"]
    assert second_update.files_of("test_branchy") == before  # neither rewritten nor deleted as an orphan
    assert "deleted" not in result.stdout.str()


BLOCKING_TEST = """

def test_zz_blocks():
    import pathlib, time
    pathlib.Path("ready").write_text("ready")
    time.sleep(120)
"""


def blocked_update(pytester: pytest.Pytester, *args: str, own_group: bool = False) -> subprocess.Popen[bytes]:
    """``pytest --fx-snapshot-update *args`` in the background, returned once its blocking test
    runs (``BLOCKING_TEST`` wrote "ready"); ``own_group``: a process group of its own, as a
    terminal's job, so a signal can reach the controller and its workers at once."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "--fx-snapshot-update"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # the tree under test too (pytester's own runs inherit PYTHONPATH the same way)
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(pytester.path), os.environ.get("PYTHONPATH"))))},
        start_new_session=own_group,
        # as from a terminal: a job started in the background (`cmd &`) inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    ready = pytester.path / "ready"
    while not ready.exists():
        assert process.poll() is None, process.communicate()[0].decode()
        time.sleep(0.05)
    return process


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_an_interrupted_update_leaves_every_snapshot_old_or_new(
    pytester: pytest.Pytester, sig: signal.Signals
) -> None:
    from pytest_fxtrace.testing import CycleProject

    project = CycleProject()
    write_project(pytester.path, project)
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    old = files(pytester)
    # the changed models, an orphan, and a test that blocks until the run is killed
    write_project(pytester.path, project, changed=True, doomed=False)
    with open(pytester.path / "test_cycle.py", "a") as module:
        module.write(BLOCKING_TEST)
    process = blocked_update(pytester, "-p", "no:xdist")
    process.send_signal(sig)
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode != 0, output
    now = files(pytester)
    assert set(now) == set(old), output  # nothing deleted by an interrupted run
    encoder = "fx_snapshots/test_cycle/test_pipeline.Encoder.fx.txt"
    assert now[encoder] != old[encoder] and b"sigmoid" in now[encoder]  # written before the kill
    # the next update run finishes the job and cleans up
    (pytester.path / "test_cycle.py").write_text(project.tests)
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    final = files(pytester)
    for name, data in now.items():
        assert data in (old[name], final.get(name)), f"{name} is neither the old nor the new file"
    leftovers = [p.name for p in (pytester.path / "fx_snapshots").rglob("*") if p.is_file()]
    assert sorted(leftovers) == ["test_pipeline.Encoder.fx.txt", "test_pipeline.Head.fx.txt"]


def test_ctrl_c_under_xdist_names_every_snapshot_a_worker_rewrote(pytester: pytest.Pytester) -> None:
    """Ctrl-C in a terminal signals the controller and its workers: a worker's books then never
    reach the controller, yet each file it rewrote is named in the summary."""
    from pytest_fxtrace.testing import CycleProject

    project = CycleProject()
    write_project(pytester.path, project)
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    old = files(pytester)
    write_project(pytester.path, project, changed=True, doomed=False)
    with open(pytester.path / "test_cycle.py", "a") as module:
        module.write(BLOCKING_TEST)  # last in its module: the worker of the module rewrote the rest
    process = blocked_update(pytester, "-n", "2", "--dist", "loadfile", own_group=True)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole job
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode != 0, output
    rewritten = sorted(name for name, data in files(pytester).items() if data != old.get(name))
    assert rewritten, output
    updated = [line.split()[-1] for line in output.splitlines() if line.startswith("  updated ")]
    assert sorted(updated) == rewritten, output
    assert f"{len(rewritten)} updated" in output, output


@shared
def test_a_swapped_or_resized_leaf_fails_with_a_diff_naming_it(update: Phase, changed_check: Phase) -> None:
    result = changed_check.result
    for change, removed, added in SWAPS:  # the code reads the same each time: self.act(...)
        test = f"test_net_{swap_key(change)}"
        name = f"fx_snapshots/test_net/{test}.Net.fx.txt"
        old = update.files[name]
        assert outcomes(update.result)[test] == "PASSED"
        assert removed[1:].encode() in old  # the golden file says what each call calls
        assert outcomes(result)[test] == "FAILED", change
        result.stdout.fnmatch_lines(
            [
                f"Net: the generated code differs from the golden snapshot {name} (1 line removed, 1 added)",
                f"    --- {name} (snapshot)",
                "    +++ generated now",
                "*",
                f"    {removed}",
                f"    {added}",
            ]
        )
        assert changed_check.files[name] == old


@shared
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_files_a_session_writes_get_the_permissions_the_umask_leaves(
    project: SharedProject, update: Phase
) -> None:
    """A CI step running as another user reads them: 0644 under umask 022, not mkstemp's 0600."""
    written = [*update.files_of("test_umask"), "out/fx.json", "out/fx.html", "baseline.json"]
    assert len(written) == 4, written
    modes = {name: oct(os.stat(project.path / name).st_mode & 0o777) for name in written}
    assert set(modes.values()) == {"0o644"}, modes
