"""Golden snapshots as a user meets them: turning them on, messages, names, files, hooks,
xdist and interrupted update runs (end to end through pytester subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pytest_fxtrace.testing import MODELS, snapshot_contents, write_project

STATUS_CONFTEST = """
import pathlib

def pytest_fxtrace_check_finished(item, report):
    with pathlib.Path(__file__).with_name("statuses.txt").open("a") as out:
        out.write(f"{item.name} {report.model_name} {report.status}\\n")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def statuses(pytester: pytest.Pytester) -> list[str]:
    path = pytester.path / "statuses.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def files(pytester: pytest.Pytester) -> dict[str, bytes]:
    return snapshot_contents(pytester.path)


def test_missing_snapshot_fails_with_the_exact_command_and_is_never_created(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(models=MODELS)
    pytester.makeconftest(STATUS_CONFTEST)
    pytester.makepyfile(
        test_m="""
        import pytest, torch
        from models import Encoder

        @pytest.mark.traceable(snapshot=True)
        @pytest.mark.parametrize("case", ["a/b", "plain"])
        def test_encoder(case):
            Encoder()(torch.randn(1, 3, 8, 8))
        """
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "Encoder traced and matched eager, but has no golden snapshot of its generated code yet "
            "(fx_snapshots/test_m/test_encoder[[]a_b[]]~*.Encoder.fx.txt)",
            "  create it with: pytest --fx-snapshot-update 'test_m.py::test_encoder[[]a/b[]]'",
        ]
    )
    assert files(pytester) == {}
    assert statuses(pytester) == [
        "test_encoder[a/b] Encoder snapshot-missing",
        "test_encoder[plain] Encoder snapshot-missing",
    ]
    # the command it printed, as printed, creates that snapshot and only that one
    result = run(pytester, "--fx-snapshot-update", "test_m.py::test_encoder[a/b]")
    assert result.ret == pytest.ExitCode.OK
    (created,) = files(pytester)
    assert created.startswith("fx_snapshots/test_m/test_encoder[a_b]~")
    result.stdout.fnmatch_lines(["1 created", "  created  fx_snapshots/test_m/test_encoder[[]a_b[]]~*"])
    assert statuses(pytester) == ["test_encoder[a/b] Encoder passed"]


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


