"""The expert tools on real Nsight Compute reports captured on the H200 (tests/fixtures/ncu_h200/, from
experiments/profile_suite.py; counters collected with --clock-control none on an NVIDIA H200, driver 580.159.04).

Each fixture holds a candidate's whole profile: the raw counters of every kernel (about 800 metrics each), the static
reading of its compile stage, the roofline verdict and the findings the tools gave on the device. Re-running the
tools here must give the same findings (a change to a tool shows up as a diff against real data), and the findings
must say what the numbers say.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from workbench.problems import Problem
from workbench.problems.analysis import count
from workbench.profiling.experts import diagnose
from workbench.profiling.findings import render
from workbench.profiling.roofline import RooflineVerdict

FIXTURES = Path(__file__).parent / "fixtures" / "ncu_h200"


def load(name: str) -> dict:
    with gzip.open(FIXTURES / f"{name}.json.gz", "rt") as f:
        return json.load(f)


def rerun(p: dict) -> list:
    fields = {f.name for f in dataclasses.fields(RooflineVerdict)}
    verdict = RooflineVerdict(**{k: v for k, v in p["roofline"].items() if k in fields})
    return diagnose(p["counters"]["metrics"], p["static"], count(Problem.load(p["problem"])), verdict, p["tools"])


@pytest.mark.parametrize("name", sorted(f.name.split(".")[0] for f in FIXTURES.glob("*.json.gz")))
def test_tools_reproduce_the_device_findings(name):
    p = load(name)
    assert p["counters"]["available"] and p["counters"]["metrics"]
    got = [(f.tool, f.severity, f.title, f.move, f.kernel) for f in rerun(p)]
    want = [(f["tool"], f["severity"], f["title"], f["move"], f["kernel"]) for f in p["findings"]]
    assert got == want


def test_conv_net_findings_match_its_counters():
    p = load("conv_net-best")
    assert p["roofline"]["bound"] == "latency"  # 1 % of bandwidth and 8 % of the tf32 rate
    found = {f.tool: f for f in rerun(p)}
    assert found["fusion"].severity == "critical" and found["tensor_cores"].severity == "critical"
    assert found["fusion"].move in ("fuse_kernels", "fuse_epilogue")
    assert len(p["counters"]["metrics"]) == 7  # seven kernels: the convolutions stay torch calls around two of ours
    assert "CRITICAL" in render(rerun(p))


def test_column_sum_default_tail_matches_the_grid():
    p = load("column_sum-default")
    [tail] = [f for f in rerun(p) if f.tool == "tail"]
    [(kernel, m)] = list(p["counters"]["metrics"].items())
    assert tail.kernel == kernel and tail.severity == "warning"
    # the finding's evidence is the launch's own numbers
    grid = m["launch__grid_size"]
    assert any(v == grid for v in tail.evidence.values()), tail.evidence


def test_a_kernel_at_the_bandwidth_ceiling_gets_no_findings():
    p = load("bias_gelu_residual-best")
    assert p["roofline"]["bound"] == "memory" and p["roofline"]["bw_fraction"] > 0.95
    assert rerun(p) == []


@pytest.mark.parametrize("name", ["conv_net-best", "column_sum-default"])
def test_the_profile_command_renders_device_reports(name):
    """What `workbench profile` prints (its `format_report`) on reports the H200 produced."""
    from workbench.profiling import format_report

    p = load(name)
    text = format_report(p)
    assert text.startswith(f"{p['problem']} / {p['candidate']}: compile pass")
    assert f"{p['roofline']['bound']}-bound" in text and "collected with ncu" in text
    for k in p["static"]["kernels"]:
        assert k["kernel"] in text
    for f in p["findings"]:
        assert f["title"] in text
