"""The compile stage, parent side: judge what the worker-side probe (`harness/child/compile_probe.py`) found.

Every Triton kernel a candidate launches is compiled for sm_90 on a CPU worker (no GPU needed); here the facts it
read are held against what can launch on sm_90 (threads, shared memory, registers), spills are flagged, and a forward
that could not be traced on meta tensors leaves the stage inconclusive with the reason (correctness on a device then
decides).
"""
from __future__ import annotations

from typing import Any

from ..core.records import FAIL, INCONCLUSIVE, PASS, Stage, StageRecord
from ..core.target import H200

# sm_90 launch limits (CUDA programming guide, compute capability 9.0).
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_PER_BLOCK = H200.smem_per_block
REGS_PER_SM = H200.regs_per_sm
MAX_REGS_PER_THREAD = 255


def launch_problems(k: dict[str, Any]) -> list[str]:
    """Reasons this kernel cannot launch on sm_90 (empty when it can)."""
    out = []
    threads = k["num_warps"] * 32
    if threads > MAX_THREADS_PER_BLOCK:
        out.append(f"{k['kernel']}: {threads} threads per block > {MAX_THREADS_PER_BLOCK}")
    if k["shared_bytes"] > MAX_SHARED_PER_BLOCK:
        out.append(f"{k['kernel']}: {k['shared_bytes']} B shared memory > {MAX_SHARED_PER_BLOCK} B")
    regs = k.get("reg")
    if regs and regs * threads > REGS_PER_SM:
        out.append(f"{k['kernel']}: {regs} registers x {threads} threads > {REGS_PER_SM} per SM")
    return out


def judge(result: dict[str, Any], cost_s: float) -> StageRecord:
    """Parent-side: turn the probe's result into the compile stage's record."""
    if result.get("tampered"):
        return StageRecord(Stage.COMPILE, FAIL, "tampering: importing the candidate changed " +
                           ", ".join(result["tampered"]), cost_s)
    if "error" in result:
        reason = result["error"]
        if result.get("timed_out"):
            reason = f"compile timed out ({reason})"
        elif result.get("crashed"):
            reason = f"compile crashed ({reason})"
        return StageRecord(Stage.COMPILE, FAIL, reason, cost_s,
                           data={k: v for k, v in result.items() if k in ("traceback",)})
    if result.get("problem_meta_error"):
        return StageRecord(Stage.COMPILE, INCONCLUSIVE,
                           f"the problem's inputs cannot be built on meta tensors ({result['problem_meta_error']}), so "
                           "kernel launches were not traced; correctness on a device decides", cost_s)
    kernels = result["kernels"]
    flags = []
    for k in kernels:
        if k.get("stack") or k.get("local"):
            flags.append({"check": "spills", "severity": "warning",
                          "reason": f"{k['kernel']}: {k.get('stack', 0)} B stack / {k.get('local', 0)} B local memory "
                                    "(register spills)"})
    data = {"kernels": kernels, "n_kernels": len(kernels), "target": "sm_90",
            "trace_error": result.get("trace_error")}
    if result["compile_errors"]:
        return StageRecord(Stage.COMPILE, FAIL, "compile error: " + "; ".join(result["compile_errors"]), cost_s,
                           data=data, flags=flags)
    problems = [p for k in kernels for p in launch_problems(k)]
    if problems:
        return StageRecord(Stage.COMPILE, FAIL, "cannot launch on sm_90: " + "; ".join(problems), cost_s, data=data,
                           flags=flags)
    if result.get("trace_error") and not kernels:
        return StageRecord(Stage.COMPILE, INCONCLUSIVE,
                           f"could not trace kernel launches on meta tensors ({result['trace_error']}); "
                           "correctness on a device decides", cost_s, data=data, flags=flags)
    if not kernels:
        return StageRecord(Stage.COMPILE, PASS, "no Triton kernel launched (nothing to compile)", cost_s, data=data,
                           flags=flags)
    names = sorted({k["kernel"] for k in kernels})
    reason = f"{len(kernels)} kernel build(s) for sm_90: {', '.join(names)}"
    if result.get("trace_error"):
        reason += f" (forward stopped early on meta tensors: {result['trace_error']})"
    return StageRecord(Stage.COMPILE, PASS, reason, cost_s, data=data, flags=flags)
