"""Local devices: a CUDA GPU of this machine, or the CPU (Triton interpreter, correctness only).

Each device owns two spawned workers: a compile worker on the CPU (no GPU visible, so compilation never holds the GPU)
and a device worker (CUDA_VISIBLE_DEVICES pinned to one GPU, or TRITON_INTERPRET=1 on the CPU). On a GPU, a file lock
per GPU makes sure only one evaluation at a time uses it, across processes too (sweeps). A worker that crashes, hangs or
breaks its CUDA context is replaced; the record of what happened is returned like any other.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import HARNESS_VERSION
from ..core import paths
from ..core.records import FAIL, PASS, REFUSED, TIMING_STAGES, StageRecord, Verdict
from ..harness import compile as compile_stage
from ..problems.problem import Problem
from .worker import Worker

COMPILE_ENV = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "0"}  # compile workers never see a GPU
# Seconds per stage (the backstop for a stage's whole work), and the watchdog's windows inside them
# (harness.child.watchdog): "trace" for importing, constructing and tracing the candidate (between kernel compiles),
# "call" the floor of one call of its forward on a device (scaled up with the reference's measured time by
# WATCHDOG_FACTOR); a kernel compile may take "compile" seconds. A hang costs a window, not a stage.
DEFAULT_TIMEOUTS = {"trace": 20.0, "compile": 180.0, "call": 20.0, "correctness": 300.0, "quick_timing": 180.0,
                    "full_timing": 600.0}
# One call of the candidate may take this many times the reference's measured forward when that is over the floor:
# on a GPU a generous bound for a slow candidate; on the CPU the Triton interpreter runs kernels thousands of times
# slower than torch runs the reference.
WATCHDOG_FACTOR = {"cuda": 100.0, "cpu": 5000.0}
CPU_TIMING_REFUSAL = ("the CPU device does not time kernels: a CPU or interpreter time is not a GPU time. "
                      "Run on a CUDA GPU (--device cuda) for timing")


class NoGPUError(RuntimeError):
    pass


def cuda_gpu_count() -> int:
    """GPUs visible, asked without creating a CUDA context in this (parent) process."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip()]))
    return n


@contextlib.contextmanager
def gpu_lock(index: int) -> Iterator[None]:
    """One evaluation at a time per GPU, across processes."""
    d = paths.lock_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"gpu{index}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class LocalDevice:
    """kind 'cuda' (one GPU, by index) or 'cpu'."""

    slots = 1  # one worker runs one evaluation at a time

    def __init__(self, kind: str = "cpu", gpu_index: int = 0, timeouts: dict[str, float] | None = None):
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"unknown device kind '{kind}'")
        if kind == "cuda" and cuda_gpu_count() <= gpu_index:
            raise NoGPUError("no CUDA GPU is visible on this machine (nvidia-smi found none): use --device cpu for "
                             "static, compile and interpreter correctness checks, or run on a GPU machine")
        self.kind = kind
        self.gpu_index = gpu_index
        self.timeouts = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        physical = visible.split(",")[gpu_index].strip() if visible else str(gpu_index)
        self._physical = physical
        self.compile_worker = Worker(COMPILE_ENV, name="compile")
        self._extra_compile_workers: list[Worker] = []  # grown by map_compile, kept until close: start-up paid once
        env = {"CUDA_VISIBLE_DEVICES": physical} if kind == "cuda" else {"CUDA_VISIBLE_DEVICES": "",
                                                                          "TRITON_INTERPRET": "1"}
        self.worker = Worker(env, name=f"{kind}{gpu_index if kind == 'cuda' else ''}")

    # ---- identity and provenance ----
    @property
    def info(self) -> dict[str, Any]:
        if not self.worker.info:
            self.worker.start()
        return self.worker.info

    @property
    def name(self) -> str:
        return f"cuda:{self.info.get('gpu_name', '?')}" if self.kind == "cuda" else "cpu"

    @property
    def gpu_name(self) -> str | None:
        return self.info.get("gpu_name") if self.kind == "cuda" else None

    def provenance(self) -> dict[str, Any]:
        i = self.info
        return {"device": self.name, "gpu_name": i.get("gpu_name"), "driver": i.get("driver"),
                "torch_version": i.get("torch_version"), "triton_version": i.get("triton_version"),
                "cuda_runtime": i.get("cuda_runtime"), "harness_version": HARNESS_VERSION}

    def close(self) -> None:
        self.worker.stop()
        for w in [self.compile_worker, *self._extra_compile_workers]:
            w.stop()

    # ---- stages ----
    def compile(self, problem: Problem, cand_path: str | Path) -> StageRecord:
        return self._compile_on(self.compile_worker, problem, cand_path)

    def map_compile(self, problem: Problem, cand_paths: Sequence[str | Path], workers: int = 2) -> list[StageRecord]:
        """Compile many candidates on `workers` CPU workers at once (compilation stays off the GPU's critical path)."""
        workers = max(1, min(workers, len(cand_paths)))
        while 1 + len(self._extra_compile_workers) < workers:
            self._extra_compile_workers.append(Worker(COMPILE_ENV, name="compile"))
        pool = [self.compile_worker, *self._extra_compile_workers][:workers]
        with ThreadPoolExecutor(workers) as ex:  # worker i % workers serves one task at a time (its lock)
            return list(ex.map(lambda i: self._compile_on(pool[i % workers], problem, cand_paths[i]),
                               range(len(cand_paths))))

    def _compile_on(self, worker: Worker, problem: Problem, cand_path: str | Path) -> StageRecord:
        t0 = time.perf_counter()
        result = worker.call("workbench.harness.child.compile_probe:probe", self.timeouts["compile"],
                             problem=problem_spec(problem), cand_path=str(cand_path),
                             windows={"trace": self.timeouts.get("trace"), "compile": self.timeouts["compile"]})
        return compile_stage.judge(result, time.perf_counter() - t0)

    def watch_settings(self) -> dict[str, Any]:
        """What the device worker's watchdog holds the candidate to (`harness.child.watchdog`)."""
        return {"construct": self.timeouts.get("trace"), "call": self.timeouts.get("call"),
                "factor": WATCHDOG_FACTOR[self.kind], "compile": self.timeouts.get("compile")}

    def run_stages(self, problem: Problem, cand_path: str | Path, stages: list[str],
                   options: dict[str, Any] | None = None) -> list[StageRecord]:
        """Run device stages in order, stopping at the first that does not pass."""
        refused = []
        if self.kind == "cpu":
            refused = [s for s in stages if s in TIMING_STAGES]
            stages = [s for s in stages if s not in TIMING_STAGES]
        records: list[StageRecord] = []
        if stages:
            timeout = sum(self.timeouts.get(s, 300.0) for s in stages)
            lock = gpu_lock(int(self._physical) if self._physical.isdigit() else 0) if self.kind == "cuda" \
                else contextlib.nullcontext()
            with lock:
                t0 = time.perf_counter()  # after the lock: waiting for another process's evaluation is not ours
                result = self.worker.call("workbench.harness.child.device_stages:run", timeout,
                                          problem=problem_spec(problem), cand_path=str(cand_path),
                                          device="cuda:0" if self.kind == "cuda" else "cpu",
                                          stages=stages, options=options or {}, watch=self.watch_settings())
                wall = time.perf_counter() - t0
            records = _records(result, stages, wall, on_gpu=self.kind == "cuda")
        if refused and (not records or records[-1].ok):
            records.append(StageRecord(refused[0], REFUSED, CPU_TIMING_REFUSAL))
        return records


