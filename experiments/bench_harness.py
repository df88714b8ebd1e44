"""Harness benchmark (GPU): what the ladder costs next to timing a kernel by hand.

    python experiments/bench_harness.py [--out results/bench_harness.json] [--variants 48]

1. Full-timing overhead: wall time of one full-timing stage (worker call included) for an example candidate, against
   the wall time of `triton.testing.do_bench` timing the same kernel alone in this process; also the candidate's own
   timed loop inside the stage (the part comparable to do_bench), and the medians both report.
2. Throughput at quick fidelity: many distinct candidates (block size x warps variants of the example kernels) taken
   up the ladder to quick timing; compile runs first on CPU workers (off the GPU's critical path), then the GPU stages
   (correctness + quick timing) run back to back. Candidates per GPU-minute = candidates / (GPU-seconds / 60), where
   GPU-seconds is the wall time the GPU worker was held, as the budget counts it.
3. With --reference-cache-ab: the same throughput run twice more, each on a fresh GPU worker, with the worker's
   reference cache off (WORKBENCH_REFERENCE_CACHE=0: every seed runs the reference) and on, side by side in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.core.candidate import Candidate  # noqa: E402
from workbench.devices.local import LocalDevice  # noqa: E402
from workbench.examples import EXAMPLES  # noqa: E402
from workbench.harness.ladder import Ladder  # noqa: E402
from workbench.problems import Problem  # noqa: E402


def variants(n: int) -> list[tuple[str, Candidate]]:
    """Distinct candidate sources: the elementwise and softmax examples with other block sizes and warp counts."""
    out = []
    ssr = EXAMPLES[0].path.read_text()
    for block in (512, 1024, 2048, 4096, 8192, 16384):
        for warps in (1, 2, 4, 8, 16):
            src = re.sub(r"BLOCK=\d+, num_warps=\d+", f"BLOCK={block}, num_warps={warps}",
                         ssr.replace("triton.cdiv(n, 4096)", f"triton.cdiv(n, {block})"))
            out.append(("scale_shift_relu", Candidate(src)))
    sm = EXAMPLES[1].path.read_text()
    for w1 in (1, 2, 4, 8):
        for w2 in (4, 8, 16, 32):
            src = sm.replace("warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)",
                             f"warps = {w1} if block <= 2048 else {w2}")
            out.append(("softmax_rows", Candidate(src)))
    return out[:n]


def bench_full_timing(dev: LocalDevice) -> dict:
    import torch
    import triton.testing

    from workbench.problems.loader import import_file

    ex = EXAMPLES[0]
    problem = Problem.load(ex.problem)
    path = Candidate.from_file(ex.path).write()
    dev.run_stages(problem, path, ["correctness"])  # import, build, JIT: the warm state a promotion finds
    t0 = time.perf_counter()
    cold = dev.run_stages(problem, path, ["full_timing"])[0]  # includes torch.compile of the reference (once a problem)
    cold_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec = dev.run_stages(problem, path, ["full_timing"])[0]  # steady state: what each further candidate costs
    stage_wall = time.perf_counter() - t0
    assert cold.ok and rec.ok, (cold.reason, rec.reason)

    mod = import_file(path, "bench_cand")  # trusted here: our own example
    model = mod.ModelNew(*problem.init_inputs()).cuda()
    torch.manual_seed(0)
    x = [t.cuda() for t in problem.inputs()]
    model(*x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    med = triton.testing.do_bench(lambda: model(*x), return_mode="median")
    bench_wall = time.perf_counter() - t0
    per_model = rec.data["timed_wall_s"] / len(rec.data["models_timed"])
    return {"problem": problem.name, "candidate": ex.path.name,
            "full_timing_stage_wall_first_s": cold_wall, "full_timing_stage_wall_s": stage_wall,
            "models_timed": rec.data["models_timed"], "timed_calls_wall_s": rec.data["timed_wall_s"],
            "timed_calls_wall_per_model_s": per_model, "do_bench_wall_s": bench_wall,
            "ratio_stage_over_do_bench": stage_wall / bench_wall,
            "ratio_per_model_over_do_bench": per_model / bench_wall,
            "stage_median_ms": rec.data["candidate_ms"], "do_bench_median_ms": med,
            "stage_reps": rec.data["reps"], "stage_spread": rec.data["spread"],
            "speedup_vs_eager": rec.data["speedup_vs_eager"], "speedup_vs_compile": rec.data.get("speedup_vs_compile")}


def bench_throughput(dev: LocalDevice, n: int, compile_workers: int) -> dict:
    cands = variants(n)
    problems = {name: Problem.load(name) for name in {p for p, _ in cands}}
    # Compile stage on CPU workers, in parallel, before any GPU work (fills Triton's cache for the GPU worker).
    compilers = [LocalDevice("cpu") for _ in range(compile_workers)]
    t0 = time.perf_counter()
    paths = [c.write() for _, c in cands]

    def compile_one(i: int):
        return compilers[i % compile_workers].compile(problems[cands[i][0]], paths[i])

    with ThreadPoolExecutor(compile_workers) as pool:
        comp = list(pool.map(compile_one, range(len(cands))))
    compile_wall = time.perf_counter() - t0
    for c in compilers:
        c.close()
    ladder = Ladder(dev)
    t0 = time.perf_counter()
    results = []
    for (pname, _), path in zip(cands, paths):
        recs = dev.run_stages(problems[pname], path, ["correctness", "quick_timing"])
        for r in recs:
            ladder.budget.charge(r.name, r.gpu_s)
        results.append(recs)
    gpu_wall = time.perf_counter() - t0
    gpu_s = ladder.budget.gpu_spent
    passed = sum(1 for recs in results if len(recs) == 2 and all(r.ok for r in recs))
    return {"candidates": len(cands), "reached_quick_timing": passed,
            "compile_pass": sum(1 for c in comp if c.ok), "compile_wall_s": compile_wall,
            "compile_workers": compile_workers, "gpu_seconds": gpu_s, "gpu_phase_wall_s": gpu_wall,
            "candidates_per_gpu_minute": len(cands) / (gpu_s / 60), "by_stage": ladder.budget.report()["by_stage"],
            "failures": [(str(p), recs[-1].name, recs[-1].reason) for (_, _), p, recs in zip(cands, paths, results)
                         if not all(r.ok for r in recs)][:5]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_harness.json"))
    ap.add_argument("--variants", type=int, default=46)
    ap.add_argument("--compile-workers", type=int, default=8)
    ap.add_argument("--reference-cache-ab", action="store_true",
                    help="also measure throughput with the worker's reference cache off and on, on fresh workers")
    ap.add_argument("--skip-full-timing", action="store_true")
    args = ap.parse_args()
    dev = LocalDevice("cuda")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"device": dev.provenance()}
    try:
        if not args.skip_full_timing:
            report["full_timing"] = bench_full_timing(dev)
            out.write_text(json.dumps(report, indent=2, default=str) + "\n")  # keep the first part if the next fails
        report["throughput_quick"] = bench_throughput(dev, args.variants, args.compile_workers)
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    finally:
        dev.close()
    if args.reference_cache_ab:
        for setting in ("0", "1"):  # the child reads it from the environment it is spawned with
            os.environ["WORKBENCH_REFERENCE_CACHE"] = setting
            fresh = LocalDevice("cuda")
            try:
                report[f"throughput_quick_reference_cache_{'on' if setting == '1' else 'off'}"] = \
                    bench_throughput(fresh, args.variants, args.compile_workers)
            finally:
                fresh.close()
            out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
