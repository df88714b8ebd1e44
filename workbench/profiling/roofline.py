"""The roofline first pass: is a measured kernel memory-, compute- or latency-bound, and which expert tools are worth
running on it.

Achieved rates are the problem's own counts over the measured time: FLOPs from torch's flop counter and the minimum
bytes any implementation must move (`workbench.problems.analysis`), against the device's *measured* ceilings
(`results/ceilings/*.json`). The fraction of each ceiling then says where the kernel stands: near the copy bandwidth
it is memory-bound, near the matrix rate compute-bound, and far from both (under 30 % of each) it is latency-bound:
launch overhead, too little parallel work, or stalls that keep both units idle. Without a measured time the verdict is
the floor's own (what the problem must be bound by), marked as not measured.
"""
from __future__ import annotations

import dataclasses
from typing import Any

LATENCY_FRACTION = 0.30  # under this fraction of both ceilings, neither memory nor compute is the limit
SHORT_MS = 0.05  # kernels this short are dominated by launch and ramp-up (a launch costs a few microseconds)
NEAR_CEILING = 0.85  # at this fraction of a ceiling, only moving fewer bytes (or FLOPs) helps much


@dataclasses.dataclass(frozen=True)
class RooflineVerdict:
    bound: str  # "memory" | "compute" | "latency"
    measured: bool  # False: no time was given, `bound` is the floor's
    flops: int
    bytes: int
    compute_dtype: str
    device: str
    ceiling_gbps: float
    ceiling_tflops: float
    floor_ms: float
    floor_bound: str  # "memory" | "compute": what the ideal kernel is bound by
    ms: float | None = None
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    bw_fraction: float | None = None  # achieved / ceiling
    compute_fraction: float | None = None
    short: bool = False
    reason: str = ""

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two ceilings meet on this device."""
        return self.ceiling_tflops * 1e12 / (self.ceiling_gbps * 1e9)

    @property
    def fraction_of_floor(self) -> float | None:
        """floor / measured time: 1.0 is a kernel at the roofline."""
        return self.floor_ms / self.ms if self.ms else None

    @property
    def headroom(self) -> float | None:
        """How many times faster the roofline says the kernel could be."""
        return self.ms / self.floor_ms if self.ms and self.floor_ms else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(intensity=self.intensity, ridge=self.ridge, fraction_of_floor=self.fraction_of_floor,
                 headroom=self.headroom)
        return d


def classify(flops: int, bytes: int, ms: float | None, ceilings: dict[str, Any], compute_dtype: str,
             latency_fraction: float = LATENCY_FRACTION, short_ms: float = SHORT_MS) -> RooflineVerdict:
    """Classify a kernel that moves `bytes` and does `flops` in `ms` milliseconds on a device with `ceilings`
    ({'copy_gbps': ..., 'tflops': {dtype: ...}}); `ms=None` gives the floor's verdict, unmeasured."""
    tflops = ceilings.get("tflops", {}).get(compute_dtype)
    if tflops is None:
        raise KeyError(f"no measured {compute_dtype} rate for {ceilings.get('device', 'this device')}")
    gbps = float(ceilings["copy_gbps"])
    memory_ms = bytes / (gbps * 1e9) * 1e3
    compute_ms = flops / (tflops * 1e12) * 1e3
    floor_ms = max(memory_ms, compute_ms)
    floor_bound = "compute" if compute_ms >= memory_ms else "memory"
    common = dict(flops=int(flops), bytes=int(bytes), compute_dtype=compute_dtype,
                  device=ceilings.get("device", "?"), ceiling_gbps=gbps, ceiling_tflops=float(tflops),
                  floor_ms=floor_ms, floor_bound=floor_bound)
    if ms is None or ms <= 0:
        short = floor_ms < short_ms
        why = (f"not measured: the floor is {floor_ms:.3g} ms, {floor_bound}-bound "
               f"(intensity {flops / bytes if bytes else 0:.3g} FLOP/B)")
        if short:
            why += "; that is short enough that launch latency will dominate any implementation"
        return RooflineVerdict(bound=floor_bound, measured=False, short=short, reason=why, **common)
    achieved_gbps = bytes / (ms * 1e-3) / 1e9
    achieved_tflops = flops / (ms * 1e-3) / 1e12
    bw, comp = achieved_gbps / gbps, achieved_tflops / tflops
    short = ms < short_ms
    if bw < latency_fraction and comp < latency_fraction:
        bound = "latency"
        why = (f"{bw:.0%} of copy bandwidth and {comp:.0%} of the {compute_dtype} rate: neither is the limit; "
               + ("a short kernel, so launch overhead and too few blocks in flight" if short
                  else "stalls (dependencies, synchronisation, low occupancy) keep both idle"))
    else:
        bound = "memory" if bw >= comp else "compute"
        why = f"{bw:.0%} of copy bandwidth, {comp:.0%} of the {compute_dtype} rate"
    if floor_ms > 0:
        why += f"; {ms / floor_ms:.3g}x the floor"
        if ms < floor_ms:
            why += " (faster than the floor: the time or the problem's counts are wrong)"
    return RooflineVerdict(bound=bound, measured=True, ms=ms, achieved_gbps=achieved_gbps,
                           achieved_tflops=achieved_tflops, bw_fraction=bw, compute_fraction=comp, short=short,
                           reason=why, **common)


def tools_for(verdict: RooflineVerdict) -> list[str]:
    """Which expert tools (ids in `workbench.profiling.experts.TOOLS`) are worth running, most useful first."""
    gemm = verdict.flops > 0
    tools = ["spills"]  # spills hurt whatever the bound, and reading them costs nothing
    near = max(verdict.bw_fraction or 0.0, verdict.compute_fraction or 0.0) >= NEAR_CEILING
    if verdict.measured and near:
        # at the ceiling only less work helps: fewer bytes (fusion) or, for a GEMM, better reuse
        tools += ["bandwidth", "fusion"] + (["l2_reuse"] if gemm and verdict.bound == "compute" else [])
        return tools
    if verdict.bound == "memory":
        tools += ["coalescing", "bandwidth", "fusion", "occupancy", "tail"] + (["tensor_cores", "l2_reuse"] if gemm
                                                                              else [])
    elif verdict.bound == "compute":
        tools += ["tensor_cores", "l2_reuse", "bank_conflicts", "occupancy", "tail"] if gemm else \
            ["bank_conflicts", "occupancy", "tail"]
    else:  # latency: for a problem that should be memory-bound, too few bytes in flight is the usual cause
        tools += ["launch", "tail", "occupancy", "fusion"] + (["tensor_cores", "bank_conflicts"] if gemm else [])
        if verdict.floor_bound == "memory":
            tools += ["coalescing", "bandwidth"]
    if verdict.short and "launch" not in tools:
        tools.append("launch")
    return tools
