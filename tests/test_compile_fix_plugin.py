"""A compile check's verified fix and its snapshots as a user meets them, in one project and
two pytest sessions: the first (``--fx-snapshot-update``, JSON and HTML reports) fails a
logging submodule with its verified fix in the message, the record and the page, and writes
the snapshots of a model with one break within budget; the second passes the unchanged
model against its file and fails the changed one with a diff."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from forked_pytest import run_in_project

from pytest_fxtrace import _compat

pytestmark = [
    pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem())),
    pytest.mark.xdist_group(__name__),  # its module-scoped sessions run once, in one worker
]

MODELS = (Path(__file__).parent / "compile_fix_models.py").read_text()

import compile_fix_models as m  # noqa: E402  (tests/ is on sys.path: conftest)

TESTS = """
import os
import pytest, torch
import compile_fix_models as m

@pytest.mark.traceable(backend="compile")
def test_noisy():
    m.WithNoisy()(torch.randn(2, 4))

@pytest.mark.traceable(backend="compile", snapshot=True, max_graph_breaks=1)
def test_snap_same():
    m.Snap()(torch.randn(2, 4))

@pytest.mark.traceable(backend="compile", snapshot=True, max_graph_breaks=1)
def test_snap_changed():
    m.Snap(os.environ.get("SNAP_ACT", "relu"))(torch.randn(2, 4))
"""
FIX = (
    f"decorate `Noisy.forward` (compile_fix_models.py:{m.line_of('F-NOISYDEF')}) with @torch.compiler.disable "
    "(Dynamo runs it eagerly); compiled again so: 2 graphs, 0 breaks inside compiled code (was 1), matches eager "
    "on 1 recorded call; the call of a disabled function is a known break, which max_graph_breaks=1 accepts"
)
SNAPSHOTS = Path("fx_snapshots") / "test_m"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("compile_fix_project")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "compile_fix_models.py").write_text(MODELS)
    (root / "test_m.py").write_text(TESTS)
    return root


@pytest.fixture(scope="module")
def updating(project) -> subprocess.CompletedProcess:
    """The first session: snapshots written, reports on."""
    return run_in_project(project, "--fx-snapshot-update", "--fx-report=fx.json", "--fx-html=fx.html")


@pytest.fixture(scope="module")
def changed(project, updating) -> subprocess.CompletedProcess:
    """The second session: one of the two snapshot models computes something else."""
    return run_in_project(project, "-k", "snap", SNAP_ACT="sigmoid")


def test_the_failure_message_gives_the_verified_fix(updating) -> None:
    out = updating.stdout
    assert re.search(r"1 failed, 2 passed", out), out + updating.stderr
    printed = m.line_of("F-PRINT")
    assert (
        f"WithNoisy.noisy (Noisy) is not compilable (torch.compile): `print(\"noisy\", tuple(y.shape))` at "
        f"compile_fix_models.py:{printed} breaks the graph (Failed to trace builtin operator [GB0059])"
    ) in out
    assert f"  fix (verified): {FIX}\n" in out


def test_the_json_record_and_the_html_page_carry_the_verified_fix(updating, project) -> None:
    (noisy,) = [r for r in json.loads((project / "fx.json").read_text())["results"] if r["nodeid"].endswith("test_noisy")]
    suggestion = noisy["suggestion"]
    assert {key: suggestion[key] for key in ("text", "verified", "options")} == {"text": FIX, "verified": True, "options": {}}
    # and the verified patch beside the decorator: the print guarded
    assert suggestion["patch_text"].startswith("patch `print(") and "if not torch.compiler.is_compiling():\n" in suggestion["patch"]
    page = (project / "fx.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="fx-data">(.*?)</script>', page, re.S).group(1))
    (check,) = [c for c in data["checks"] if c["test"].endswith("test_noisy")]
    fix = check["fix"]
    assert {key: fix[key] for key in ("text", "verified", "partial")} == {"text": FIX, "verified": True, "partial": False}  # it passes, applied
    assert (fix["patchText"], fix["patch"]) == (suggestion["patch_text"], suggestion["patch"])


def test_an_update_run_writes_the_graphs_and_the_break_sites(updating, project) -> None:
    assert "2 created" in updating.stdout
    text = (project / SNAPSHOTS / "test_snap_same.Snap.compile.txt").read_text()
    head, _, body = text.partition("\n\n")
    assert head.splitlines()[0] == (
        "# pytest-fxtrace snapshot of the graphs torch.compile captured and its graph breaks (the lines after the blank line)"
    )
    assert body.startswith("# graph 1 of 2\ndef forward(self, ")
    assert "# graph 2 of 2\n" in body and "relu = torch.relu(" in body
    assert body.endswith(
        "# graph breaks: 1 site\n"
        "#   forward: `print(\"snap\")` in compile_fix_models.py: unsupported, Failed to trace builtin operator [GB0059]\n"
    )


def test_the_unchanged_model_passes_and_the_changed_one_fails_with_a_diff(changed) -> None:
    out = changed.stdout
    assert re.search(r"1 failed, 1 passed, 1 deselected", out), out + changed.stderr
    assert "FAILED test_m.py::test_snap_same" not in out
    path = (SNAPSHOTS / "test_snap_changed.Snap.compile.txt").as_posix()
    assert f"Snap: the generated code differs from the golden snapshot {path} (2 lines removed, 2 added)" in out
    assert "    -    relu = torch.relu(l_y_);  l_y_ = None\n    +    sigmoid = torch.sigmoid(l_y_);  l_y_ = None" in out
    assert "     # graph breaks: 1 site\n" in out  # the sites are part of what is held
    assert "accept the change with: pytest --fx-snapshot-update test_m.py::test_snap_changed" in out


def test_a_compile_check_without_its_golden_file_says_it_compiled(tmp_path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "compile_fix_models.py").write_text(MODELS)
    (tmp_path / "test_m.py").write_text(TESTS)
    done = run_in_project(tmp_path, "-k", "snap_same")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Snap compiled and matched eager, but has no golden snapshot of its generated code yet" in done.stdout
    assert "exported and matched eager" not in done.stdout
