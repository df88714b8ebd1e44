"""Energy per call from NVML's total-energy counter, and the objective that trades it against time.

Method: `nvmlDeviceGetTotalEnergyConsumption` is a cumulative counter in millijoules that the driver updates every
few tens of milliseconds, so windows are long (at least 1 s of back-to-back calls, sized from a calibration run) and
repeated (at least 3). Idle power is measured over an equally long window with no work and subtracted, so the number
is the energy the calls cost, not the board's standing draw; the total (idle share included) is reported too.
Everything that touches the GPU is injected (`counter`, `sync`, `clock`, `sleep`), so the arithmetic is testable with a
fake counter and runs unchanged on the GPU.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable

from ..core.records import PASS, REFUSED
from ..problems.problem import Problem
from .findings import ProfilerUnavailable

KINDS = ("time", "energy", "edp")


@dataclasses.dataclass(frozen=True)
class EnergyResult:
    joules_per_call: float  # median over repeats, idle power subtracted
    spread: float  # (max - min) / median over repeats
    total_joules_per_call: float  # idle share included
    idle_watts: float
    busy_watts: float
    calls_per_window: int
    window_s: float  # mean length of a busy window
    seconds_per_call: float
    per_repeat: list[float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def nvml_counter(device_index: int | None = None) -> Callable[[], float]:
    """A callable returning the GPU's cumulative energy in mJ. The NVML device is the one whose UUID matches torch's
    current CUDA device when torch sees one (NVML ignores CUDA_VISIBLE_DEVICES), else NVML's `device_index` (or 0)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise ProfilerUnavailable("energy needs NVML's Python bindings: pip install nvidia-ml-py (and an NVIDIA GPU "
                                  "with its driver)") from None
    try:
        pynvml.nvmlInit()
        handle = _matching_handle(pynvml) if device_index is None else None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index or 0)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # NotSupported on GPUs older than Volta
    except pynvml.NVMLError as e:
        raise ProfilerUnavailable(f"NVML energy counter unavailable here ({e}): energy needs an NVIDIA GPU (Volta or "
                                  "newer) and its driver") from None
    return lambda: float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def _matching_handle(pynvml):
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        want = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid).replace("GPU-", "")
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if uuid.replace("GPU-", "") == want:
                return h
    except Exception:  # an older torch without uuid: fall back to the index
        return None
    return None


def _cuda_sync() -> Callable[[], None]:
    import torch

    if not torch.cuda.is_available():
        raise ProfilerUnavailable("energy is measured on a CUDA GPU; none is visible here")
    return torch.cuda.synchronize


def measure_energy(fn: Callable[[], Any], min_window_s: float = 1.0, repeats: int = 3,
                   counter: Callable[[], float] | None = None, sync: Callable[[], None] | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   sleep: Callable[[float], None] = time.sleep) -> EnergyResult:
    """Joules per call of `fn` (work already on the GPU when it returns is waited for with `sync`), with spread.
    `counter` returns cumulative energy in millijoules (default: NVML for the current GPU)."""
    if repeats < 1 or min_window_s <= 0:
        raise ValueError("repeats must be >= 1 and min_window_s > 0")
    counter = counter or nvml_counter()
    sync = sync or _cuda_sync()

    # calibration: how many calls fill a window (doubling until 10% of a window, then scaled up)
    fn()
    sync()
    n = 1
    while True:
        t0 = clock()
        for _ in range(n):
            fn()
        sync()
        dt = clock() - t0
        if dt >= 0.1 * min_window_s or n >= 1 << 24:
            break
        n *= 2
    per_call = max(dt / n, 1e-9)
    calls = max(1, math.ceil(min_window_s / per_call))

    per_repeat, totals, idle_w, busy_w, windows, counts = [], [], [], [], [], []
    for _ in range(repeats):
        e0, t0 = counter(), clock()  # idle window, next to its busy window so drift falls on both
        sleep(min_window_s)
        e1, t1 = counter(), clock()
        idle = (e1 - e0) / 1e3 / (t1 - t0)
        e0, t0 = counter(), clock()
        done = 0
        # The calibration ran at whatever clock the GPU idled at; once it boosts, calls get faster and the planned
        # count falls short of the window. Top the window up in tenths until it is long enough.
        chunk = calls
        while True:
            for _ in range(chunk):
                fn()
            sync()
            done += chunk
            if clock() - t0 >= min_window_s or done >= 1 << 26:
                break
            chunk = max(1, calls // 10)
        e1, t1 = counter(), clock()
        joules, secs = (e1 - e0) / 1e3, t1 - t0
        per_repeat.append((joules - idle * secs) / done)
        totals.append(joules / done)
        counts.append(done)
        idle_w.append(idle)
        busy_w.append(joules / secs)
        windows.append(secs)
    med = statistics.median(per_repeat)
    return EnergyResult(
        joules_per_call=med, spread=(max(per_repeat) - min(per_repeat)) / abs(med) if med else 0.0,
        total_joules_per_call=statistics.median(totals), idle_watts=statistics.fmean(idle_w),
        busy_watts=statistics.fmean(busy_w), calls_per_window=max(counts), window_s=statistics.fmean(windows),
        seconds_per_call=sum(windows) / sum(counts), per_repeat=per_repeat)


def objective(time_s: float, energy_j: float | None = None, kind: str = "time") -> float:
    """What a search minimises: time (s), energy (J per call), or the energy-delay product (J*s)."""
    if kind not in KINDS:
        raise ValueError(f"objective kind must be one of {KINDS}, got '{kind}'")
    if kind == "time":
        return time_s
    if energy_j is None:
        raise ValueError(f"the '{kind}' objective needs an energy measurement")
    return energy_j if kind == "energy" else energy_j * time_s


def measure_candidate(progress: Callable[[str], None], problem: tuple, cand_path: str, min_window_s: float = 1.0,
                      repeats: int = 3) -> dict[str, Any]:
    """Worker-side task (run it in a device worker with `Worker.call("workbench.profiling.energy:measure_candidate",
    ...)`): energy per forward of the candidate and of the eager reference, on the worker's GPU."""
    import torch  # worker side: torch loads in the GPU worker, never in the parent

    from ..harness.child.execution import build_pair, make_inputs, set_precision

    progress("energy")
    if not torch.cuda.is_available():
        return {"verdict": REFUSED, "reason": "energy is measured on a CUDA GPU; none is visible here"}
    counter = nvml_counter()
    prob = Problem(*problem)
    device = torch.device("cuda")
    models = build_pair(prob, cand_path, device)
    set_precision(prob.effective_precision)
    inputs = make_inputs(prob, device, seed=0)
    out = {}
    for name, model in (("candidate", models.candidate), ("eager", models.reference)):
        def call(model=model):
            with torch.no_grad():
                model(*inputs)

        out[name] = measure_energy(call, min_window_s, repeats, counter=counter).to_dict()
    out["energy_ratio_vs_eager"] = out["candidate"]["joules_per_call"] / out["eager"]["joules_per_call"] \
        if out["eager"]["joules_per_call"] > 0 else None
    return {"verdict": PASS, "reason": f"{out['candidate']['joules_per_call'] * 1e3:.4g} mJ per call", "data": out}
