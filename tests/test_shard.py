"""Zoo items split over CI jobs with pytest-shard, and the shards' JSON reports merged
by ``python -m pytest_fxtrace.merge`` into the records and summary of one run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pytest_fxtrace.report.html import tree_rows

REGISTRY = """
import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class Registry:
    def names(self):
        return [f"model_{i}" for i in range(10)]

    def build(self, name):
        return Branchy() if name in ("model_3", "model_8") else torch.nn.Linear(3, 3)

    def example_inputs(self, name, model):
        return (torch.randn(2, 3),)


REGISTRY = Registry()
"""


def results(path) -> list[dict]:
    out = json.loads(path.read_text())["results"]
    for record in out:
        record.pop("trace_seconds")
    return sorted(out, key=lambda r: r["nodeid"])


def merge(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_fxtrace.report.merge", *args],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def page_checks(path) -> list[dict]:
    """The checks an HTML report draws (its embedded data), without timings."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="fx-data">(.*?)</script>', text, re.S).group(1))
    checks = []
    for check in data["checks"]:
        check = dict(check)
        check.pop("seconds")
        tree = check.pop("tree")
        check["tree"] = None if tree is None else [[data["types"][row[2]], *row[:2], *row[3:]] for row in tree_rows(data, tree)]
        checks.append(check)
    return checks


def shard_and_merge(pytester: pytest.Pytester, *zoo_args: str) -> tuple[list, list, subprocess.CompletedProcess]:
    whole = pytester.runpytest_subprocess(
        *zoo_args, "--fx-report=whole.json", "--fx-html=whole.html", "-p", "no:xdist"
    )
    for shard in ("0", "1"):
        run = pytester.runpytest_subprocess(
            *zoo_args, "--num-shards=2", f"--shard-id={shard}", f"--fx-report=shard{shard}.json", "-p", "no:xdist"
        )
        assert results(pytester.path / f"shard{shard}.json"), run.stdout.str()  # each shard checked something
    merged = merge(pytester, "shard0.json", "shard1.json", "-o", "merged.json", "--html", "merged.html")
    assert merged.returncode == (0 if whole.ret == 0 else 1), merged.stderr
    return results(pytester.path / "whole.json"), results(pytester.path / "merged.json"), merged


def test_two_shards_merged_give_the_records_and_summary_of_one_run(pytester):
    pytester.makepyfile(shardreg=REGISTRY)
    pytester.syspathinsert()
    whole, merged, proc = shard_and_merge(pytester, "--fx-zoo=shardreg:REGISTRY")
    assert merged == whole
    # the merged page draws what one run's page draws: rows, messages, fixes, module trees
    merged_page = page_checks(pytester.path / "merged.html")
    assert merged_page == page_checks(pytester.path / "whole.html")
    branchy = next(c for c in merged_page if c["test"].endswith("::model_3"))
    assert branchy["status"] == "untraceable" and branchy["source"] == "if x.sum() > 0:"
    assert branchy["text"].startswith("Branchy is not traceable")
    assert [c["tree"] for c in merged_page if c["test"].endswith("::model_0")] == [[["Linear", 0, "", "t", 12]]]
    assert proc.stdout.splitlines()[0] == "10 checks: 8 passed, 2 untraceable"
    assert "zoo/shardreg:REGISTRY::model_3  Branchy  untraceable  control-flow" in proc.stdout


def test_merge_refuses_overlapping_shards(pytester):
    pytester.makepyfile(shardreg=REGISTRY)
    pytester.syspathinsert()
    pytester.runpytest_subprocess("--fx-zoo=shardreg:REGISTRY", "-k", "model_1", "--fx-report=a.json")
    proc = merge(pytester, "a.json", "a.json", "-o", "merged.json")
    assert proc.returncode == 2
    assert "zoo/shardreg:REGISTRY::model_1 is in both a.json and a.json: the shards overlap" in proc.stderr
    assert not (pytester.path / "merged.json").exists()


@pytest.mark.slow
def test_torchvision_zoo_shards_merge_into_the_unsharded_records(pytester):
    pytest.importorskip("torchvision")
    filters = ("--fx-zoo-filter=squeezenet*", "--fx-zoo-filter=mnasnet0_5", "--fx-zoo-filter=raft_small",
               "--fx-zoo-filter=shufflenet_v2_x0_5", "--fx-zoo-filter=resnet18")
    whole, merged, _ = shard_and_merge(pytester, "--fx-zoo=torchvision", *filters)
    assert len(whole) == 6
    assert merged == whole
