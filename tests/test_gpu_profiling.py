"""GPU tests of the profiler layer and of the benchmark's extra references: run on the H200 (`pytest -m gpu`);
skipped where no CUDA GPU is visible.

- Nsight Compute collection on a real candidate: counters for its kernel, a measured roofline verdict, findings;
- NVML energy of a candidate and of the eager reference, over >= 1 s windows, idle power subtracted, 3 repeats;
- full timing against torch.compile in default and max-autotune modes in one run.
"""
from __future__ import annotations

import pytest

from workbench.core.candidate import Candidate
from workbench.devices import cuda_gpu_count
from workbench.devices.local import LocalDevice, problem_spec
from workbench.devices.worker import Worker
from workbench.examples import EXAMPLES
from workbench.harness.ladder import Ladder
from workbench.problems import Problem

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")]

EX = EXAMPLES[0]  # scale_shift_relu: one memory-bound elementwise kernel


def test_ncu_counters_and_findings_on_a_real_candidate():
    from workbench.profiling import profile_candidate
    from workbench.profiling.ncu import find_ncu

    try:
        find_ncu()
    except Exception as e:  # the device image ships ncu; anywhere else this says why the test cannot run
        pytest.skip(f"Nsight Compute not found: {e}")
    problem = Problem.load(EX.problem)
    r = profile_candidate(problem, EX.path, device="cuda")
    assert r["compile"]["verdict"] == "pass"
    assert r["counters"]["available"], r["counters"]["reason"]
    [(kernel, m)] = [(k, v) for k, v in r["counters"]["metrics"].items()]
    assert "scale_shift_relu" in kernel or "kernel" in kernel
    assert m["gpu__time_duration.sum"] > 0 and m["dram__bytes_read.sum"] > 0
    # a streaming kernel reads about its input once (the 4-byte fp32 tensor), within the counters' granularity
    x_bytes = 4 * int(problem.module.batch_size) * int(problem.module.dim)
    assert 0.8 * x_bytes <= m["dram__bytes_read.sum"] <= 1.5 * x_bytes
    assert r["roofline"]["bound"] == "memory"
    assert isinstance(r["findings"], list) and r["summary"]


def test_energy_of_candidate_and_reference(gpu_to_itself):
    problem = Problem.load(EX.problem)
    w = Worker({"CUDA_VISIBLE_DEVICES": "0"}, name="energy")
    try:
        r = w.call("workbench.profiling.energy:measure_candidate", 300,
                   problem=problem_spec(problem), cand_path=str(EX.path))
    finally:
        w.stop()
    assert r["verdict"] == "pass", r
    for name in ("candidate", "eager"):
        e = r["data"][name]
        assert e["window_s"] >= 1.0 and len(e["per_repeat"]) == 3
        assert e["busy_watts"] > e["idle_watts"] > 0
        assert 0 < e["joules_per_call"] < e["total_joules_per_call"]
    # the fused kernel moves a third of eager's bytes: it should not cost more energy per call than eager
    assert r["data"]["energy_ratio_vs_eager"] < 1.0


def test_full_timing_against_default_and_max_autotune():
    dev = LocalDevice("cuda")
    try:
        ev = Ladder(dev, compile_modes=("default", "max-autotune")).evaluate(
            Problem.load(EX.problem), Candidate.from_file(EX.path), force_full=True)
    finally:
        dev.close()
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]
    d = ev.stage("full_timing").data
    assert set(d["models_timed"]) == {"eager", "candidate", "compiled", "compiled[max-autotune]"}
    assert d["compile_ms"] > 0 and d["compile_max_autotune_ms"] > 0
    assert d["speedup_vs_max_autotune"] == pytest.approx(d["compile_max_autotune_ms"] / d["candidate_ms"])
    assert "max-autotune" in ev.stage("full_timing").reason
