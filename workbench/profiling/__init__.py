"""Profiler expert tools: static reading of compiled kernels, the roofline first pass, Nsight Compute counters,
NVML energy, and small expert functions that turn all of it into `Finding`s a person or a proposer can act on.

Nothing here imports torch at module level, so `python -m workbench.profiling.ncu --drive` (run under ncu) and the
pure readers stay light.
"""
from .experts import CANDIDATE_TOOLS, KERNEL_TOOLS, TOOLS, Context, diagnose
from .findings import Finding, ProfilerUnavailable, moves, render
from .report import format_report, profile_candidate
from .roofline import RooflineVerdict, classify, tools_for
from .static_reading import occupancy, read_kernel, read_ptx, read_sass, read_static

__all__ = ["CANDIDATE_TOOLS", "KERNEL_TOOLS", "TOOLS", "Context", "Finding", "ProfilerUnavailable", "RooflineVerdict",
           "classify", "diagnose", "format_report", "moves", "occupancy", "profile_candidate", "read_kernel",
           "read_ptx", "read_sass", "read_static", "render", "tools_for"]
