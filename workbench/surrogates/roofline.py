"""`RooflineSurrogate`: an analytic forecast from FLOPs, bytes and a device's measured ceilings. No training.

- Anchor ("eager", the PyTorch reference): its time is max(eager_bytes / (bandwidth * e_mem), flops / (peak * e_comp))
  where eager_bytes is the traffic of every aten op of the reference (`workbench.problems.analysis.count`). The
  anchor's efficiencies default to the candidate's: eager is itself a real implementation running below the
  ceilings, and cuBLAS, which eager uses for GEMMs, is what measured the compute ceiling in the first place. Pass
  `anchor_efficiency={"memory": 1.0, "compute": 1.0}` for an anchor that reaches the ceilings.
- Candidate: the roofline floor, max(min_bytes / (bandwidth * e_mem), flops / (peak * e_comp)), with e_mem = 0.8 and
  e_comp = 0.6 by default (a fused kernel that moves the fewest bytes, at a typical fraction of the ceilings).
- Forecast: a Gaussian over log2(anchor / candidate) with a wide sigma (0.75 by default), through `from_log2`.
  So a fusable memory-bound chain (eager_bytes > min_bytes) is forecast to win, a GEMM (eager already moves the
  fewest bytes and is compute-bound) to tie.
- p_fail: from the candidate's compile record, when `compile_records` (candidate hash -> compile StageRecord) has
  one: a failed compile -> 0.95; register spills (a "spills" flag, or a kernel with stack/local bytes) multiply the
  candidate's efficiencies by `spill_factor` (0.7). Otherwise p_fail = 0.1.

It ignores the candidate's configuration beyond those compile facts: every candidate that compiles cleanly gets the
same forecast. Its confidence is low by construction (sigma 0.75 spreads the mass over several bins), so a selective
policy defers to the GPU rather than trusting it.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ..core.candidate import Candidate
from ..core.outcomes import Forecast, from_log2
from ..core.records import FAIL, StageRecord
from ..problems.analysis import ProblemCounts, count
from ..problems.problem import Problem

DEFAULT_EFFICIENCY = {"memory": 0.8, "compute": 0.6}


def has_spills(record: StageRecord) -> bool:
    """True when a compile record reports register spills (its flags, or stack/local bytes of a kernel)."""
    if any(f.get("check") == "spills" for f in record.flags):
        return True
    return any(k.get("stack") or k.get("local") for k in record.data.get("kernels", []) or [])


def roofline_ms(flops: int, nbytes: int, compute_dtype: str, ceilings: Mapping[str, Any],
                efficiency: Mapping[str, float]) -> tuple[float, str]:
    """max(bytes / (bandwidth * e_mem), flops / (peak * e_comp)) in ms, and which bound ("memory"/"compute") it is."""
    tflops = ceilings["tflops"].get(compute_dtype)
    if tflops is None:
        raise KeyError(f"no measured {compute_dtype} rate for {ceilings.get('device')}")
    compute_ms = flops / (tflops * 1e12 * efficiency["compute"]) * 1e3
    memory_ms = nbytes / (ceilings["copy_gbps"] * 1e9 * efficiency["memory"]) * 1e3
    return (compute_ms, "compute") if compute_ms >= memory_ms else (memory_ms, "memory")


class RooflineSurrogate:
    """Forecasts every candidate of a problem from the problem's counts and the device's ceilings (see the module
    docstring for the model and its constants)."""

    def __init__(self, ceilings: Mapping[str, Any], efficiency: Mapping[str, float] | None = None,
                 anchor_efficiency: Mapping[str, float] | None = None, sigma: float = 0.75,
                 compile_records: Mapping[str, StageRecord] | None = None, p_fail: float = 0.1,
                 p_fail_compile_failed: float = 0.95, spill_factor: float = 0.7):
        if ceilings is None:
            raise ValueError("no measured ceilings for this device (see workbench.core.ceilings)")
        self.ceilings = ceilings
        self.efficiency = dict(efficiency or DEFAULT_EFFICIENCY)
        self.anchor_efficiency = dict(anchor_efficiency or self.efficiency)
        for e in (self.efficiency, self.anchor_efficiency):
            if set(e) != {"memory", "compute"} or not all(0 < v <= 1 for v in e.values()):
                raise ValueError("efficiency needs 'memory' and 'compute' in (0, 1]")
        if not sigma > 0:
            raise ValueError("sigma must be positive")
        self.sigma = sigma
        self.compile_records = dict(compile_records or {})
        self.p_fail = p_fail
        self.p_fail_compile_failed = p_fail_compile_failed
        self.spill_factor = spill_factor
        self._counts: dict[Any, ProblemCounts] = {}

    def add_compile_records(self, records: Mapping[str, StageRecord]) -> None:
        """Compile records (candidate hash -> compile StageRecord) for `forecast`, e.g. a search's compile-ahead."""
        self.compile_records.update(records)

    def counts(self, problem: Problem) -> ProblemCounts:
        """`count(problem)`, cached per problem identity (counting traces the reference on meta tensors)."""
        key = problem.key
        if key not in self._counts:
            self._counts[key] = count(problem)
        return self._counts[key]

    def anchor_ms(self, counts: ProblemCounts) -> tuple[float, str]:
        return roofline_ms(counts.flops, counts.eager_bytes, counts.compute_dtype, self.ceilings,
                           self.anchor_efficiency)

    def log2_speedup(self, counts: ProblemCounts, record: StageRecord | None = None) -> tuple[float, str]:
        """The point forecast log2(anchor / candidate) and a sentence saying how it was reached."""
        anchor, abound = self.anchor_ms(counts)
        eff = dict(self.efficiency)
        spills = record is not None and has_spills(record)
        if spills:
            eff = {k: v * self.spill_factor for k, v in eff.items()}
        cand, cbound = roofline_ms(counts.flops, counts.min_bytes, counts.compute_dtype, self.ceilings, eff)
        if anchor <= 0 or cand <= 0:
            return 0.0, "roofline: the problem moves no bytes and does no counted FLOPs; no speedup forecast"
        mu = math.log2(anchor / cand)
        why = (f"roofline: eager ~{anchor:.4g} ms ({abound}-bound, {counts.eager_bytes} B), candidate floor "
               f"~{cand:.4g} ms ({cbound}-bound, {counts.min_bytes} B, efficiency {eff[cbound]:.2g})"
               + ("; register spills lower the efficiency" if spills else ""))
        return mu, why

    def forecast_one(self, counts: ProblemCounts, candidate: Candidate) -> Forecast:
        record = self.compile_records.get(candidate.hash)
        mu, why = self.log2_speedup(counts, record)
        p_fail = self.p_fail
        if record is not None and record.verdict == FAIL:
            p_fail = self.p_fail_compile_failed
            why += f"; compile failed ({record.reason})"
        return from_log2(mu, self.sigma, p_fail, reasoning=why)

    def forecast(self, problem: Problem, candidates: list[Candidate], anchor: str = "eager") -> list[Forecast]:
        """One Forecast per candidate relative to eager (the only anchor this model knows)."""
        if anchor != "eager":
            raise ValueError(f"RooflineSurrogate only forecasts against the eager anchor, not {anchor!r}")
        if not candidates:
            return []
        counts = self.counts(problem)
        return [self.forecast_one(counts, c) for c in candidates]
