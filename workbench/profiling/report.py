"""`profile_candidate`: everything the profiler can say about one candidate, on whatever machine this is.

Always (CPU, no GPU): the candidate's kernels compiled for sm_90 in a CPU worker, as the compile stage does, with
their PTX and SASS read (`static_reading`), and the roofline verdict from the problem's counts and the measured
ceilings. With a GPU and Nsight Compute: the hardware counters too. The expert tools the verdict picks then turn all
of it into findings. What could not be collected is said, with the reason, never filled in.
"""
from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..core.ceilings import load as load_ceilings
from ..core.records import FAIL, StageRecord
from ..core.target import H200
from ..devices.local import COMPILE_ENV, cuda_gpu_count, problem_spec
from ..devices.worker import Worker
from ..harness import compile as compile_stage
from . import ncu
from .experts import diagnose
from .findings import ProfilerUnavailable, moves, render
from .roofline import classify, tools_for
from .static_reading import read_kernel, read_static


def _cuobjdump_sass(cubin: bytes) -> str | None:
    from ..harness.child.compile_probe import _cuobjdump  # worker side: imports torch and triton

    tool = _cuobjdump()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=120).stdout


def _grid(grid: Any, fn: Any, args: tuple, kwargs: dict) -> list[int] | None:
    try:
        if callable(grid):
            meta = dict(zip(getattr(fn, "arg_names", []), args))
            meta.update(kwargs)
            grid = grid(meta)
        dims = [int(g) for g in grid] + [1] * (3 - len(grid))
        return dims[:3]
    except Exception:  # a grid we cannot evaluate on meta tensors: the tail tool then waits for counters
        return None


def probe(progress: Callable[[str], None], problem: tuple, cand_path: str, keep_asm: bool = False) -> dict:
    """Worker-side: the compile stage's probe, with each kernel's grid, PTX and SASS read in the worker (the text
    stays here unless `keep_asm` sends it back, under each kernel's "asm": the worker's file system is read-only, so
    the caller writes the files)."""
    from triton.runtime.jit import JITFunction  # worker side: torch and triton load only in the worker

    from ..harness.child import compile_probe

    last: dict[str, Any] = {}
    orig_run, orig_describe = JITFunction.run, compile_probe._describe

    def run(self, *args, grid=None, warmup=False, **kwargs):
        last["grid"] = _grid(grid, self, args, kwargs)
        return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def describe(kernel, name, launch_kwargs):
        info = orig_describe(kernel, name, launch_kwargs)
        info["grid"] = last.get("grid")
        try:  # a reading that fails must not look like the candidate's compile error
            ptx, sass = kernel.asm.get("ptx", ""), _cuobjdump_sass(kernel.asm["cubin"])
            info["static"] = read_kernel(info, ptx=ptx, sass=sass)
        except Exception as e:
            info["static_error"] = f"{type(e).__name__}: {e}"
            return info
        if keep_asm:
            info["asm"] = {"ptx": ptx, "sass": sass or ""}
        return info

    # compile_probe.probe saves JITFunction.run (ours) as its original and calls it with warmup=True
    JITFunction.run, compile_probe._describe = run, describe
    try:
        return compile_probe.probe(progress, problem, cand_path)
    finally:
        JITFunction.run, compile_probe._describe = orig_run, orig_describe


def _gpu_name() -> str | None:
    if cuda_gpu_count() == 0:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
        return out.splitlines()[0].strip() or None
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def profile_candidate(problem: Any, candidate_path: str | Path, device: str = "local", ms: float | None = None,
                      counters: bool = True, tools: list[str] | None = None, asm_dir: str | None = None,
                      timeout: float = 300.0) -> dict[str, Any]:
    """Static reading, roofline verdict, counters where a GPU with ncu is present, and the expert findings.
    `ms`: a measured time for the roofline (else the floor's verdict); `device`: local (the GPU when there is one),
    cpu (no counters), cuda[:N]."""
    cand = Path(candidate_path).resolve()
    record, counts = _compile_and_count(problem, cand, asm_dir, timeout)
    static = read_static(record.data.get("kernels", []))
    ceil, notes = _ceilings(_gpu_name() if device != "cpu" else None)
    verdict = None
    if ceil is not None:
        try:
            verdict = classify(counts.flops, counts.min_bytes, ms, ceil, counts.compute_dtype)
        except KeyError as e:
            notes.append(f"no roofline verdict: {e.args[0]}")
    metrics, counter_note = _counters(problem, cand, device, counters, record)
    kernel_ms = ncu.forward_ms(metrics)
    if ms is None and kernel_ms and ceil is not None and verdict is not None:
        # counters carry a time: the verdict becomes a measured one (kernel time only, caches flushed by ncu)
        verdict = classify(counts.flops, counts.min_bytes, kernel_ms, ceil, counts.compute_dtype)
        notes.append(f"roofline time {kernel_ms:.4g} ms from ncu's gpu__time_duration (kernel time only; ncu flushes "
                     "caches between replays)")
    sm_count = int((ceil or {}).get("sm_count") or H200.sms)
    findings = diagnose(metrics, static, counts, verdict, tools, sm_count=sm_count)
    return {
        "problem": problem.name, "candidate": str(cand),
        "compile": {"verdict": record.verdict.value, "reason": record.reason},
        "counts": {"flops": counts.flops, "min_bytes": counts.min_bytes, "eager_bytes": counts.eager_bytes,
                   "compute_dtype": counts.compute_dtype},
        "roofline": verdict.to_dict() if verdict else None,
        "tools": tools if tools is not None else tools_for(verdict) if verdict else None,
        "static": static,
        "counters": {"available": bool(metrics), "reason": counter_note, "metrics": metrics},
        "findings": [f.to_dict() for f in findings], "moves": moves(findings),
        "summary": render(findings), "notes": notes,
    }


