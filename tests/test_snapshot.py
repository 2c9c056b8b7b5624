"""The snapshot engine (pytest-free): names, normalisation, files, diffs, orphans."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pytest_fxtrace.snapshot as snapshot_module
from pytest_fxtrace.snapshot import (
    MAGIC,
    MODULES_HEADER,
    TENSORS_HEADER,
    Ledger,
    Snapshot,
    SnapshotId,
    check_snapshot_dir,
    class_name,
    configuration,
    default_path_roots,
    describe_graph_targets,
    find_orphans,
    make_snapshot,
    node_component,
    normalize_code,
    parse_snapshot,
    read_snapshot,
    safe_component,
    snapshot_body,
    snapshot_files,
    stale_temp_files,
    unified_diff,
    write_atomic,
)

HOSTILE_IDS = [
    "test_x[../../../etc/passwd]",
    "test_x[/etc/passwd]",
    "test_x[a/b]",
    "test_x[a_b]",
    "test_x[a\\b]",
    "test_x[a:b]",
    "test_x[..]",
    "..",
    ".",
    "",
    ".hidden",
    "-rf",
    "test_x[\u00e9]",
    "test_x[e]",
    "test_x[\u0065\u0301]",
    "test_x[\u4e2d\u6587]",
    "test_x[\x00]",
    "test_x[\n]",
    "test_x[~]",
    "test_x[a~b]",
    "con",
    "NUL",
    "TestA::test_b",
    "TestA.test_b",
    "TestA::test_b[x::y]",
    "TestA::test_b[x.y]",
    "t" * 300,
    "t" * 300 + "u",
    "test_x[" + "a/" * 150 + "]",
]


def test_plain_test_ids_are_file_names_as_written() -> None:
    assert node_component("test_resnet") == "test_resnet"
    assert node_component("test_resnet[cpu-float32]") == "test_resnet[cpu-float32]"
    assert node_component("TestModels::test_resnet[1.5]") == "TestModels.test_resnet[1.5]"
    sid = SnapshotId(Path("/repo/tests"), "test_models.py", "TestModels::test_resnet", "ResNet")
    assert sid.path() == Path("/repo/tests/fx_snapshots/test_models/TestModels.test_resnet.ResNet.fx.txt")
    assert sid.owner == "test_models.py::TestModels::test_resnet"


def test_second_model_of_a_class_in_one_test_gets_a_numbered_name() -> None:
    first = SnapshotId(Path("t"), "test_m.py", "test_x", "ResNet", 1)
    second = SnapshotId(Path("t"), "test_m.py", "test_x", "ResNet", 2)
    assert (first.file_name, second.file_name) == ("test_x.ResNet.fx.txt", "test_x.ResNet-2.fx.txt")


def test_sanitised_names_keep_a_readable_prefix_and_a_hash() -> None:
    name = node_component("test_x[a/b]")
    assert name.startswith("test_x[a_b]~") and len(name) == len("test_x[a_b]~") + 10
    assert node_component("test_x[a_b]") == "test_x[a_b]"


def test_hostile_ids_stay_inside_the_directory_without_collisions(tmp_path: Path) -> None:
    models = ["Net", "a/b", "..", "Net-2", "\u00e9", "Net.x"]
    paths = {
        SnapshotId(tmp_path, "test_m.py", test, model).path("fx_snapshots")
        for test in HOSTILE_IDS
        for model in models
    }
    assert len(paths) == len(HOSTILE_IDS) * len(models)
    folder = (tmp_path / "fx_snapshots" / "test_m").resolve()
    for path in paths:
        assert path.resolve().parent == folder, path
        assert path.name.isascii() and len(path.name) <= 160 and not path.name.startswith(".")
        write_atomic(path, path.name)
    on_disk = sorted(folder.iterdir())
    assert len(on_disk) == len(paths)  # no two ids share a file, none landed elsewhere
    assert sorted(p.parent for p in tmp_path.rglob("*") if p.is_file()) == [folder] * len(paths)


def test_hostile_module_names_stay_inside_the_directory(tmp_path: Path) -> None:
    modules = ["test_a.py", "..py", "../x.py", "test_\u00e9.py", "test_a", "test_a.txt"]
    folders = {SnapshotId(tmp_path, module, "test_x", "Net").path().parent for module in modules}
    assert len(folders) == len(modules)
    assert all(folder.parent == tmp_path / "fx_snapshots" for folder in folders)


def test_very_long_ids_are_cut_and_hashed() -> None:
    name = safe_component("t" * 300)
    assert len(name) == 96 + 11 and name != safe_component("t" * 299)


@pytest.mark.parametrize(
    "value,problem",
    [
        ("", "is empty"),
        ("/abs/snaps", "is absolute"),
        ("../snaps", "'..'"),
        ("__snapshots__", "syrupy"),
        ("a\\b", "backslashes"),
    ],
)
def test_bad_snapshot_dir_is_one_clear_error(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match="fxtrace_snapshot_dir") as info:
        check_snapshot_dir(value)
    assert problem in str(info.value) and "'fx_snapshots'" in str(info.value)


def test_nested_snapshot_dir_is_accepted() -> None:
    assert check_snapshot_dir("golden/fx") == "golden/fx"


def test_normalisation_evens_out_line_endings_and_trailing_space() -> None:
    code = "\n\n\ndef forward(self, x):  \r\n    relu = x.relu();  x = None\r\n    return relu\n    "
    assert normalize_code(code) == "def forward(self, x):\n    relu = x.relu();  x = None\n    return relu\n"


def test_normalisation_hides_addresses_and_machine_paths() -> None:
    home = os.path.expanduser("~")
    site = default_path_roots()[0][0]
    code = (
        "def forward(self, x, cfg = <models.Cfg object at 0x7f3a2c1b9d90>):\n"
        f"    # File: /work/repo/models.py:12 in forward\n"
        f"    a = f(x, '{site}/torchvision/ops.py', '{home}/data/x.pt')\n"
        "    return a\n"
    )
    out = normalize_code(code, default_path_roots("/work/repo"))
    assert "0x7f3a2c1b9d90" not in out and "object at 0x?" in out
    assert "<rootdir>/models.py:12" in out
    assert "'<site-packages>/torchvision/ops.py'" in out
    assert home not in out


def test_normalisation_sorts_sets_whatever_the_hash_seed() -> None:
    program = (
        "print('def forward(self, x, keys = ' + repr({'alpha', 'beta', 'gamma', 'delta', 'eps'}) + '):')"
    )
    printed = set()
    for seed in ("1", "2", "3", "4", "5"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
        printed.add(out.stdout)
    assert len(printed) > 1  # the raw code does depend on the seed
    normalised = {normalize_code(text + "    return x\n") for text in printed}
    assert normalised == {
        "def forward(self, x, keys = {'alpha', 'beta', 'delta', 'eps', 'gamma'}):\n    return x\n"
    }


def test_nested_sets_are_sorted_and_other_code_untouched() -> None:
    code = "def forward(self, x):\n    y = f(x, {frozenset({'b', 'a'}), 'z'}, [3, 1])  # {'q', 'p'}\n"
    assert normalize_code(code) == (
        "def forward(self, x):\n    y = f(x, {'z', frozenset({'a', 'b'})}, [3, 1])  # {'q', 'p'}\n"
    )


def test_header_names_test_model_and_torch_and_is_not_compared() -> None:
    sid = SnapshotId(Path("tests"), "test_m.py", "test_x[a\nb]", "Net")
    text = make_snapshot(sid, "models.Net", "2.14.1", "def forward(self, x):\n    return x\n").render()
    assert text.splitlines()[:4] == [
        MAGIC,
        "# test: test_m.py::test_x[a\\nb]",
        "# model: models.Net",
        "# torch: 2.14.1",
    ]
    parsed = parse_snapshot(text)
    assert parsed.owner == "test_m.py::test_x[a\nb]"
    other_torch = parse_snapshot(text.replace("2.14.1", "9.9.9").replace("\n", "\r\n"))
    assert other_torch.body == parsed.body == "def forward(self, x):\n    return x\n"


def test_an_exported_programs_snapshot_says_it_holds_an_exported_programs_graph_code() -> None:
    sid = SnapshotId(Path("tests"), "test_m.py", "test_x", "Net", backend="export")
    text = make_snapshot(sid, "models.Net", "2.14.1", "def forward(self, x):\n    return x\n").render()
    first = text.splitlines()[0]
    assert first == "# pytest-fxtrace snapshot of an exported program's graph code (the lines after the blank line)"
    assert "torch.fx" not in first
    parsed = parse_snapshot(text)
    assert (parsed.ours, parsed.owner, parsed.body) == (True, "test_m.py::test_x", "def forward(self, x):\n    return x\n")
    assert parse_snapshot(text).render() == text  # read and written again, the title stays
    # a golden file written before the title changed is still ours, and compares by its body
    older = parse_snapshot(text.replace(first, MAGIC))
    assert (older.ours, older.owner, older.body) == (True, parsed.owner, parsed.body)


def test_a_file_we_did_not_write_is_all_body() -> None:
    parsed = parse_snapshot("def forward(self):\n    return 1\n")
    assert not parsed.ours and parsed.body.startswith("def forward")


def test_atomic_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "fx_snapshots" / "test_m" / "test_x.Net.fx.txt"
    write_atomic(path, "old\n")
    write_atomic(path, "new\n")
    assert path.read_bytes() == b"new\n"
    assert os.listdir(path.parent) == [path.name]


def test_atomic_write_that_fails_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "d" / "s.fx.txt"
    write_atomic(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new \ud800\n")  # a lone surrogate cannot be encoded
    assert path.read_text() == "old\n" and os.listdir(path.parent) == [path.name]


WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("snap", sys.argv[1])
snap = sys.modules["snap"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(snap)  # the engine alone: no torch import, so the loop starts at once
from pathlib import Path
path = Path(sys.argv[2])
old, new = "o" * 4_000_000 + "\\n", "n" * 3_000_000 + "\\n"
Path(sys.argv[3]).write_text("started")
while True:
    snap.write_atomic(path, new)
    snap.write_atomic(path, old)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=lambda s: s.name)
def test_a_killed_writer_leaves_the_old_or_the_new_file_never_a_partial_one(
    tmp_path: Path, sig: signal.Signals
) -> None:
    path = tmp_path / "fx_snapshots" / "test_m" / "test_x.Net.fx.txt"
    write_atomic(path, "o" * 4_000_000 + "\n")
    for attempt in range(4):
        started = tmp_path / f"started{attempt}"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, snapshot_module.__file__, str(path), str(started)],
            stderr=subprocess.PIPE,
            # as from a terminal: a job started in the background (`cmd &`) inherits SIGINT ignored
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        while not started.exists():
            assert writer.poll() is None, writer.communicate()[1].decode()
            time.sleep(0.01)
        time.sleep(0.05 + 0.03 * attempt)  # somewhere inside the write loop
        writer.send_signal(sig)
        writer.communicate(timeout=60)
        data = path.read_bytes()
        assert data in (b"o" * 4_000_000 + b"\n", b"n" * 3_000_000 + b"\n"), (
            f"partial file of {len(data)} bytes"
        )
    leftovers = stale_temp_files(tmp_path / "fx_snapshots")
    assert all(p.name.startswith(".fxtrace-") for p in leftovers)


def test_diff_is_capped_and_says_how_much_was_cut() -> None:
    old = "".join(f"    line{i} = x\n" for i in range(100))
    new = old.replace("line5 ", "LINE5 ").replace("line90 ", "LINE90 ")
    diff = unified_diff(old, new, "snap", "now", max_lines=10)
    assert diff.text.splitlines()[:2] == ["--- snap", "+++ now"]
    assert "-    line5 = x" in diff.text and "+    LINE5 = x" in diff.text
    assert "LINE90" not in diff.text and diff.cut > 0 and (diff.removed, diff.added) == (2, 2)
    assert unified_diff(old, new, "snap", "now", max_lines=None).cut == 0


def test_diff_counts_say_line_for_one_and_lines_for_more() -> None:
    one = unified_diff("    a = x\n    b = a\n", "    a = x\n    c = a\n", "snap", "now")
    assert one.counts() == "1 line removed, 1 added"
    old = "".join(f"    line{i} = x\n" for i in range(20))
    two = unified_diff(old, old.replace("line5 ", "LINE5 ").replace("line6 ", "LINE6 "), "snap", "now")
    assert two.counts() == "2 lines removed, 2 added"
    lines = unified_diff(old, old.replace("line5 ", "LINE5 "), "snap", "now", max_lines=None).text.splitlines()
    cut_one = unified_diff(old, old.replace("line5 ", "LINE5 "), "snap", "now", max_lines=len(lines) - 1)
    assert (cut_one.cut, cut_one.left_out()) == (1, "1 more diff line cut")
    cut_two = unified_diff(old, old.replace("line5 ", "LINE5 "), "snap", "now", max_lines=len(lines) - 2)
    assert cut_two.left_out() == "2 more diff lines cut"


def test_diff_is_a_valid_patch_with_replacements_next_to_what_they_replace() -> None:
    old = "".join(f"    relu_{i} = layers_{i}.relu()\n" for i in range(30)) + "    return x\n"
    new = old.replace(".relu()", ".tanh()") + "    # end\n"
    diff = unified_diff(old, new, "a/s.fx.txt", "b/s.fx.txt", max_lines=8)
    assert diff.text.splitlines()[3:7] == [
        "-    relu_0 = layers_0.relu()",
        "+    relu_0 = layers_0.tanh()",
        "-    relu_1 = layers_1.relu()",
        "+    relu_1 = layers_1.tanh()",
    ]
    # each side, read back from the patch, is its file: the pairing keeps a valid patch
    lines = unified_diff(old, new, "a/s.fx.txt", "b/s.fx.txt", max_lines=None).text.splitlines()
    assert lines[2] == "@@ -1,31 +1,32 @@"
    assert [line[1:] for line in lines[3:] if line[0] in " -"] == old.splitlines()
    assert [line[1:] for line in lines[3:] if line[0] in " +"] == new.splitlines()


def _snapshot_for(owner: str) -> Snapshot:
    return Snapshot({"test": owner, "model": "m.Net", "torch": "2"}, "def forward(self):\n")


def test_orphans_are_files_of_deleted_tests_or_unused_by_their_passing_test(tmp_path: Path) -> None:
    module = tmp_path / "test_m.py"
    module.write_text("")
    d = tmp_path.as_posix()
    m = module.as_posix()
    files = {
        "kept_used": ("test_m.py::test_a", True),
        "renamed_model": ("test_m.py::test_a", False),  # its test passed without it
        "deleted_test": ("test_m.py::test_gone", False),
        "failed_test": ("test_m.py::test_b", False),  # collected, did not pass: not judged
        "deleted_module": ("test_gone.py::test_a", False),
    }
    ledger = Ledger(
        collected={f"{m}::test_a", f"{m}::test_b"},
        modules={m},
        passed={f"{m}::test_a"},
        used={(tmp_path / "kept_used").as_posix()},
    )
    entries = [(tmp_path / name, d, _snapshot_for(owner)) for name, (owner, _) in files.items()]
    orphans = {p.name for p in find_orphans(ledger, entries)}
    assert orphans == {"renamed_model", "deleted_test", "deleted_module"}
    # with node ids, an uncollected test may still exist
    partial = {p.name for p in find_orphans(ledger, entries, module_complete=False)}
    assert partial == {"renamed_model", "deleted_module"}
    broken = Ledger(**{**ledger.__dict__, "broken_modules": {m}, "passed": set()})
    assert find_orphans(broken, entries) == [tmp_path / "deleted_module"]


def test_ledger_travels_as_json_and_merges() -> None:
    a = Ledger(collected={"x"}, used={"p"}, deselected=2)
    b = Ledger.from_json(Ledger(collected={"y"}, created={"q"}, deselected=1).to_json())
    a.merge(b)
    assert (a.collected, a.used, a.created, a.deselected) == ({"x", "y"}, {"p"}, {"q"}, 3)


def test_only_our_files_are_listed_as_snapshots(tmp_path: Path) -> None:
    root = tmp_path / "fx_snapshots"
    ours = SnapshotId(tmp_path, "test_m.py", "test_x", "Net").path()
    write_atomic(
        ours, make_snapshot(SnapshotId(tmp_path, "test_m.py", "test_x", "Net"), "m.Net", "2", "x\n").render()
    )
    write_atomic(root / "test_m" / "notes.fx.txt", "a note someone keeps here\n")
    write_atomic(root / "test_m" / "README.md", "docs\n")
    assert [path for path, _ in snapshot_files(root)] == [ours]
    assert read_snapshot(root / "missing.fx.txt") is None


def test_engine_knows_nothing_of_pytest_and_never_runs_file_content() -> None:
    for path in sorted(Path(snapshot_module.__file__).parent.glob("*.py")):  # every module of the package
        tree = ast.parse(path.read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        froms = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
        own = {module for module in froms if module.startswith("pytest_fxtrace.")}
        imported |= {module.split(".")[0] for module in froms if module not in own}
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, path.name
        assert not imported & {"pickle", "marshal", "importlib", "runpy", "shelve"}, path.name
        package = "pytest_fxtrace.snapshot."
        assert {m[len(package) :] if m.startswith(package) else m for m in own} <= {
            "naming", "normalize", "storage", "diff"
        }, path.name  # nothing outside the package
        called = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert not called & {"exec", "eval", "compile", "__import__"}, path.name


def test_snapshot_text_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    body = textwrap.dedent(
        f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("oops")
        """
    )
    path = tmp_path / "fx_snapshots" / "test_m" / "test_x.Net.fx.txt"
    write_atomic(path, MAGIC + "\n# test: test_m.py::test_x\n\n" + body)
    assert read_snapshot(path).body == body.lstrip("\n")  # type: ignore[union-attr]
    list(snapshot_files(tmp_path / "fx_snapshots"))
    assert not marker.exists()


