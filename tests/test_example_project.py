"""example_project as a user meets it: the gate passes on the example, and a pull
request that breaks a model's traceability fails it with the category, the line
and the fix. Each test copies the example into a pytester directory and runs
pytest there in a subprocess, with the example's own pyproject.toml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optional
import pytest

from pytest_fxtrace import _compat

EXPORT_PROBLEM = _compat.export_problem()

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"

# A plausible regression: a data-dependent guard added to the block that three models share.
BLOCK_FILE = "src/acme_models/transformer.py"
BLOCK_LINE = "        x = x + self.dropout(self.attention(self.norm1(x), mask))\n"
GUARD = (
    "        if x.abs().max() > 1e4:  # keep activations in range for fp16 serving\n"
    "            x = x / x.abs().max()\n"
)

# A change that keeps the detector traceable but changes its graph.
DETECTOR_FILE = "src/acme_models/detector.py"
DETECTOR_BOXES = "boxes=boxes.sigmoid() * images.shape[-1]"
DETECTOR_CLAMPED = "boxes=boxes.sigmoid().clamp(0.0, 1.0) * images.shape[-1]"
DETECTOR_SNAPSHOT = (
    "tests/fx_snapshots/test_detector/test_every_anchor_gets_a_box_and_class_scores.TinyDetector.fx.txt"
)

ALL_MODELS = {
    "acme_models.adaptive.AdaptiveDepthNet",
    "acme_models.classifier.ImageClassifier",
    "acme_models.detector.TinyDetector",
    "acme_models.encoder.TextEncoder",
    "acme_models.pooling.FramePooler",
    "acme_models.segmentation.TinySegmenter",
    "acme_models.transformer.TransformerBlock",
    "acme_models.vit.PatchClassifier",
}


def copy_example(pytester: pytest.Pytester) -> Path:
    shutil.copytree(
        EXAMPLE,
        pytester.path,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info", "fx-report.json"),
    )
    return pytester.path


def break_shared_block(project: Path) -> int:
    """Insert the guard after the attention residual; return the guard's line number."""
    path = project / BLOCK_FILE
    lines = path.read_text().splitlines(keepends=True)
    index = lines.index(BLOCK_LINE) + 1
    lines[index:index] = [GUARD]
    path.write_text("".join(lines))
    return index + 1


def failure_section(result: pytest.RunResult, test_name: str) -> str:
    """The text pytest prints under ``____ test_name ____`` in FAILURES."""
    text = result.stdout.str()
    header = next(line for line in text.splitlines() if line.strip("_ ") == test_name)
    return text.split(header, 1)[1].split("\n__", 1)[0]


def load_report(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def test_a_data_dependent_if_fails_the_gate_with_category_line_and_fix(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = copy_example(pytester)
    line = break_shared_block(project)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")

    result = pytester.runpytest_subprocess("tests/test_encoder.py", "--fx-report=fx-report.json")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    where = f"{BLOCK_FILE}:{line}"
    failure = failure_section(result, "test_hidden_states_are_returned_on_request")
    # what broke, in which submodule, where, why
    assert (
        "TextEncoder.layers.0 (TransformerBlock) is not traceable: `if x.abs().max() > 1e4:` "
        f"at {where} uses a traced value in control flow"
    ) in failure
    assert "category: control-flow" in failure
    # the fix: options verified to work, and the change in code
    assert "fix (verified): @pytest.mark.traceable(leaf_modules=[" in failure
    assert "'TransformerBlock'])" in failure
    assert "torch.where(cond, a, b)" in failure
    assert "Traceback" not in result.stdout.str()
    # the three marked/fixture tests of the encoder fail; the unmarked one still passes
    outcomes = result.parseoutcomes()
    assert (outcomes["failed"], outcomes["passed"]) == (3, 1)
    # the PR annotation sits on the guard's line
    result.stdout.fnmatch_lines(
        [f"::error file={BLOCK_FILE},line={line},title=pytest-fxtrace*TextEncoder*control-flow*"]
    )
    records = load_report(project / "fx-report.json")
    failing = [r for r in records if r["status"] == "untraceable"]
    assert len(failing) == 3
    assert {(r["category"], r["module"]) for r in failing} == {("control-flow", "layers.0")}
    assert {r["location"]["path"] for r in failing} == {BLOCK_FILE}
    assert {r["location"]["line"] for r in failing} == {line}
    suggestion = failing[0]["suggestion"]
    assert suggestion["verified"] is True
    assert "TransformerBlock" in suggestion["options"]["leaf_modules"]


def test_a_changed_graph_fails_on_its_snapshot_until_the_update_is_committed(
    pytester: pytest.Pytester,
) -> None:
    project = copy_example(pytester)
    source = project / DETECTOR_FILE
    source.write_text(source.read_text().replace(DETECTOR_BOXES, DETECTOR_CLAMPED))
    golden = project / DETECTOR_SNAPSHOT
    before = golden.read_text()

    result = pytester.runpytest_subprocess("tests/test_detector.py")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"TinyDetector: the generated code differs from the golden snapshot {DETECTOR_SNAPSHOT}*",
            "*+    clamp = sigmoid.clamp(0.0, 1.0)*",
            "*accept the change with: pytest --fx-snapshot-update tests/test_detector.py::*",
        ]
    )
    assert golden.read_text() == before  # never rewritten without being asked

    updated = pytester.runpytest_subprocess("tests/test_detector.py", "--fx-snapshot-update")

    assert updated.ret == pytest.ExitCode.OK
    assert "clamp = sigmoid.clamp(0.0, 1.0)" in golden.read_text()  # the reviewable diff of the PR


@pytest.mark.slow
def test_the_unbroken_example_passes_the_gate_and_prints_the_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = copy_example(pytester)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)

    # ./run-example writes both reports
    result = pytester.runpytest_subprocess("--fx-report=fx-report.json", "--fx-html=fx-report.html")

    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0
    # AdaptiveDepthNet, declared xfail="control-flow"; FramePooler's FX check, xfail="len"
    assert outcomes["xfailed"] == 2
    result.stdout.fnmatch_lines(["*fxtrace summary*", "*checks: *passed, 2 xfailed*"])
    result.stdout.fnmatch_lines([f"HTML report: {project / 'fx-report.html'}"])
    records = load_report(project / "fx-report.json")
    # ImageClassifier's tests skip where torchvision is not installed (its trunk is a ResNet)
    expected = ALL_MODELS - ({"acme_models.classifier.ImageClassifier"} if optional.missing("torchvision") else set())
    assert {r["model"] for r in records} == expected
    pooler = [(r["backend"], r["status"]) for r in records if r["model"] == "acme_models.pooling.FramePooler"]
    exported = [] if EXPORT_PROBLEM else [("export", "passed")]  # torch.export's check needs a newer torch
    assert pooler == [("fx", "xfailed"), *exported]
    if exported:  # two backends ran: the summary has their column, the FX row names the len() line
        # (cells are shortened to the terminal's width: a narrow one cuts the model's name)
        result.stdout.fnmatch_lines(["*test*model*backend*status*category*", "*_its_frames*fx*xfailed*len*"])
    statuses = {r["model"]: r["status"] for r in records if r["model"] != "acme_models.pooling.FramePooler"}
    assert statuses.pop("acme_models.adaptive.AdaptiveDepthNet") == "xfailed"
    assert set(statuses.values()) == {"passed"}
