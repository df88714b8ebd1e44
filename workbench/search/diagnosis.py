"""Profiler findings for a search node, from what its evaluation already holds.

`FindingsConfig(mode="static")` (the default when a search asks for findings) spends no GPU time: the expert tools
read the static reading of the node's compile record (registers, spills, shared memory, tensor-core use, load widths
— from PTX/SASS when the record carries them, else the compile stage's facts) and the roofline verdict from the
node's measured time against the problem's counted FLOPs and bytes and the device's measured ceilings. On replay
those are the recorded H200 compile records and times, so no number is invented. `mode="ncu"` adds Nsight Compute
counters for every measured node on a live CUDA device; that is GPU time, charged to the budget as the "profile"
stage.

The findings go on the node, into the search memory and into the proposer's moves for the node's children
(`OfflineProposer.moves(..., findings=...)`).
"""
from __future__ import annotations

import time
from typing import Any

from ..core import ceilings
from ..core.contracts import Device
from ..core.records import Evaluation
from ..core.target import H200
from ..problems.analysis import count
from ..problems.problem import Problem
from ..profiling import ncu
from ..profiling.experts import diagnose
from ..profiling.findings import Finding, ProfilerUnavailable
from ..profiling.roofline import RooflineVerdict, classify
from ..profiling.static_reading import read_static
from .config import FindingsConfig


class NodeDiagnosis:
    """Runs the expert tools on one node's evaluation (and, in "ncu" mode, on counters collected for it)."""

    def __init__(self, problem: Problem, device: Device, config: FindingsConfig):
        if config.mode == "ncu" and config.counters is None and device.kind != "cuda":
            raise ValueError(f"findings mode 'ncu' needs Nsight Compute on a live CUDA device; {device.name} has no "
                             "counters (mode 'static' reads the compile records and measured times instead)")
        self.problem, self.device, self.mode = problem, device, config.mode
        self._counters = config.counters
        self._counts = None
        self._ceilings: dict[str, Any] | None = None
        self._ceilings_read = False

    @property
    def counts(self):
        """The problem's FLOPs and bytes, counted once (meta tensors, no GPU)."""
        if self._counts is None:
            self._counts = count(self.problem)
        return self._counts

    @property
    def ceilings(self) -> dict[str, Any] | None:
        if not self._ceilings_read:
            gpu = self.device.gpu_name
            self._ceilings = ceilings.load(gpu) if gpu else None
            self._ceilings_read = True
        return self._ceilings

    def verdict(self, ms: float | None) -> RooflineVerdict | None:
        """The roofline verdict at a measured time (the floor's own when unmeasured); None without ceilings or a
        measured rate for the problem's dtype."""
        if self.ceilings is None:
            return None
        c = self.counts
        try:
            return classify(c.flops, c.min_bytes, ms, self.ceilings, c.compute_dtype)
        except KeyError:
            return None

    def findings(self, evaluation: Evaluation, metrics: dict[str, dict] | None = None) -> list[Finding]:
        """Findings for an evaluation: [] when it has no compile record with kernels (nothing to read)."""
        rec = evaluation.stage("compile")
        kernels = (rec.data or {}).get("kernels") if rec is not None else None
        if not kernels:
            return []
        ms = evaluation.summary().get("candidate_ms")
        sm = int((self.ceilings or {}).get("sm_count") or H200.sms)
        return diagnose(metrics, read_static(kernels), self.counts, self.verdict(ms), sm_count=sm)

    def collect(self, budget, candidate) -> tuple[dict[str, dict] | None, str | None]:
        """Counters for a measured candidate and a note: (None, None) in "static" mode. In "ncu" mode their GPU time
        is charged to the budget as "profile"; a profiler that is missing, refused or failing gives (None, why) and
        the search goes on with the static findings."""
        if self.mode != "ncu":
            return None, None
        t0 = time.perf_counter()
        try:
            if self._counters is not None:
                return self._counters(self.problem, candidate), None
            return ncu.collect(self.problem, candidate.write(), gpu_index=getattr(self.device, "gpu_index", 0)), None
        except (ProfilerUnavailable, ncu.ProfilingFailed) as e:
            return None, f"counters unavailable: {e}"
        finally:
            budget.charge("profile", time.perf_counter() - t0)