def _compile_and_count(problem: Any, cand: Path, asm_dir: str | None, timeout: float) -> tuple[StageRecord, Any]:
    """The compile stage's record (the probe run in a compile worker, as a device's compile stage runs it, with each
    kernel's PTX and SASS read there) and the problem's counts; the worker's start-up overlaps the counting."""
    from ..problems.analysis import count  # torch: the counting loads it, only when a report is asked for

    worker = Worker(COMPILE_ENV, name="profile-compile")
    answer: dict[str, Any] = {}

    def compile_in_worker():
        t0 = time.perf_counter()
        try:
            answer["result"] = worker.call("workbench.profiling.report:probe", timeout, problem=problem_spec(problem),
                                           cand_path=str(cand), keep_asm=bool(asm_dir))
        finally:
            answer["seconds"] = time.perf_counter() - t0
            worker.stop()

    thread = threading.Thread(target=compile_in_worker, daemon=True)
    thread.start()
    try:
        counts = count(problem)
    finally:
        thread.join()
    result = answer.get("result") or {"error": "the compile worker gave no answer", "crashed": True}
    if asm_dir:
        write_asm(result.get("kernels") or [], Path(asm_dir))
    return compile_stage.judge(result, answer.get("seconds", 0.0)), counts


def write_asm(kernels: list[dict[str, Any]], asm_dir: Path) -> list[Path]:
    """Each kernel's PTX and SASS (taken out of its compile facts) as <name>_<i>.ptx/.sass under `asm_dir`."""
    asm_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, k in enumerate(kernels):
        asm = k.pop("asm", None)
        if not asm:
            continue
        stem = asm_dir / f"{k.get('kernel', 'kernel')}_{i}"
        for suffix in ("ptx", "sass"):
            if asm.get(suffix):
                path = stem.with_suffix("." + suffix)
                path.write_text(asm[suffix])
                written.append(path)
    return written


def _ceilings(gpu: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """This GPU's measured ceilings, else the compile target's (the H200's), and notes saying which."""
    ceil = load_ceilings(gpu) if gpu else None
    notes: list[str] = []
    if ceil is None:
        ceil = load_ceilings(H200.name)
        if gpu:
            notes.append(f"no measured ceilings for {gpu}; the roofline uses {H200.name}'s")
    if ceil is None:
        notes.append("no measured ceilings (results/ceilings/): no roofline verdict")
    return ceil, notes


def _counters(problem: Any, cand: Path, device: str, wanted: bool, record: StageRecord) -> tuple[dict[str, dict], str]:
    """Nsight Compute's metrics per kernel where they can be collected, and a note saying how or why not."""
    if not wanted:
        return {}, "counters not requested"
    if device == "cpu":
        return {}, "counters skipped (--device cpu): hardware counters need a GPU with Nsight Compute (ncu)"
    if record.verdict == FAIL:
        return {}, "counters skipped: the candidate failed the compile stage"
    try:
        index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        metrics = ncu.collect(problem, cand, gpu_index=index)
        return metrics, f"collected with ncu for {len(metrics)} kernel(s)"
    except (ProfilerUnavailable, ncu.ProfilingFailed) as e:
        return {}, f"counters unavailable: {e}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def format_report(r: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    lines = [f"{r['problem']} / {Path(r['candidate']).name}: compile {r['compile']['verdict']} "
             f"({r['compile']['reason']})"]
    v = r.get("roofline")
    if v:
        lines.append(f"roofline on {v['device']}: {v['bound']}-bound ({v['reason']})")
    for k in r["static"]["kernels"]:
        a, occ = k["access"], k["occupancy"]
        loads = ", ".join(f"{b}-bit x{n}" for b, n in a.get("global_loads", {}).items()) or "-"
        lines.append(f"  {k['kernel']}: {k['threads']} threads, {k['registers']} regs, {k['shared_bytes']} B shared, "
                     f"occupancy {_pct(occ['occupancy'])} ({occ['limiter']}), grid {k['blocks'] or '?'} blocks, "
                     f"global loads [{loads}] ({a['source']}), tensor cores {k['tensor_cores'] or 'none'}, "
                     f"spills {'yes' if k['spills'] else 'none'}")
    lines.append(f"counters: {r['counters']['reason']}")
    lines += [f"note: {n}" for n in r.get("notes", [])]
    lines.append("findings:")
    lines.append(r["summary"])
    return "\n".join(lines)