def test_mismatch_shows_a_capped_diff_and_writes_the_actual_code_under_basetemp(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(models=DEEP_MODELS.format(act="relu"))
    pytester.makeconftest(STATUS_CONFTEST)
    pytester.makepyfile(
        test_m="""
        import torch
        from models import Deep

        def test_deep(fxtrace):
            fxtrace.check(Deep(), (torch.randn(2, 4),), snapshot=True)
        """
    )
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    statuses(pytester)
    (name, old) = next(iter(files(pytester).items()))
    pytester.makepyfile(models=DEEP_MODELS.format(act="tanh"))
    result = run(pytester, "--basetemp", str(pytester.path / "bt"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"Deep: the generated code differs from the golden snapshot {name} (60 lines removed, 60 added)",
            f"    --- {name} (snapshot)",
            "    +++ generated now",
            "    -    relu = layers_0.relu();  layers_0 = None",
            "    +    tanh = layers_0.tanh();  layers_0 = None",
            "    ... * more diff lines cut (-vv shows all)",
            "  actual code: */bt/fxtrace-actual/test_m/test_deep.Deep.fx.txt",
            "  accept the change with: pytest --fx-snapshot-update test_m.py::test_deep",
        ]
    )
    assert len([line for line in result.outlines if line.startswith("    ")]) <= 45
    assert statuses(pytester) == ["test_deep Deep snapshot-mismatch"]
    assert files(pytester)[name] == old  # a failing run never writes the snapshot
    actual = (pytester.path / "bt" / "fxtrace-actual" / "test_m" / "test_deep.Deep.fx.txt").read_bytes()
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    assert files(pytester)[name] == actual  # what was shown is what update writes
    result.stdout.fnmatch_lines(
        ["*1 differing*", "accept the generated code with: pytest --fx-snapshot-update"]
    )


def test_ini_turns_snapshots_on_and_the_marker_turns_them_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(models=MODELS)
    pytester.makeini("[pytest]\nfxtrace_snapshot = true\n")
    pytester.makepyfile(
        test_m="""
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
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    assert sorted(files(pytester)) == [
        "fx_snapshots/test_m/test_models.Encoder-2.fx.txt",
        "fx_snapshots/test_m/test_models.Encoder.fx.txt",
        "fx_snapshots/test_m/test_models.Head.fx.txt",
        "fx_snapshots/test_m/test_on.Encoder.fx.txt",
    ]
    text = files(pytester)["fx_snapshots/test_m/test_models.Head.fx.txt"].decode()
    import torch

    assert text.splitlines()[1:5] == [
        "# test: test_m.py::test_models",
        "# model: models.Head",
        f"# torch: {torch.__version__}",
        "",
    ]
    assert "fc = self.fc(mean)" in text
    run(pytester).assert_outcomes(passed=3)


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


def test_hostile_test_ids_stay_inside_the_snapshot_directory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(
        test_m=f"""
        import pytest, torch
        from models import Head

        @pytest.mark.traceable(snapshot=True)
        @pytest.mark.parametrize("case", {HOSTILE!r}, ids={HOSTILE!r})
        def test_hostile(case):
            Head()(torch.randn(1, 4, 5, 5))
        """
    )
    result = run(pytester, "--fx-snapshot-update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    on_disk = [p for p in pytester.path.rglob("*.fx.txt") if "runpytest-" not in str(p)]
    assert len(on_disk) == len(HOSTILE)
    folder = (pytester.path / "fx_snapshots" / "test_m").resolve()
    assert all(p.resolve().parent == folder and p.name.isascii() and len(p.name) < 130 for p in on_disk)
    assert not (pytester.path.parent / "escape").exists() and not Path("/etc/passwd.Head.fx.txt").exists()
    run(pytester).assert_outcomes(passed=len(HOSTILE))


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


def test_a_failing_model_gets_no_snapshot_and_keeps_its_old_one(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(STATUS_CONFTEST)
    pytester.makepyfile(models=MODELS)
    test = """
import pytest, torch
from models import Head

class Branchy(torch.nn.Module):
    def forward(self, x):
        {body}

@pytest.mark.traceable(snapshot=True)
def test_branchy():
    Branchy()(torch.randn(3))
"""
    pytester.makepyfile(test_m=test.format(body="return x * 2"))
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    before = files(pytester)
    assert list(before) == ["fx_snapshots/test_m/test_branchy.Branchy.fx.txt"]
    statuses(pytester)
    pytester.makepyfile(test_m=test.format(body="return x * 2 if x.sum() > 0 else x"))
    result = run(pytester, "--fx-snapshot-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert statuses(pytester) == ["test_branchy Branchy untraceable"]
    assert files(pytester) == before  # neither rewritten nor deleted as an orphan
    assert "deleted" not in result.stdout.str()


BLOCKING_TEST = """

def test_zz_blocks():
    import pathlib, time
    pathlib.Path("ready").write_text("ready")
    time.sleep(120)
"""


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
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--fx-snapshot-update"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # the tree under test too (pytester's own runs inherit PYTHONPATH the same way)
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(pytester.path), os.environ.get("PYTHONPATH"))))},
        # as from a terminal: a job started in the background (`cmd &`) inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    ready = pytester.path / "ready"
    while not ready.exists():
        assert process.poll() is None, process.communicate()[0].decode()
        time.sleep(0.05)
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


def test_a_swapped_or_resized_leaf_fails_with_a_diff_naming_it(pytester: pytest.Pytester) -> None:
    model = {"width": 10, "act": "ReLU", "norm": "LayerNorm"}
    pytester.makepyfile(models=SWAPPABLE.format(**model))
    pytester.makepyfile(
        test_m="""
        import pytest, torch
        from models import Net

        @pytest.mark.traceable(snapshot=True)
        def test_net():
            Net()(torch.randn(2, 8))
        """
    )
    assert run(pytester, "--fx-snapshot-update").ret == pytest.ExitCode.OK
    (name, old) = next(iter(files(pytester).items()))
    for change, removed, added in SWAPS:  # the code reads the same each time: self.act(...)
        assert removed[1:].encode() in old  # the golden file says what each call calls
        pytester.makepyfile(models=SWAPPABLE.format(**{**model, **change}))
        result = run(pytester)
        assert result.ret == pytest.ExitCode.TESTS_FAILED, change
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
        assert files(pytester)[name] == old


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_files_a_session_writes_get_the_permissions_the_umask_leaves(pytester: pytest.Pytester) -> None:
    """A CI step running as another user reads them: 0644 under umask 022, not mkstemp's 0600."""
    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(
        test_m="""
        import pytest, torch
        from models import Encoder

        @pytest.mark.traceable(snapshot=True)
        def test_encoder():
            Encoder()(torch.randn(1, 3, 8, 8))

        @pytest.mark.traceable
        def test_branchy():
            class Branchy(torch.nn.Module):
                def forward(self, x):
                    return x if x.sum() > 0 else -x

            Branchy()(torch.randn(2, 4))
        """
    )
    before = os.umask(0o022)
    try:
        run(pytester, "--fx-snapshot-update", "--fx-report=out/fx.json", "--fx-html=out/fx.html",
            "--fx-baseline=baseline.json", "--fx-baseline-update")  # fmt: skip
    finally:
        os.umask(before)
    written = [*files(pytester), "out/fx.json", "out/fx.html", "baseline.json"]
    assert len(written) == 4, written
    modes = {name: oct(os.stat(pytester.path / name).st_mode & 0o777) for name in written}
    assert set(modes.values()) == {"0o644"}, modes
