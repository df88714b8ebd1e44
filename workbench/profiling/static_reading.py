"""Reading a compiled kernel without running it: access widths, tensor-core use, local memory, barriers, instruction
mix (from PTX or SASS text), and theoretical occupancy on sm_90 (from registers, warps and shared memory).

All pure functions of text and numbers. SASS is the better witness when present (it is what runs: ptxas may widen or
split PTX accesses, and spills only appear there), PTX the fallback; the compile-stage record's facts are the last
resort. The occupancy arithmetic follows CUDA's occupancy calculator (cuda_occupancy.h) for compute capability 9.0.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from typing import Any

from ..core.target import H200

# sm_90 per-SM limits (the H200's, which the H100 shares).
SM90 = dict(regs_per_sm=H200.regs_per_sm, max_warps=H200.max_warps_per_sm, max_blocks=H200.max_blocks_per_sm,
            smem_per_sm=H200.smem_per_sm, reserved_smem=H200.reserved_smem_per_block, reg_unit=H200.reg_alloc_unit,
            smem_unit=H200.smem_alloc_unit, subpartitions=H200.subpartitions,
            max_regs_per_block=H200.max_regs_per_block)


# ---------------------------------------------------------------- occupancy

@dataclasses.dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # active warps / max warps per SM
    limiter: str  # "warps" | "blocks" | "registers" | "shared" (the first resource that reaches the minimum)
    limits: dict[str, int]  # blocks per SM each resource allows

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def occupancy(regs: int, threads_per_block: int, shared_bytes: int, limits: dict[str, int] | None = None) -> Occupancy:
    """Theoretical blocks and warps per SM. Registers are allocated per warp in units of 256 and per sub-partition
    (4 per SM); shared memory per block is rounded to 128 B with 1 KB reserved by the system."""
    L = {**SM90, **(limits or {})}
    warps = max(1, math.ceil(threads_per_block / 32))
    by_warps = L["max_warps"] // warps
    by_regs = L["max_blocks"]
    if regs:
        regs_per_warp = math.ceil(regs * 32 / L["reg_unit"]) * L["reg_unit"]
        allocated = math.ceil(warps / L["subpartitions"]) * L["subpartitions"]  # the hardware's launch check
        if regs_per_warp * allocated > L["max_regs_per_block"]:
            by_regs = 0
        else:
            per_sub = (L["regs_per_sm"] // L["subpartitions"]) // regs_per_warp
            by_regs = per_sub * L["subpartitions"] // warps
    smem = math.ceil((shared_bytes + L["reserved_smem"]) / L["smem_unit"]) * L["smem_unit"]
    by_smem = L["smem_per_sm"] // smem
    per = {"warps": by_warps, "blocks": L["max_blocks"], "registers": by_regs, "shared": by_smem}
    blocks = min(per.values())
    limiter = next(k for k in ("warps", "blocks", "registers", "shared") if per[k] == blocks)
    return Occupancy(blocks, blocks * warps, blocks * warps / L["max_warps"], limiter, per)


# ---------------------------------------------------------------- PTX

_PTX_PRED = re.compile(r"^@!?%\w+\s+")
_CP_ASYNC_SIZE = re.compile(r"cp\.async\.c[ag]\.shared(?:::\w+)?\.global\S*\s+\[[^\]]*\]\s*,\s*\[[^\]]*\]\s*,\s*"
                            r"(0x[0-9a-fA-F]+|\d+)")


def _ptx_instructions(ptx: str) -> list[tuple[str, str]]:
    """(opcode, whole line) of every instruction; directives, labels, comments and braces skipped."""
    out = []
    for raw in ptx.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line or line[0] in ".${}" or line.endswith(":") or line.startswith("("):
            continue
        line = _PTX_PRED.sub("", line)
        op = line.split(None, 1)[0].rstrip(";")
        if re.match(r"^[a-z]", op):
            out.append((op, line))
    return out


def _ptx_bits(op: str) -> int:
    """Bits moved by one ld/st: vector length x element width (ld.global.v4.b32 -> 128)."""
    parts = op.split(".")
    vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
    elem = next((int(m.group(1)) for p in reversed(parts) if (m := re.fullmatch(r"[bsuf](\d+)(x2)?", p))), 32)
    if re.search(r"x2$", parts[-1]):
        elem *= 2
    return vec * elem


def _ptx_class(op: str) -> str:
    if op.startswith(("ld.global", "st.global", "atom.global", "red.global", "prefetch.global")) or \
            (op.startswith("cp.async") and ".global" in op) or op.startswith("cp.async.bulk.tensor"):
        return "global_memory"
    if op.startswith(("ld.shared", "st.shared", "ldmatrix", "stmatrix", "atom.shared", "red.shared")):
        return "shared_memory"
    if op.startswith(("ld.local", "st.local")):
        return "local_memory"
    if op.startswith(("ld.param", "ld.const")):
        return "param"
    if op.startswith(("wgmma.mma_async", "mma.sync")):
        return "tensor"
    if op.startswith(("bar", "barrier", "membar", "fence", "wgmma.", "cp.async", "mbarrier")):
        return "sync"
    if op.startswith(("bra", "ret", "call", "exit", "trap")):
        return "control"
    if op.startswith(("cvt", "cvta")):
        return "convert"
    if op.startswith(("mov", "shfl")):
        return "move"
    last = op.split(".")[-1]
    if last in ("f32", "f64") or ".approx.f32" in op or ".rn.f32" in op:
        return "fp32"
    if last in ("f16", "f16x2", "bf16", "bf16x2"):
        return "fp16"
    if re.fullmatch(r"[bsu](8|16|32|64)|pred", last):
        return "int"
    return "other"


def read_ptx(ptx: str) -> dict[str, Any]:
    """Counts from PTX: global load/store widths in bits, cp.async, local and shared traffic, barriers, tensor cores,
    and the instruction mix by class."""
    loads: Counter = Counter()
    stores: Counter = Counter()
    mix: Counter = Counter()
    r = Counter()
    for op, line in _ptx_instructions(ptx):
        mix[_ptx_class(op)] += 1
        if op.startswith("ld.global"):
            loads[_ptx_bits(op)] += 1
        elif op.startswith("st.global"):
            stores[_ptx_bits(op)] += 1
        elif op.startswith("cp.async.bulk.tensor"):
            r["tma"] += 1
        elif op.startswith("cp.async.c") and ".global" in op:
            m = _CP_ASYNC_SIZE.search(line)
            loads[int(m.group(1), 0) * 8 if m else 128] += 1
            r["cp_async"] += 1
        elif op.startswith("ld.local"):
            r["local_loads"] += 1
        elif op.startswith("st.local"):
            r["local_stores"] += 1
        elif op.startswith(("ld.shared", "ldmatrix")):
            r["shared_loads"] += 1
        elif op.startswith(("st.shared", "stmatrix")):
            r["shared_stores"] += 1
        elif op.startswith(("bar.sync", "barrier.sync", "bar.cta.sync", "barrier.cta.sync")):
            r["barriers"] += 1
        elif op.startswith("wgmma.mma_async"):
            r["wgmma"] += 1
        elif op.startswith("mma.sync"):
            r["mma"] += 1
        elif op.startswith(("atom.global", "red.global")):
            r["atomics"] += 1
    return _summary("ptx", loads, stores, r, mix)


# ---------------------------------------------------------------- SASS

_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
_SASS_CLASSES = {
    "global_memory": "LDG STG LDGSTS ATOMG RED ATOM UTMALDG UTMASTG UBLKCP CCTL",
    "shared_memory": "LDS STS LDSM STSM ATOMS",
    "local_memory": "LDL STL",
    "tensor": "HGMMA HMMA IMMA DMMA QGMMA IGMMA",
    "fp32": "FADD FMUL FFMA FMNMX FSETP FSEL FSET MUFU FCHK FRND FSWZADD",
    "fp16": "HADD2 HMUL2 HFMA2 HMNMX2 HSETP2 HSET2",
    "fp64": "DADD DMUL DFMA DSETP DMNMX",
    "convert": "F2F F2I I2F I2FP F2FP F2IP",
    "int": "IADD3 IMAD IMUL LOP3 LOP SHF SHL SHR LEA ISETP IABS SEL VIADD IMNMX VIMNMX PRMT SGXT FLO POPC BMSK BREV "
           "IADD ISCADD IDP P2R R2P PLOP3",
    "move": "MOV S2R CS2R LDC S2UR R2UR SHFL ELECT VOTE MOVM",
    "control": "BRA EXIT RET CALL BSSY BSYNC WARPSYNC NOP YIELD JMP BRX KILL",
    "sync": "BAR MEMBAR DEPBAR LDGDEPBAR SYNCS ARRIVES ERRBAR FENCE WARPGROUP",
}
_SASS_CLASS = {op: cls for cls, ops in _SASS_CLASSES.items() for op in ops.split()}


def _sass_class(base: str) -> str:
    if base in _SASS_CLASS:
        return _SASS_CLASS[base]
    if base.startswith("U") and base[1:] in _SASS_CLASS:  # uniform-datapath twin (UIADD3, ULDC, UMOV, ...)
        return _SASS_CLASS[base[1:]]
    return "other"


def _sass_bits(opcode: str) -> int:
    mods = opcode.split(".")[1:]
    for bits in ("128", "64"):
        if bits in mods:
            return int(bits)
    if any(m in ("U16", "S16") for m in mods):
        return 16
    if any(m in ("U8", "S8") for m in mods):
        return 8
    return 32


def read_sass(sass: str) -> dict[str, Any]:
    """Counts from `cuobjdump -sass` text (instructions predicated on !PT, which never run, are skipped)."""
    loads: Counter = Counter()
    stores: Counter = Counter()
    mix: Counter = Counter()
    r = Counter()
    for line in sass.splitlines():
        m = _SASS_LINE.search(line)
        if not m or (m.group(1) or "").strip() == "@!PT":
            continue
        opcode = m.group(2)
        base = opcode.split(".")[0]
        mix[_sass_class(base)] += 1
        if base == "LDG":
            loads[_sass_bits(opcode)] += 1
        elif base == "LDGSTS":
            loads[_sass_bits(opcode)] += 1
            r["cp_async"] += 1
        elif base == "STG":
            stores[_sass_bits(opcode)] += 1
        elif base in ("UTMALDG", "UBLKCP"):
            r["tma"] += 1
        elif base == "LDL":
            r["local_loads"] += 1
        elif base == "STL":
            r["local_stores"] += 1
        elif base in ("LDS", "LDSM"):
            r["shared_loads"] += 1
        elif base in ("STS", "STSM"):
            r["shared_stores"] += 1
        elif base == "BAR":
            r["barriers"] += 1
        elif base == "HGMMA":
            r["wgmma"] += 1
        elif base in ("HMMA", "IMMA", "DMMA"):
            r["mma"] += 1
        elif base in ("ATOMG", "RED", "ATOM"):
            r["atomics"] += 1
    return _summary("sass", loads, stores, r, mix)


def _summary(source: str, loads: Counter, stores: Counter, r: Counter, mix: Counter) -> dict[str, Any]:
    n_loads, n_stores = sum(loads.values()), sum(stores.values())
    keys = ("cp_async", "tma", "local_loads", "local_stores", "shared_loads", "shared_stores", "barriers", "wgmma",
            "mma", "atomics")
    return {
        "source": source,
        "global_loads": dict(sorted(loads.items(), reverse=True)),  # {bits per access: instructions}
        "global_stores": dict(sorted(stores.items(), reverse=True)),
        # share of global load instructions that move at least 64 bits (vectorised), and 128 bits (the widest)
        "vector_load_fraction": sum(n for b, n in loads.items() if b >= 64) / n_loads if n_loads else None,
        "wide_load_fraction": loads.get(128, 0) / n_loads if n_loads else None,
        "wide_store_fraction": stores.get(128, 0) / n_stores if n_stores else None,
        **{k: int(r.get(k, 0)) for k in keys},
        "mix": dict(mix.most_common()),
    }


# ---------------------------------------------------------------- a compile-stage kernel record

def read_kernel(k: dict[str, Any], ptx: str | None = None, sass: str | None = None) -> dict[str, Any]:
    """The static reading of one kernel of a compile-stage record (`workbench.harness.compile`); the record may carry
    its own `ptx`, `sass` and `grid` (the profiling probe adds them)."""
    ptx = ptx if ptx is not None else k.get("ptx")
    sass = sass if sass is not None else k.get("sass")
    warps = int(k.get("num_warps") or 4)
    regs = int(k.get("reg") or 0)
    shared = max(int(k.get("shared_bytes") or 0), int(k.get("shared") or 0))
    occ = occupancy(regs, warps * 32, shared)
    out: dict[str, Any] = {
        "kernel": k.get("kernel"), "num_warps": warps, "threads": warps * 32, "num_stages": k.get("num_stages"),
        "registers": regs, "shared_bytes": shared, "stack": int(k.get("stack") or 0), "local": int(k.get("local") or 0),
        "constexprs": dict(k.get("constexprs") or {}), "grid": k.get("grid"),
        "blocks": math.prod(k["grid"]) if k.get("grid") else None, "occupancy": occ.to_dict(),
    }
    if sass:
        out["access"] = read_sass(sass)
        if ptx:  # PTX still says whether the source asked for wgmma (SASS names it HGMMA; both agree normally)
            out["ptx"] = {x: v for x, v in read_ptx(ptx).items() if x in ("wgmma", "mma", "global_loads", "mix")}
    elif ptx:
        out["access"] = read_ptx(ptx)
    else:  # only the compile stage's facts
        out["access"] = {"source": "compile facts", "global_loads": {}, "global_stores": {},
                         "vector_load_fraction": 1.0 if k.get("ld_global_v4") else None,
                         "wgmma": int(bool(k.get("wgmma"))), "mma": int(bool(k.get("mma"))),
                         "tma": int(bool(k.get("tma"))), "cp_async": int(bool(k.get("cp_async"))),
                         "local_loads": int(bool(k.get("local_memory"))), "local_stores": 0, "mix": {}}
    a = out["access"]
    out["tensor_cores"] = "wgmma" if a.get("wgmma") else "mma" if a.get("mma") else None
    out["spills"] = out["stack"] > 0 or out["local"] > 0 or a.get("local_loads", 0) + a.get("local_stores", 0) > 0
    return out


def read_static(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """The static reading of every kernel a candidate launches (a compile-stage record's `kernels`)."""
    readings = [k.get("static") or read_kernel(k) for k in kernels]  # the profiling probe reads in the worker
    names = sorted({r["kernel"] for r in readings if r["kernel"]})
    # an autotuned kernel is compiled once per config: kernels are counted by name, builds separately
    return {"kernels": readings, "n_kernels": len(names), "n_builds": len(readings), "kernel_names": names,
            "tensor_cores": sorted({r["tensor_cores"] for r in readings if r["tensor_cores"]})}
