"""Worker side of the compile stage: trace a candidate's kernel launches on meta tensors and compile each for sm_90.

Runs only inside a spawned CPU worker (`devices.worker`), whose environment is set before torch and triton are imported.
Inside, Triton is pointed at a stand-in driver that reports an sm_90 target; the candidate is imported, `ModelNew` built
and its forward run on *meta* tensors (shapes only, any size). Each launch is intercepted and compiled with Triton's own
binder (`JITFunction.run(..., warmup=True)`), so the specialisation is the one a real launch would make; an autotuned
kernel has every config compiled. Nothing is launched. From each kernel it reads registers, spills and local memory
(cuobjdump -res-usage on the cubin), shared memory, warps, stages and PTX facts (wgmma, TMA, mma); the parent
(`harness.compile.judge`) decides.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from typing import Any, Callable

import torch
import triton.backends.nvidia as nv
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from ...problems.problem import Problem
from . import watchdog
from .sandbox import check_constructor, import_candidate


class _StandInDriver:
    """Enough of Triton's driver interface to compile for a CUDA target with no GPU present."""

    def __init__(self, capability: int = 90, warp_size: int = 32):
        self.target = GPUTarget("cuda", capability, warp_size)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("meta")


def _cuobjdump() -> str | None:
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


def probe(progress: Callable[[str], None], problem: tuple, cand_path: str, capability: int = 90,
          windows: dict[str, float] | None = None) -> dict[str, Any]:
    """Worker-side: trace the candidate's launches on meta tensors and compile each for sm_<capability>. `windows`:
    the watchdog's seconds for tracing ("trace": importing the candidate, ModelNew(...) and its forward on meta, between
    kernel compiles) and for compiling one kernel ("compile")."""
    progress("compile")
    windows = windows or {}
    driver.set_active(_StandInDriver(capability))
    compiled: list[dict[str, Any]] = []
    errors: list[str] = []
    orig_run, orig_tuner_run = JITFunction.run, Autotuner.run

    def jit_run(self, *args, grid=None, warmup=False, **kwargs):
        watchdog.overriding(f"compiling kernel {self.__name__} for sm_{capability}", windows.get("compile"))
        try:
            kernel = orig_run(self, *args, grid=grid, warmup=True, **kwargs)
            compiled.append(_describe(kernel, self.__name__, kwargs))
        except Exception as e:  # a compile error is the candidate's fault
            last_line = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            errors.append(f"{self.__name__}: {type(e).__name__}: {last_line}")
        finally:
            watchdog.resume()  # back to tracing
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
        try:
            with torch.device("meta"):
                init = prob.init_inputs()
                inputs = prob.inputs()
            inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        except Exception as e:  # the problem's own code (.item(), a host loop) cannot run on meta: not the candidate's
            return {"kernels": [], "compile_errors": [], "trace_error": None,
                    "problem_meta_error": f"{type(e).__name__}: {str(e).strip()[:300]}",
                    "seconds": time.perf_counter() - t0}
        with watchdog.window("tracing the candidate (import, ModelNew(...), forward on meta tensors)",
                             windows.get("trace")):
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