def problem_spec(problem: Problem) -> tuple:
    """The problem as a worker rebuilds it (`Problem(*spec)`): path, overrides, the caller's precision."""
    return (problem.path, problem.overrides, problem.precision)


def _records(result: dict[str, Any], stages: list[str], wall: float, on_gpu: bool) -> list[StageRecord]:
    """Turn a worker answer into stage records; worker start-up and call overhead go to the first record, since the
    GPU was held for them too."""
    if "stages" in result:
        raw = result["stages"]
    else:  # the worker crashed, hung or could not start: keep what finished, blame the stage that was running
        raw = list(result.get("completed", []))
        blamed = result.get("stage") or stages[min(len(raw), len(stages) - 1)]
        if result.get("timed_out"):
            reason = f"timed out: {result['error']}; worker killed and restarted"
        elif result.get("crashed"):
            reason = f"crashed: {result['error']}; worker restarted"
        else:
            reason = f"worker error: {result.get('error')}"
        if result.get("tampered"):
            reason = "tampering: the candidate changed " + ", ".join(result["tampered"])
        raw.append({"name": blamed, "verdict": FAIL, "reason": reason,
                    "seconds": max(wall - sum(r.get("seconds", 0.0) for r in raw), 0.0),
                    "data": {"traceback": result.get("traceback", "")[-3000:]} if result.get("traceback") else {}})
    if result.get("tampered") and raw and raw[-1]["verdict"] == PASS:
        raw[-1] = {**raw[-1], "verdict": FAIL,
                   "reason": "tampering: the candidate changed " + ", ".join(result["tampered"])}
    if result.get("output") and raw:  # what the candidate printed, bounded, on the record of the last stage it reached
        out = result["output"]
        raw[-1] = {**raw[-1], "data": {**raw[-1].get("data", {}),
                                       "printed": {"bytes": out.get("bytes", 0), "tail": out.get("tail", "")}}}
    records = []
    overhead = max(wall - sum(r.get("seconds", 0.0) for r in raw), 0.0)
    for i, r in enumerate(raw):
        cost = r.get("seconds", 0.0) + (overhead if i == 0 else 0.0)
        verdict = r["verdict"] if r["verdict"] in tuple(Verdict) else FAIL
        records.append(StageRecord(r["name"], verdict, r.get("reason", ""), cost, cost if on_gpu else 0.0,
                                   data=r.get("data", {}), flags=r.get("flags", [])))
    return records