# --- what the graph calls and reads ---------------------------------------------------------


def _traced(module):  # torch only here: the engine itself imports none
    from pytest_fxtrace import symbolic_trace

    return symbolic_trace(module, leaf_modules=["Block"])


def _listing_models():
    import torch
    from torch import nn

    class Block(nn.Module):  # a leaf with children and a parameter of its own
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(8))
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
            self.out = nn.Linear(8, 4)

        def forward(self, x):
            return x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 10)
            self.act = nn.GELU()
            self.block = Block()
            self.pos = nn.Parameter(torch.zeros(64))
            self.register_buffer("mask", torch.ones(64, dtype=torch.bool))

        def forward(self, x):
            x = (x + self.pos) * self.mask + torch.tensor([1.0, 2.0]).sum()
            return self.block(self.act(self.fc(x)))

    return Net


def test_listing_shows_the_arguments_off_their_defaults_the_same_on_every_torch() -> None:
    from torch import nn

    # torch 2.14 prints BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, bias=True,
    # track_running_stats=True), torch 2.1 the same without bias=True: both read "(64)"
    assert configuration(nn.BatchNorm2d(64)) == "64"
    assert configuration(nn.BatchNorm2d(64, momentum=0.3)) == "64, momentum=0.3"
    assert configuration(nn.LayerNorm(8)) == "(8,)"
    assert configuration(nn.GELU("tanh")) == "approximate='tanh'"
    assert configuration(nn.Linear(3, 4, bias=False)) == "in_features=3, out_features=4, bias=False"
    assert configuration(nn.MaxPool2d(3, 2, 1)) == "kernel_size=3, stride=2, padding=1"


