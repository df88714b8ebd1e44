"""GPU tests: run on the H200 (`pytest -m gpu`); skipped where no CUDA GPU is visible.

The planted cheats rejected on a real GPU, a kernel that breaks the CUDA context with the worker recovering,
a memory-bound kernel reaching >= 80 % of the measured copy bandwidth, and quick and full timing agreeing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.core import ceilings
from workbench.core.candidate import Candidate
from workbench.devices import cuda_gpu_count
from workbench.devices.local import LocalDevice
from workbench.examples import EXAMPLES
from workbench.harness.ladder import Ladder
from workbench.problems import Problem
from workbench.problems.analysis import count

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")]

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def gpu():
    # the hanging cheat waits this long
    dev = LocalDevice("cuda", timeouts={"compile": 30, "correctness": 60, "quick_timing": 60})
    yield dev
    dev.close()


def _header(path: Path) -> dict:
    from cheat_headers import read_header

    return read_header(path)


@pytest.mark.parametrize("path", sorted((HERE / "cheats").glob("*.py")), ids=lambda p: p.stem)
def test_cheats_rejected_on_gpu(gpu, path):
    h = _header(path)
    problem = Problem.load(h["problem"])  # full size: the GPU has the memory
    ev = Ladder(gpu).evaluate(problem, Candidate.from_file(path), up_to="quick_timing")
    assert not ev.ok, f"{path.name} passed on the GPU: {[(s.name, s.verdict, s.reason) for s in ev.stages]}"
    failed = ev.stages[-1]
    assert failed.verdict == "fail"
    if h["caught_by"] == "static":
        assert failed.name == "static" and h["reason"] in failed.reason.lower()
    else:  # at its stage, or later: the GPU may catch a cheat the CPU interpreter caught differently
        order = ["compile", "correctness", "quick_timing"]
        assert failed.name in order[order.index(h["caught_by"]):], (failed.name, failed.reason)


def test_worker_recovers_from_broken_context(gpu):
    problem = Problem.load("scale_shift_relu")
    ladder = Ladder(gpu)
    bad = ladder.evaluate(problem, Candidate.from_file(HERE / "gpu_cases" / "illegal_address.py"),
                          up_to="correctness")
    assert not bad.ok and bad.stages[-1].name == "correctness"
    assert "cuda context broken" in bad.stages[-1].reason.lower() or "crashed" in bad.stages[-1].reason.lower()
    good = ladder.evaluate(problem, Candidate.from_file(EXAMPLES[0].path), up_to="quick_timing")
    assert good.ok, [(s.name, s.reason) for s in good.stages]


def test_memory_bound_kernel_reaches_copy_bandwidth(gpu):
    c = ceilings.load(gpu.gpu_name)
    assert c is not None, "no measured ceilings: run experiments/measure_ceilings.py first"
    problem = Problem.load("scale_shift_relu")
    ev = Ladder(gpu).evaluate(problem, Candidate.from_file(EXAMPLES[0].path), force_full=True)
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]
    ms = ev.stage("full_timing").data["candidate"]["min_ms"]
    gbps = count(problem).min_bytes / (ms / 1e3) / 1e9
    assert gbps >= 0.8 * c["copy_gbps"], f"{gbps:.0f} GB/s < 80% of {c['copy_gbps']:.0f}"


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.problem)
def test_quick_and_full_timing_agree(gpu, ex):
    problem = Problem.load(ex.problem)
    ev = Ladder(gpu).evaluate(problem, Candidate.from_file(ex.path), force_full=True)
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]
    q, f = ev.stage("quick_timing").data["candidate"], ev.stage("full_timing").data["candidate"]
    # absolute medians drift with the clocks between two stages seconds apart (5.4 %, 8.9 % and 15 % seen on the H200:
    # results/isolation/gpu_tests_session3_call2.log, results/kernelbench/h200_sample_session29/gpu_tests_call1.log),
    # which is why the ladder judges ratios against the interleaved reference: those must agree
    print("quick", q["median_ms"], "full", f["median_ms"])
    # the speedups, measured call by call against the interleaved reference
    qs, fs = ev.stage("quick_timing").data["speedup_vs_eager"], ev.stage("full_timing").data["speedup_vs_eager"]
    assert abs(qs - fs) / fs <= max(q["spread"], f["spread"], 0.05), (qs, fs)
