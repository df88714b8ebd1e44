"""The compile stage: compile every Triton kernel a candidate launches, for sm_90, on any machine (no GPU needed).

How: inside a CPU worker we point Triton at a stand-in driver that reports an sm_90 target, import the candidate,
build `ModelNew` and run its forward on *meta* tensors (shapes only, no data, any size). Each kernel launch is
intercepted and compiled with Triton's own binder (`JITFunction.run(..., warmup=True)`), so the specialisation, and
therefore the cache entry, is the one a real H200 launch would make; an autotuned kernel has every config compiled.
Nothing is launched. From each compiled kernel we read registers, spills and local memory (cuobjdump -res-usage on
the cubin), shared memory, warps, stages, and PTX facts (wgmma, TMA, mma), and reject what cannot launch on sm_90.

A forward that cannot run on meta tensors (it reads values, or calls `.cuda()`) leaves the stage inconclusive, with
the reason; correctness on a device then decides.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from typing import Any, Callable

from .records import FAIL, INCONCLUSIVE, PASS, StageRecord

# sm_90 launch limits (CUDA programming guide, compute capability 9.0).
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_PER_BLOCK = 227 * 1024  # opt-in dynamic shared memory per block
REGS_PER_SM = 65536
MAX_REGS_PER_THREAD = 255


class _StandInDriver:
    """Enough of Triton's driver interface to compile for a CUDA target with no GPU present."""

    def __init__(self, capability: int = 90, warp_size: int = 32):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, warp_size)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("meta")


def _cuobjdump() -> str | None:
    import triton.backends.nvidia as nv

    path = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
    return path if os.path.exists(path) else None


def resource_usage(cubin: bytes) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL from `cuobjdump -res-usage` of one cubin."""
    tool = _cuobjdump()
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    return {k.lower(): int(v) for k, v in found.items()}


def ptx_facts(ptx: str) -> dict[str, Any]:
    return {
        "wgmma": "wgmma.mma_async" in ptx,
        "mma": bool(re.search(r"\bmma\.sync", ptx)),
        "tma": "cp.async.bulk.tensor" in ptx,
        "cp_async": "cp.async" in ptx,
        "ld_global_v4": bool(re.search(r"ld\.global(\.\w+)*\.v4", ptx)),
        "local_memory": ".local" in ptx,
    }


def _describe(kernel, name: str, launch_kwargs: dict[str, Any]) -> dict[str, Any]:
    md = kernel.metadata
    info: dict[str, Any] = {
        "kernel": name,
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "shared_bytes": md.shared,
        "constexprs": {k: v for k, v in launch_kwargs.items() if isinstance(v, (int, float, bool, str))},
    }
    info.update(resource_usage(kernel.asm["cubin"]))
    info.update(ptx_facts(kernel.asm.get("ptx", "")))
    return info


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


def probe(progress: Callable[[str], None], problem: tuple, cand_path: str, capability: int = 90) -> dict[str, Any]:
    """Worker-side: trace the candidate's launches on meta tensors and compile each for sm_<capability>."""
    import torch
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from ..devices.sandbox import check_constructor, import_candidate
    from ..problems.problem import Problem

    progress("compile")
    driver.set_active(_StandInDriver(capability))
    compiled: list[dict[str, Any]] = []
    errors: list[str] = []
    orig_run, orig_tuner_run = JITFunction.run, Autotuner.run

    def jit_run(self, *args, grid=None, warmup=False, **kwargs):
        try:
            kernel = orig_run(self, *args, grid=grid, warmup=True, **kwargs)
            compiled.append(_describe(kernel, self.__name__, kwargs))
        except Exception as e:  # a compile error is the candidate's fault
            errors.append(f"{self.__name__}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
        return None

    def tuner_run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        for config in self.configs:  # every config is a kernel the autotuner could pick
            self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None

    JITFunction.run, Autotuner.run = jit_run, tuner_run
    t0 = time.perf_counter()
    try:
        prob = Problem(*problem)
        with torch.device("meta"):
            init = prob.init_inputs()
            inputs = prob.inputs()
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        cls = import_candidate(cand_path)
        check_constructor(cls, init)
        trace_error = None
        try:
            with torch.device("meta"):
                model = cls(*init)
            with torch.no_grad():
                model(*inputs)
        except Exception as e:
            trace_error = f"{type(e).__name__}: {e}"
    finally:
        JITFunction.run, Autotuner.run = orig_run, orig_tuner_run
    return {"kernels": compiled, "compile_errors": errors, "trace_error": trace_error,
            "seconds": time.perf_counter() - t0}


def judge(result: dict[str, Any], cost_s: float) -> StageRecord:
    """Parent-side: turn the probe's result into the compile stage's record."""
    if result.get("tampered"):
        return StageRecord("compile", FAIL, "tampering: importing the candidate changed " +
                           ", ".join(result["tampered"]), cost_s)
    if "error" in result:
        reason = result["error"]
        if result.get("timed_out"):
            reason = f"compile timed out ({reason})"
        elif result.get("crashed"):
            reason = f"compile crashed ({reason})"
        return StageRecord("compile", FAIL, reason, cost_s, data={k: v for k, v in result.items() if k in ("traceback",)})
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
        return StageRecord("compile", FAIL, "compile error: " + "; ".join(result["compile_errors"]), cost_s,
                           data=data, flags=flags)
    problems = [p for k in kernels for p in launch_problems(k)]
    if problems:
        return StageRecord("compile", FAIL, "cannot launch on sm_90: " + "; ".join(problems), cost_s, data=data,
                           flags=flags)
    if result.get("trace_error") and not kernels:
        return StageRecord("compile", INCONCLUSIVE,
                           f"could not trace kernel launches on meta tensors ({result['trace_error']}); "
                           "correctness on a device decides", cost_s, data=data, flags=flags)
    if not kernels:
        return StageRecord("compile", PASS, "no Triton kernel launched (nothing to compile)", cost_s, data=data,
                           flags=flags)
    names = sorted({k["kernel"] for k in kernels})
    reason = f"{len(kernels)} kernel build(s) for sm_90: {', '.join(names)}"
    if result.get("trace_error"):
        reason += f" (forward stopped early on meta tensors: {result['trace_error']})"
    return StageRecord("compile", PASS, reason, cost_s, data=data, flags=flags)