def test_listing_names_each_called_submodule_and_each_tensor_read() -> None:
    text = describe_graph_targets(_traced(_listing_models()()))
    assert text.splitlines() == [
        MODULES_HEADER,
        "fc: torch.nn.Linear(in_features=64, out_features=10)",
        "act: torch.nn.GELU()",
        f"block: {__name__}._listing_models.<locals>.Block()",
        "  scale: float32[8] parameter",
        "  layers: torch.nn.ModuleList()",
        "    0-2: 3 x torch.nn.Linear(in_features=8, out_features=8)",
        "  out: torch.nn.Linear(in_features=8, out_features=4)",
        "",
        TENSORS_HEADER,
        "pos: float32[64] parameter",
        "mask: bool[64] buffer",
        "_tensor_constant0: float32[] constant",
    ]


def test_snapshot_body_is_the_normalised_code_then_the_listing() -> None:
    gm = _traced(_listing_models()())
    body = snapshot_body(gm.code, gm)
    assert body.startswith(normalize_code(gm.code))
    assert body.endswith(describe_graph_targets(gm) + "\n")
    assert snapshot_body("def forward(self, x):\n    return x\n") == "def forward(self, x):\n    return x\n"


def test_listing_hides_addresses_and_paths_and_sorts_sets(tmp_path: Path) -> None:
    from torch import nn

    class Configured(nn.Module):
        def extra_repr(self) -> str:
            return f"names={{'b', 'a', 'c'}}, cfg=<Cfg object at 0x7f3a2b>, path={tmp_path}/w.pt"

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = Configured()

        def forward(self, x):
            return self.c(x)

    import torch.fx

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, name):
            return isinstance(m, Configured) or super().is_leaf_module(m, name)

    gm = torch.fx.GraphModule(Net(), Tracer().trace(Net()))
    line = describe_graph_targets(gm, [(str(tmp_path), "<rootdir>")]).splitlines()[1]
    name = class_name(Configured)
    assert line == f"c: {name}(names={{'a', 'b', 'c'}}, cfg=<Cfg object at 0x?>, path=<rootdir>/w.pt)"


def test_class_names_use_the_public_path_a_package_exports() -> None:
    from torch import nn

    assert class_name(nn.GELU) == "torch.nn.GELU"
    assert class_name(nn.modules.linear.NonDynamicallyQuantizableLinear) == (
        "torch.nn.modules.linear.NonDynamicallyQuantizableLinear"
    )
    assert class_name(Snapshot) == "pytest_fxtrace.snapshot.Snapshot"  # not exported by the package
