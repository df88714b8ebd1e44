"""Expert tools: small functions from metrics to `Finding`s, each about one thing a kernel can get wrong.

Kernel tools take one kernel's metrics (a plain dict keyed by Nsight Compute metric names; empty when no counters were
collected) and that kernel's static reading (`static_reading.read_kernel`); candidate tools take {kernel name:
metrics} and the whole static reading (`static_reading.read_static`), since what they judge (tensor-core use, launch
count, fusion) is a property of all the kernels together. Both also get a `Context` (the problem's counts and the
roofline verdict). Each returns [] when it sees nothing wrong. `diagnose` runs the tools the roofline verdict picked.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from ..core.target import H200
from .findings import Finding, sort_findings
from .roofline import RooflineVerdict, tools_for

LAUNCH_US = 4.0  # host-side cost of one kernel launch from Python, roughly (Triton's launcher is a few microseconds)


@dataclasses.dataclass(frozen=True)
class Context:
    flops: int = 0
    min_bytes: int = 0
    eager_bytes: int = 0
    compute_dtype: str = "fp32"
    bound: str | None = None  # the roofline verdict's bound, when there is one
    floor_bound: str | None = None  # what the ideal kernel is bound by ("memory" | "compute")
    ms: float | None = None
    short: bool = False
    sm_count: int = H200.sms

    @classmethod
    def make(cls, counts: Any = None, verdict: RooflineVerdict | None = None, sm_count: int = H200.sms) -> "Context":
        kw: dict[str, Any] = {"sm_count": sm_count}
        if counts is not None:
            kw.update(flops=counts.flops, min_bytes=counts.min_bytes, eager_bytes=counts.eager_bytes,
                      compute_dtype=counts.compute_dtype)
        if verdict is not None:
            kw.update(bound=verdict.bound, floor_bound=verdict.floor_bound, ms=verdict.ms, short=verdict.short)
            kw.setdefault("flops", verdict.flops)
            kw.setdefault("min_bytes", verdict.bytes)
        return cls(**kw)


def _num(m: dict[str, Any], *names: str) -> float | None:
    """The first of `names` present in `m` as a number."""
    for n in names:
        v = m.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
            return float(v)
    return None


def _f(tool, k, title, severity, evidence, advice, move=None) -> Finding:
    return Finding(tool, title, severity, evidence, advice, move, k.get("kernel") if isinstance(k, dict) else None)


def _is_gemm(k: dict[str, Any], ctx: Context) -> bool:
    return bool(k.get("tensor_cores")) or (ctx.flops > 0 and k.get("access", {}).get("mix", {}).get("tensor", 0) > 0)


# ---------------------------------------------------------------- kernel tools

def coalescing(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Uncoalesced global access (bytes used per 32-B sector), or narrow (scalar) loads on a memory-bound kernel."""
    pct = _num(m, "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct")
    sectors = _num(m, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    requests = _num(m, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    loads = k.get("access", {}).get("global_loads") or {}
    # the most common access width, in bits (keys are strings once a reading has been through JSON: the store)
    width = int(max(loads, key=loads.get)) if loads else 32
    ideal = width * 32 / 8 / 32  # sectors a fully coalesced warp-wide access touches
    per_req = sectors / requests if sectors and requests else None
    if pct is not None and pct < 60 or pct is None and per_req is not None and per_req > 2 * ideal:
        used = pct if pct is not None else 100 * ideal / per_req
        return [_f("coalescing", k, f"uncoalesced global loads: {used:.0f}% of each 32-B sector is used",
                   "critical" if used < 30 else "warning",
                   {"bytes_per_sector_pct": used, "sectors_per_request": per_req, "ideal_sectors_per_request": ideal},
                   "Neighbouring threads should read neighbouring addresses: make the contiguous dimension the "
                   "fastest-varying index of the tile (or transpose through shared memory).", "coalesce_access")]
    vec = k.get("access", {}).get("vector_load_fraction")
    memory_problem = ctx.floor_bound == "memory" or ctx.floor_bound is None and ctx.flops == 0
    if vec is not None and vec < 0.5 and ctx.bound != "compute" and (ctx.bound == "memory" or memory_problem):
        return [_f("coalescing", k, f"narrow global loads: {1 - vec:.0%} of load instructions move under 64 bits",
                   "warning", {"global_loads_by_bits": loads, "vector_load_fraction": vec, "bound": ctx.bound},
                   "A memory-bound kernel wants 128-bit accesses: give each thread several contiguous elements "
                   "(a larger BLOCK per warp) and keep the pointers aligned and contiguous.", "vectorize_loads")]
    return []


def occupancy(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Low theoretical occupancy from registers or shared memory; achieved far under theoretical."""
    occ = k.get("occupancy") or {}
    theo = _num(m, "sm__maximum_warps_per_active_cycle_pct")
    theo = theo / 100 if theo is not None else occ.get("occupancy")
    limiter = occ.get("limiter")
    ncu_limits = {r: _num(m, f"launch__occupancy_limit_{n}") for r, n in
                  (("registers", "registers"), ("shared", "shared_mem"), ("warps", "warps"), ("blocks", "blocks"))}
    if all(v is not None for v in ncu_limits.values()):
        low = min(ncu_limits.values())
        limiter = next(r for r in ("warps", "blocks", "registers", "shared") if ncu_limits[r] == low)
    out = []
    if theo is not None and theo < 0.25 and limiter in ("registers", "shared"):
        ev = {"theoretical_occupancy": theo, "limiter": limiter, "registers": k.get("registers"),
              "threads": k.get("threads"), "shared_bytes": k.get("shared_bytes"), "num_stages": k.get("num_stages")}
        designed = k.get("tensor_cores") == "wgmma"  # Hopper GEMMs run 1-2 big blocks per SM by design
        if limiter == "registers":
            out.append(_f("occupancy", k, f"occupancy {theo:.0%}, limited by {k.get('registers')} registers/thread",
                          "info" if designed else "warning", ev,
                          "Fewer live values per thread (a smaller tile per warp, or more warps for the same tile) "
                          "lets more warps hide latency.", "reduce_registers"))
        else:
            out.append(_f("occupancy", k, f"occupancy {theo:.0%}, limited by {k.get('shared_bytes')} B shared memory",
                          "info" if designed else "warning", ev,
                          "Each pipeline stage holds a copy of the tiles in shared memory: fewer stages (or smaller "
                          "BLOCK_K) fit more blocks per SM.", "reduce_num_stages"))
    achieved = _num(m, "sm__warps_active.avg.pct_of_peak_sustained_active")
    if achieved is not None and theo and achieved / 100 < 0.5 * theo:
        out.append(_f("occupancy", k, f"achieved occupancy {achieved / 100:.0%} is under half the theoretical "
                                      f"{theo:.0%}", "info", {"achieved_pct": achieved, "theoretical": theo},
                      "Warps finish unevenly or the grid leaves SMs idle (see the tail finding)."))
    return out


def spills(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Register spills: stack or local memory in the cubin, or local loads/stores in the code."""
    a = k.get("access", {})
    local_ops = a.get("local_loads", 0) + a.get("local_stores", 0)
    nbytes = k.get("stack", 0) + k.get("local", 0)
    executed = _num(m, "smsp__sass_inst_executed_op_local_ld.sum", "smsp__inst_executed_op_local_ld.sum")
    if not nbytes and not local_ops and not executed:
        return []
    return [_f("spills", k, f"register spills: {nbytes} B stack/local, {local_ops} local load/store instructions",
               "critical" if nbytes >= 1024 or (executed or 0) > 0 else "warning",
               {"stack": k.get("stack", 0), "local": k.get("local", 0), "local_instructions": local_ops,
                "registers": k.get("registers"), "local_loads_executed": executed},
               "Spilled values go through local memory (DRAM-backed): shrink the tile each thread holds (smaller "
               "BLOCK, fewer stages) or spread it over more warps.", "reduce_registers")]


def bank_conflicts(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Shared-memory bank conflicts, as extra wavefronts per shared access (needs counters)."""
    conflicts = _num(m, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    if conflicts is None:
        parts = [_num(m, f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{o}.sum") for o in ("ld", "st")]
        conflicts = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    wavefronts = _num(m, "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    if wavefronts is None:
        parts = [_num(m, f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{o}.sum") for o in ("ld", "st")]
        wavefronts = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    if conflicts is None or not wavefronts:
        return []
    ratio = conflicts / wavefronts
    if ratio < 0.2:
        return []
    return [_f("bank_conflicts", k, f"shared-memory bank conflicts: {ratio:.0%} of shared wavefronts are replays",
               "critical" if ratio >= 0.5 else "warning",
               {"bank_conflicts": conflicts, "shared_wavefronts": wavefronts, "conflict_ratio": ratio},
               "Threads of a warp hit the same bank: swizzle or pad the shared-memory layout (Triton picks a swizzle "
               "for tl.dot operands; conflicts usually come from a hand-made layout or a transposed access).",
               "swizzle_shared")]


def tail(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Too few waves: a grid that leaves SMs idle, or a last partial wave that does."""
    grid = _num(m, "launch__grid_size")
    grid = grid if grid is not None else k.get("blocks")
    limits = [_num(m, f"launch__occupancy_limit_{n}") for n in ("registers", "shared_mem", "warps", "blocks")]
    per_sm = min(v for v in limits if v is not None) if any(v is not None for v in limits) else \
        (k.get("occupancy") or {}).get("blocks_per_sm")
    sms = _num(m, "device__attribute_multiprocessor_count") or ctx.sm_count
    if not grid or not per_sm:
        return []
    slots = sms * per_sm
    waves = _num(m, "launch__waves_per_multiprocessor") or grid / slots
    ev = {"grid_blocks": grid, "blocks_per_sm": per_sm, "sms": sms, "waves": waves}
    if grid < sms:
        if ctx.short:  # a short kernel's tiny grid is the launch tool's finding
            return []
        move = "split_k" if _is_gemm(k, ctx) else "decrease_block"
        return [_f("tail", k, f"{int(grid)} blocks for {int(sms)} SMs: {int(sms - grid)} SMs idle",
                   "critical" if grid <= sms / 4 else "warning", ev,
                   "More, smaller blocks (or split-K for a GEMM with a long K) put every SM to work.", move)]
    if waves < 4:
        full = math.ceil(waves)
        idle = (full - waves) / full  # share of the slot-time of the run that the last wave leaves empty
        if idle >= 0.25:
            ev["idle_fraction"] = idle
            return [_f("tail", k, f"tail effect: {waves:.2f} waves, the last one {waves - math.floor(waves):.0%} full",
                       "warning", ev,
                       "A persistent kernel (one block per SM slot looping over tiles) or a block size that divides "
                       "the work into whole waves removes the idle tail.", "persistent")]
    return []


def l2_reuse(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """Poor L2 reuse in a GEMM whose tiles run in plain row-major order (GROUP_M == 1 or no grouping)."""
    if not _is_gemm(k, ctx):
        return []
    consts = k.get("constexprs") or {}
    group = next((consts[n] for n in ("GROUP_M", "GROUP_SIZE_M", "GROUP") if n in consts), None)
    hit = _num(m, "lts__t_sector_hit_rate.pct", "lts__t_sector_op_read_hit_rate.pct")
    grouped = group is not None and group > 1
    ev = {"l2_hit_rate_pct": hit, "group_m": group, "grid_blocks": k.get("blocks")}
    if hit is not None:
        if hit < 50 and not grouped:
            return [_f("l2_reuse", k, f"L2 hit rate {hit:.0f}% with tiles in row-major order", "warning", ev,
                       "Launch tiles in groups of GROUP_M rows so neighbouring blocks share A and B tiles in L2.",
                       "swizzle_group_m")]
        return []
    if not grouped and (k.get("blocks") or 0) >= 2 * ctx.sm_count:
        return [_f("l2_reuse", k, "GEMM tiles run in row-major order (no GROUP_M grouping)", "info", ev,
                   "With more than two waves of tiles, grouped (swizzled) tile order usually raises L2 reuse.",
                   "swizzle_group_m")]
    return []


def bandwidth(m: dict, k: dict, ctx: Context = Context()) -> list[Finding]:
    """How close a memory-bound kernel runs to DRAM peak (needs counters)."""
    dram = _num(m, "dram__throughput.avg.pct_of_peak_sustained_elapsed")
    if dram is None or ctx.bound not in ("memory", None):
        return []
    ev = {"dram_pct_of_peak": dram, "sm_pct_of_peak": _num(m, "sm__throughput.avg.pct_of_peak_sustained_elapsed")}
    if dram >= 80:
        return [_f("bandwidth", k, f"DRAM at {dram:.0f}% of peak: memory-bound", "info", ev,
                   "Only moving fewer bytes helps now: fuse neighbouring ops, or use narrower dtypes for "
                   "intermediates.", "fuse_epilogue")]
    if dram < 60 and ctx.bound == "memory":
        return [_f("bandwidth", k, f"DRAM at only {dram:.0f}% of peak on a memory-bound kernel", "warning", ev,
                   "Too few bytes in flight: larger blocks (more elements per thread), more warps, or more "
                   "pipeline stages keep more loads outstanding.", "increase_block")]
    return []


# ---------------------------------------------------------------- candidate tools

def tensor_cores(metrics: dict, s: dict, ctx: Context = Context()) -> list[Finding]:
    """A problem with matmul FLOPs whose kernels use no tensor cores (no wgmma/mma), or only the Ampere path."""
    if ctx.flops <= 0 or not s.get("kernels"):
        return []
    used = set(s.get("tensor_cores") or [])
    ev = {"flops": ctx.flops, "compute_dtype": ctx.compute_dtype, "kernels": s.get("kernel_names"),
          "tensor_cores": sorted(used)}
    if not used:
        if ctx.compute_dtype == "fp32":
            return [Finding("tensor_cores", "matmul FLOPs on CUDA cores (strict fp32)", "info", ev,
                            "Tensor cores would need tf32, which this problem's strict fp32 policy does not accept; "
                            "the fp32 FMA rate is the ceiling.", None)]
        return [Finding("tensor_cores", f"no tensor-core instructions for {ctx.flops:.3g} {ctx.compute_dtype} FLOPs",
                        "critical", ev,
                        "Express the product as tl.dot on tiles (BLOCK_M, BLOCK_N, BLOCK_K >= 16) so Triton emits "
                        "wgmma; a dot product by multiply-and-sum runs on CUDA cores at a fraction of the rate.",
                        "use_tensor_cores")]
    if used == {"mma"} and ctx.compute_dtype in ("bf16", "fp16", "tf32"):
        return [Finding("tensor_cores", "mma.sync (Ampere path) instead of Hopper wgmma", "warning", ev,
                        "Triton emits wgmma on sm_90 when BLOCK_M >= 64 and num_warps is a multiple of 4; "
                        "mma.sync reaches about half the Hopper rate.", "use_wgmma")]
    return []


def launch(metrics: dict, s: dict, ctx: Context = Context()) -> list[Finding]:
    """Launch-bound: a short run with several launches, or a short kernel with a tiny grid."""
    if not s.get("kernels"):
        return []
    n = s.get("n_kernels", len(s["kernels"]))
    launch_ms = n * LAUNCH_US * 1e-3
    # launch-bound: short, or latency-bound with launches a visible share (10 %) of the time
    if not (ctx.short or ctx.bound == "latency" and ctx.ms is not None and launch_ms >= 0.1 * ctx.ms):
        return []
    blocks = [k.get("blocks") for k in s["kernels"] if k.get("blocks")]
    ev = {"kernels": n, "ms": ctx.ms, "grid_blocks": blocks, "sms": ctx.sm_count}
    if n > 1:
        return [Finding("launch", f"{n} kernel launches in a launch-bound forward", "warning", ev,
                        "Each launch costs a few microseconds, as much as the work here: fuse the kernels into one.",
                        "fuse_kernels")]
    if blocks and max(blocks) < ctx.sm_count:
        return [Finding("launch", f"tiny grid: {max(blocks)} blocks on {ctx.sm_count} SMs in a short kernel",
                        "warning", ev, "Use smaller blocks (or split the reduction) so the grid covers the SMs.",
                        "decrease_block", s["kernels"][0].get("kernel"))]
    return []


def fusion(metrics: dict, s: dict, ctx: Context = Context()) -> list[Finding]:
    """Extra passes over memory: DRAM bytes well above the problem's minimum, or several kernels where the unfused
    reference shows intermediates round-tripping through memory."""
    kernels = s.get("kernels") or []
    n = s.get("n_kernels", len(kernels))
    gemm_epilogue = any(k.get("tensor_cores") for k in kernels) and n > 1
    move = "fuse_epilogue" if gemm_epilogue else "fuse_kernels" if n > 1 else "increase_block"
    dram = 0.0
    for m in (metrics or {}).values():
        b = _num(m, "dram__bytes.sum")
        if b is None:
            parts = [_num(m, "dram__bytes_read.sum"), _num(m, "dram__bytes_write.sum")]
            b = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
        dram += b or 0.0
    if dram and ctx.min_bytes:
        ratio = dram / ctx.min_bytes
        if ratio >= 1.5:
            return [Finding("fusion", f"DRAM traffic is {ratio:.2g}x the minimum bytes", "warning" if ratio < 3
                            else "critical", {"dram_bytes": dram, "min_bytes": ctx.min_bytes, "ratio": ratio,
                                              "kernels": n},
                            "Intermediates or re-read inputs go through DRAM: " +
                            ("fuse the kernels so intermediates stay on chip." if n > 1 else
                             "keep data on chip across passes (larger blocks, one pass per row or tile)."), move)]
        return []
    if n > 1 and ctx.min_bytes and ctx.eager_bytes / ctx.min_bytes >= 1.5:
        ev = {"kernels": n, "eager_bytes": ctx.eager_bytes, "min_bytes": ctx.min_bytes,
              "eager_ratio": ctx.eager_bytes / ctx.min_bytes}
        return [Finding("fusion", f"{n} kernels where one could do: the unfused reference moves "
                                  f"{ctx.eager_bytes / ctx.min_bytes:.2g}x the minimum bytes",
                        "warning" if ctx.bound in ("memory", "latency", None) else "info", ev,
                        "Every kernel boundary writes an intermediate to DRAM and reads it back: fuse the elementwise "
                        "work into the producing kernel's epilogue.", move)]
    return []


KERNEL_TOOLS: dict[str, Callable[..., list[Finding]]] = {
    "coalescing": coalescing, "occupancy": occupancy, "spills": spills, "bank_conflicts": bank_conflicts,
    "tail": tail, "l2_reuse": l2_reuse, "bandwidth": bandwidth}
CANDIDATE_TOOLS: dict[str, Callable[..., list[Finding]]] = {
    "tensor_cores": tensor_cores, "launch": launch, "fusion": fusion}
TOOLS = {**KERNEL_TOOLS, **CANDIDATE_TOOLS}


def kernel_metrics(metrics: dict[str, dict], name: str | None) -> dict[str, Any]:
    """The counters of the kernel called `name` (ncu may print a signature after the name)."""
    if not metrics or not name:
        return {}
    if name in metrics:
        return metrics[name]
    return next((m for key, m in metrics.items() if key.split("(")[0].strip() == name), {})


def diagnose(metrics: dict[str, dict] | None, static: dict[str, Any], counts: Any = None,
             verdict: RooflineVerdict | None = None, tools: list[str] | None = None,
             sm_count: int = H200.sms) -> list[Finding]:
    """Run the tools the roofline verdict picked (all when there is no verdict); most severe first. An autotuned
    kernel is read once per config: findings that say the same about the same kernel are kept once."""
    ctx = Context.make(counts, verdict, sm_count)
    chosen = tools if tools is not None else tools_for(verdict) if verdict is not None else list(TOOLS)
    metrics = metrics or {}
    found: list[Finding] = []
    for tool in chosen:
        if tool in CANDIDATE_TOOLS:
            found += CANDIDATE_TOOLS[tool](metrics, static, ctx)
        elif tool in KERNEL_TOOLS:
            for k in static.get("kernels", []):
                found += KERNEL_TOOLS[tool](kernel_metrics(metrics, k.get("kernel")), k, ctx)
        else:
            raise KeyError(f"unknown expert tool '{tool}' (known: {', '.join(TOOLS)})")
    seen, unique = set(), []
    for f in found:
        key = (f.tool, f.kernel, f.severity, f.move)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return sort_findings(unique)
