"""Convolution family: out = epilogue(conv(x, w)) for 1-D, 2-D and 3-D NC(D)HW inputs, forward (not transposed).

1-D and 2-D convolutions run as 3-D ones with unit leading spatial dims (the launcher views the tensors as 5-D), so
one template serves all three. Stride, zero padding and dilation are per dimension; groups split the channels
(depthwise: groups == C_in). Three algorithms, chosen by the configuration's "ALGO":

- "gemm": implicit GEMM on tensor cores. A program computes BM output pixels (flattened N*OD*OH*OW) x BN output
  channels of one group (grid axis 1); the reduction runs over K = C_in/groups * KD*KH*KW in BK slabs, each slab's
  reduction index decomposed into (channel, kd, kh, kw) to address the input. Per-row input offsets and window
  origins are computed once; an input offset is row part + reduction part. Loads are [BK, BM] tiles (pixels fastest:
  consecutive output pixels are consecutive in memory) transposed for `tl.dot`.
- "gemm_tap": the same tiles, the reduction walked window tap by tap with channels in BK slabs inside (one loop over
  taps x channel slabs): the row masks are per tap, the channel offsets a plain stride. Pays when C_in/groups >= BK.
- "gemm_cl": "gemm_tap" over a channels-last copy of the input (the launcher permutes NC(D)HW to N(D)HWC, a no-op
  for an input already channels-last) and a weight permuted to [C_out, KD, KH, KW, C_in/groups]: both operand tiles
  are then K-major (channels contiguous), the layout tf32 tensor-core MMAs read from shared memory without a
  transpose, and the loads vectorise along the channels. The copy costs one pass over the input; it pays when the
  reduction is long (many channels, a 3x3 window) and the input tile is reused across many output channels.
- "direct": no tensor cores, for a reduction too short for them (depthwise: one input channel per output): a
  [BN channels, BM pixels] tile accumulates input * weight over the window (unrolled when small) with fp32 FMAs.
- "library": the convolution itself by the vendor library (torch's conv, cuDNN on a GPU, under the precision the
  harness sets for the reference), the epilogue as one generated pointwise kernel over its output (BM elements a
  program), in place when the dtypes agree. Where cuDNN's convolution beats the templates (small channel counts,
  large windows) this keeps the fusion of everything after it; with no epilogue it is plain torch (no kernel).

What is known from the spec is compiled in: the padding bounds checks only for padded dimensions (an unpadded
window never leaves the input), the reduction mask only where BK does not divide it. Rows and channels past the edge
wrap onto valid ones, so loads need no row mask (only the store does). Offsets are int32 unless a tensor spans 2**31
elements or more.

The epilogue is a `@triton.jit` helper `{name}_epilogue(acc, <inputs>)` returning `spec.epilogue.expr`, applied to the
fp32 tile before the store; inputs are "col" (one value per output channel: a bias, a [C_out, 1, 1] parameter),
"full" (a tensor of the output's shape, any strides) or "scalar" (a Python float). The launcher is
`{name}(x, w, *epilogue_inputs)`; the output is contiguous NC(D)HW in `spec.out_dtype`.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import textwrap
from typing import Any

from ._common import RESERVED_NAMES, next_pow2, usable_name
from .base import DTYPE_BYTES, SHARED_LIMIT, Epilogue, Rendered, grid_space

name = "conv"
template_version = 1  # see base.Family

IN_DTYPES = ("float32", "bfloat16", "float16")
OUT_DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("ieee", "tf32", "tf32x3")
KINDS = ("col", "full", "scalar")
ALGOS = ("gemm", "gemm_tap", "gemm_cl", "direct", "library")
# The order the proposer's algorithm moves try them in: the vendor library first (the baseline a template must beat,
# and the fastest where channels are few), then the templates.
TAP_MAJOR = ("gemm_tap", "gemm_cl")  # reduction walked tap by tap, channels in BK slabs inside
ALGORITHM_MOVE_ORDER = ("library", "gemm_cl", "gemm_tap", "gemm", "direct")

# Accumulator register budgets in bytes per thread, as in the GEMM family (half the register file; less where the
# split tf32x3 operands or FMA-unit operands also live in registers).
ACC_BYTES_PER_THREAD = 512
X3_ACC_BYTES_PER_THREAD = 256
IEEE_ACC_BYTES_PER_THREAD = 256
IEEE_MAX_BK = 32
# Gathered operand tiles (computed addresses, not vectorised) stage through registers: keep them modest.
OPERAND_ELEMS_PER_THREAD = 64
# The direct kernel's tile: fp32 accumulator plus a loaded input tile of the same size per thread.
DIRECT_ELEMS_PER_THREAD = 64
DIRECT_MAX_CG = 16  # a longer reduction per output belongs on tensor cores
DIRECT_UNROLL_TAPS = 64  # windows up to this many taps are unrolled in the direct kernel


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    in_dtype: str                      # dtype of x and w
    out_dtype: str                     # dtype of the output (the epilogue chain's)
    dims: int                          # spatial dims of the problem: 1, 2 or 3
    c_in: int
    c_out: int
    kernel: tuple[int, int, int]       # (KD, KH, KW); unit leading dims for 1-D / 2-D
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, int, int] = (0, 0, 0)
    dilation: tuple[int, int, int] = (1, 1, 1)
    groups: int = 1
    precision: str = "ieee"            # fp32 inputs: "ieee", "tf32", "tf32x3"; ignored for 16-bit inputs
    epilogue: Epilogue | None = None

    @property
    def cg(self) -> int:  # input channels per group
        return self.c_in // self.groups

    @property
    def ng(self) -> int:  # output channels per group
        return self.c_out // self.groups

    @property
    def taps(self) -> int:
        return math.prod(self.kernel)

    @property
    def k(self) -> int:  # the reduction length of one output
        return self.cg * self.taps


def space(spec: ConvSpec) -> list[dict[str, Any]]:
    gemm = grid_space(ALGO=("gemm", "gemm_tap", "gemm_cl"), BM=(32, 64, 128, 256), BN=(16, 32, 64, 128, 256),
                      BK=(16, 32, 64), GROUP_M=(1, 8), num_warps=(4, 8), num_stages=(2, 3, 4))
    direct = grid_space(ALGO=("direct",), BM=(64, 128, 256, 512), BN=(1, 2, 4, 8, 16, 32), BK=(1,), GROUP_M=(1,),
                        num_warps=(2, 4, 8), num_stages=(1,))
    library = grid_space(ALGO=("library",), BM=(512, 1024, 2048, 4096), BN=(1,), BK=(1,), GROUP_M=(1,),
                         num_warps=(4, 8), num_stages=(1,))
    return gemm + direct + library


def _gemm_default(spec: ConvSpec, algo: str) -> dict[str, Any]:
    bn = min(128, max(16, next_pow2(spec.ng)))
    red = spec.cg if algo in TAP_MAJOR else spec.k
    bk = min(32 if spec.in_dtype == "float32" else 64, max(16, next_pow2(red)))
    cfg = dict(ALGO=algo, BM=128, BN=bn, BK=bk, GROUP_M=8, num_warps=8 if bn >= 64 else 4, num_stages=3)
    if spec.in_dtype == "float32" and spec.precision == "ieee":
        cfg.update(BM=64, BN=min(bn, 64), num_warps=4)
    return cfg


def algorithm_default(spec: ConvSpec, algo: str) -> dict[str, Any] | None:
    """A sensible first configuration of one algorithm for this spec (None when the algorithm cannot serve it):
    what the proposer's algorithm moves switch a convolution to."""
    if algo == "library":
        cfg = dict(ALGO="library", BM=1024, BN=1, BK=1, GROUP_M=1, num_warps=4, num_stages=1)
    elif algo == "direct":
        cfg = dict(ALGO="direct", BM=256, BN=min(8, next_pow2(spec.c_out)), BK=1, GROUP_M=1, num_warps=4,
                   num_stages=1)
    else:
        cfg = _gemm_default(spec, algo)
        while check(spec, cfg) and cfg["num_stages"] > 2:
            cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)
        while check(spec, cfg) and cfg["BM"] > 32:
            cfg = dict(cfg, BM=cfg["BM"] // 2)
    return cfg if check(spec, cfg) is None else None


def default(spec: ConvSpec) -> dict[str, Any]:
    candidates = []
    if spec.cg == 1 or spec.k <= 16:
        candidates.append(dict(ALGO="direct", BM=256, BN=min(8, next_pow2(spec.c_out)), BK=1, GROUP_M=1,
                               num_warps=4, num_stages=1))
    # channels-last tap-major where a pixel's channel run fills BK slabs: on an H200 it beat "gemm_tap" on every
    # layer measured and "gemm" on 3-D and wide 2-D layers (results/kernelbench/conv_layout_ab_h200.json)
    candidates.append(_gemm_default(spec, "gemm_cl" if spec.cg >= 32 else "gemm"))
    candidates.append(_gemm_default(spec, "gemm"))
    for cfg in candidates:
        while check(spec, cfg) and cfg["ALGO"] != "direct" and cfg["num_stages"] > 2:
            cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)
        while check(spec, cfg) and cfg["ALGO"] != "direct" and cfg["BM"] > 32:
            cfg = dict(cfg, BM=cfg["BM"] // 2)
        if check(spec, cfg) is None:
            return cfg
    return candidates[-1]


def _spec_problem(spec: ConvSpec) -> str | None:
    if spec.in_dtype not in IN_DTYPES:
        return f"input dtype {spec.in_dtype} unsupported (one of {IN_DTYPES})"
    if spec.out_dtype not in OUT_DTYPES:
        return f"output dtype {spec.out_dtype} unsupported (one of {OUT_DTYPES})"
    if spec.precision not in PRECISIONS:
        return f"precision {spec.precision!r} unknown (one of {PRECISIONS})"
    if spec.dims not in (1, 2, 3) or len(spec.kernel) != 3 or len(spec.stride) != 3 or len(spec.padding) != 3 \
            or len(spec.dilation) != 3:
        return "dims must be 1, 2 or 3 and kernel/stride/padding/dilation 3-tuples (unit leading dims)"
    if min(spec.kernel) < 1 or min(spec.stride) < 1 or min(spec.dilation) < 1 or min(spec.padding) < 0:
        return "kernel, stride and dilation must be >= 1, padding >= 0"
    if spec.groups < 1 or spec.c_in % spec.groups or spec.c_out % spec.groups or spec.c_out < 1 or spec.c_in < 1:
        return f"groups {spec.groups} must divide C_in {spec.c_in} and C_out {spec.c_out}"
    ep = spec.epilogue
    if ep is not None:
        names = [i.name for i in ep.inputs]
        for i in ep.inputs:
            if not usable_name(i.name):
                return f"epilogue input name {i.name!r} is not a usable identifier (reserved: {sorted(RESERVED_NAMES)})"
            if i.kind not in KINDS:
                return f"epilogue input {i.name!r} has kind {i.kind!r}, not one of {KINDS}"
        if len(set(names)) != len(names):
            return "epilogue input names repeat"
        try:
            ast.parse(ep.expr, mode="eval")
        except SyntaxError as e:
            return f"epilogue expression does not parse: {e.msg}"
    return None


def check(spec: ConvSpec, config: dict[str, Any]) -> str | None:
    why = _spec_problem(spec)
    if why:
        return why
    algo, bm, bn, bk = config["ALGO"], config["BM"], config["BN"], config["BK"]
    warps, stages = config["num_warps"], config["num_stages"]
    if algo not in ALGOS:
        return f"ALGO {algo!r} unknown (one of {ALGOS})"
    if warps not in (1, 2, 4, 8, 16) or stages < 1 or config["GROUP_M"] < 1:
        return "num_warps must be a power of two up to 16, num_stages and GROUP_M at least 1"
    if any(t < 1 or t & (t - 1) for t in (bm, bn, bk)):
        return f"tile {bm}x{bn}x{bk}: block sizes must be powers of two"
    threads = warps * 32
    if algo == "library":
        if bm < threads or bm // threads > 32:
            return f"library conv: an epilogue block of {bm} elements over {threads} threads (1 to 32 each)"
        return None
    if algo == "direct":
        if spec.cg > DIRECT_MAX_CG:
            return f"direct kernel: {spec.cg} input channels per group > {DIRECT_MAX_CG} (a reduction that long " \
                   "belongs on tensor cores)"
        if bn > next_pow2(spec.c_out):
            return f"direct kernel: BN {bn} > {next_pow2(spec.c_out)} (C_out {spec.c_out}): idle channels"
        per = bm * bn // threads
        if per > DIRECT_ELEMS_PER_THREAD:
            return f"direct kernel: {bm}x{bn} tile has {per} elements per thread > {DIRECT_ELEMS_PER_THREAD}"
        if bm * bn < threads:
            return f"direct kernel: {bm}x{bn} tile < {threads} threads: idle threads"
        if bm < 32:
            return "direct kernel: BM < 32 leaves a warp's pixel loads uncoalesced"
        return None
    if any(t < 16 for t in (bm, bn, bk)):
        return f"tile {bm}x{bn}x{bk}: tl.dot needs every tile size at least 16"
    red = spec.cg if algo in TAP_MAJOR else spec.k
    if bn > max(16, next_pow2(spec.ng)):
        return f"BN {bn} > {max(16, next_pow2(spec.ng))} for {spec.ng} output channels per group: wasted columns"
    if bk > max(16, next_pow2(red)):
        return f"BK {bk} > {max(16, next_pow2(red))} for a reduction slab of {red}: wasted products"
    nbytes = DTYPE_BYTES[spec.in_dtype]
    x3 = spec.in_dtype == "float32" and spec.precision == "tf32x3"
    pipeline = int((bm * bk + bk * bn) * nbytes * stages * (1.3 if x3 else 1.0))
    if pipeline > SHARED_LIMIT:
        return f"shared memory {pipeline // 1024} KB for {stages} stages of {bm}x{bk} + {bk}x{bn} tiles > " \
               f"{SHARED_LIMIT // 1024} KB"
    if bm * bn * 4 > SHARED_LIMIT:
        return f"shared memory {bm * bn * 4 // 1024} KB for the {bm}x{bn} accumulator's layout conversion > " \
               f"{SHARED_LIMIT // 1024} KB"
    acc = bm * bn * 4 // threads
    if acc > ACC_BYTES_PER_THREAD:
        return f"accumulator {bm}x{bn} fp32 needs {acc} bytes per thread over {warps} warps " \
               f"(> {ACC_BYTES_PER_THREAD}: register spills)"
    if bm * bn < threads * 8:
        return f"tile {bm}x{bn} gives fewer than 8 outputs per thread with {warps} warps (wasted warps)"
    if x3:
        if bk > 32 and bm < 64:
            return f"fp32 tf32x3 dot: BK {bk} spills with BM < 64 (BK <= 32 there)"
        if acc > X3_ACC_BYTES_PER_THREAD:
            return f"fp32 tf32x3 dot: accumulator {acc} bytes per thread > {X3_ACC_BYTES_PER_THREAD} " \
                   "(the split operands also live in registers)"
    if spec.in_dtype == "float32" and spec.precision == "ieee":
        if bk > IEEE_MAX_BK:
            return f"fp32 ieee dot runs on FMA units with operands in registers: BK {bk} > {IEEE_MAX_BK} spills"
        if acc > IEEE_ACC_BYTES_PER_THREAD:
            return f"fp32 ieee dot: accumulator {acc} bytes per thread > {IEEE_ACC_BYTES_PER_THREAD}"
    operand = max(bm * bk, bk * bn) // threads
    if operand > OPERAND_ELEMS_PER_THREAD:
        return f"operand tile {bm}x{bk} / {bk}x{bn} has {operand} gathered elements per thread over {warps} warps " \
               f"(> {OPERAND_ELEMS_PER_THREAD}: the loads stage through registers and spill)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Rendering

def _inputs(spec: ConvSpec):
    return spec.epilogue.inputs if spec.epilogue is not None else ()


def _kernel_params(spec: ConvSpec) -> str:
    out = []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        out += {"col": [n, f"{n}_sc"], "full": [n] + [f"{n}_s{d}" for d in range(5)], "scalar": [n]}[i.kind]
    return "".join(p + ", " for p in out)


def _epilogue_code(spec: ConvSpec, name: str) -> str:
    """Lines that load the epilogue inputs for a [BN channels, BM pixels] tile (channels `co`, pixel coordinates
    nb/od/oh/ow, store mask `mask`) and compute `out` from `acc`."""
    lines, args = [], []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        if i.kind == "scalar":
            lines.append(f"{n}_v = {n}  # a Python float argument: fp32 in the kernel")
        elif i.kind == "col":
            lines.append(f"{n}_v = tl.load({n} + cw * {n}_sc).to(tl.float32)[:, None]")
        else:
            lines.append(f"{n}_v = tl.load({n} + (cw * {n}_s1)[:, None] + (nb * {n}_s0 + od * {n}_s2 + oh * {n}_s3"
                         f" + ow * {n}_s4)[None, :], mask=mask, other=0.0).to(tl.float32)")
        args.append(f"{n}_v")
    if spec.epilogue is None or spec.epilogue.is_identity:
        lines.append("out = acc")
    else:
        lines.append(f"out = {name}_epilogue(acc{''.join(', ' + a for a in args)})")
    return "\n".join(lines)


def _row_coords() -> str:
    """Output pixel coordinates of the (wrapped) rows `mm`, and each row's window origin in the input."""
    return textwrap.dedent("""\
        if INT64:
            mm = mm.to(tl.int64)
        ow = mm % OW
        t = mm // OW
        oh = t % OH
        t = t // OH
        od = t % OD
        nb = t // OD
        id0 = od * SD - PD
        ih0 = oh * SH - PH
        iw0 = ow * SW - PW
    """)


def _bounds(spec: ConvSpec, offsets: tuple[str | None, str | None, str | None], origin: str = "{}") -> str | None:
    """The in-bounds test of window positions over the padded dims only (an unpadded window never leaves the input):
    per dim, the window origin (formatted through `origin`, e.g. "{}[None, :]") plus its offset (None: zero)."""
    terms = []
    for p, off, o, size in zip(spec.padding, offsets, ("id0", "ih0", "iw0"), ("D", "H", "W")):
        if p > 0:
            v = origin.format(o) if off is None else f"({origin.format(o)} + {off})"
            terms.append(f"({v} >= 0) & ({v} < {size})")
    return " & ".join(terms) if terms else None


def _store_code(spec: ConvSpec, name: str) -> str:
    return _epilogue_code(spec, name) + "\n" + textwrap.dedent("""\
        o = out_ptr + (cw * OSP)[:, None] + (nb * (C_OUT * OSP) + (od * OH + oh) * OW + ow)[None, :]
        tl.store(o, out.to(out_ptr.dtype.element_ty), mask=mask)
    """)


def _gemm_kernel(spec: ConvSpec, config: dict[str, Any], name: str) -> str:
    tap_major = config["ALGO"] in TAP_MAJOR
    channels_last = config["ALGO"] == "gemm_cl"
    bk = config["BK"]
    prec = spec.precision if spec.in_dtype == "float32" else "tf32"
    kd_, kh_, kw_ = spec.kernel
    head = textwrap.dedent("""\
        tile = tl.program_id(0)
        g = tl.program_id(1)  # group
        grid_m = tl.cdiv(M, BM)
        grid_n = tl.cdiv(NG, BN)
        group = GROUP_M * grid_n
        first_m = (tile // group) * GROUP_M
        size_m = tl.minimum(grid_m - first_m, GROUP_M)
        pm = first_m + (tile % group) % size_m
        pn = (tile % group) // size_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        mm = rm % M  # rows and channels past the edge wrap onto valid ones: loads need no row mask
        nn = rn % NG
    """) + _row_coords() + textwrap.dedent("""\
        xrow = nb * s_xn + (g * CG) * s_xc + id0 * s_xd + ih0 * s_xh + iw0 * s_xw
        wcol = (g * NG + nn) * KTOT  # the weight is contiguous [C_out, CG * KD * KH * KW]
        rk = tl.arange(0, BK)
        if INT64:
            rk = rk.to(tl.int64)
            wcol = wcol.to(tl.int64)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    """)
    if not tap_major:
        even = spec.k % bk == 0
        loop = ["for k0 in range(0, KTOT, BK):",
                "    k = k0 + rk",
                "    c = k // KVOL",
                "    r = k % KVOL"]
        loop += [f"    kd = r // {kh_ * kw_}" if kd_ > 1 else "    kd = 0",
                 f"    kh = (r // {kw_}) % {kh_}" if kh_ > 1 else "    kh = 0",
                 f"    kw = r % {kw_}" if kw_ > 1 else "    kw = 0"]
        loop += ["    koff = c * s_xc + kd * (DD * s_xd) + kh * (DH * s_xh) + kw * (DW * s_xw)",
                 "    a = x_ptr + koff[:, None] + xrow[None, :]  # [BK, BM]: consecutive pixels fastest"]
        inb = _bounds(spec, tuple(f"(k{a} * {d})[:, None]" if n > 1 else None
                                  for a, n, d in zip("dhw", spec.kernel, spec.dilation)), "{}[None, :]")
        amask = [m for m in (inb, None if even else "(k < KTOT)[:, None]") if m]
        wmask = None if even else "(k < KTOT)[:, None]"
    else:  # tap-major: channel slabs inside each window tap; gemm_cl reads [BM, BK] tiles of a channels-last copy
        even = spec.cg % bk == 0
        ncb = -(-spec.cg // bk)
        loop = [f"for it in range(0, KVOL * {ncb}):  # window taps x channel slabs",
                f"    tap = it // {ncb}",
                f"    c = (it % {ncb}) * BK + rk"]
        loop += [f"    kd = tap // {kh_ * kw_}" if kd_ > 1 else "    kd = 0",
                 f"    kh = (tap // {kw_}) % {kh_}" if kh_ > 1 else "    kh = 0",
                 f"    kw = tap % {kw_}" if kw_ > 1 else "    kw = 0"]
        loop += ["    xt = xrow + kd * (DD * s_xd) + kh * (DH * s_xh) + kw * (DW * s_xw)"]
        inb = _bounds(spec, tuple(f"k{a} * {d}" if n > 1 else None
                                  for a, n, d in zip("dhw", spec.kernel, spec.dilation)))
        wmask = None if even else "(c < CG)[:, None]"
        if channels_last:
            if spec.c_in % 4 == 0 and spec.cg % 4 == 0:  # each pixel's channel run starts 16-byte aligned
                loop.append("    xt = tl.multiple_of(xt, 4)")
            loop.append("    a = x_ptr + xt[:, None] + (c * s_xc)[None, :]  # [BM, BK]: channels fastest (s_xc is 1)")
            amask = [m for m in (f"({inb})[:, None]" if inb else None, None if even else "(c < CG)[None, :]") if m]
            loop.append("    k = tap * CG + c  # the permuted weight is [C_out, KD, KH, KW, CG]")
        else:
            loop.append("    a = x_ptr + (c * s_xc)[:, None] + xt[None, :]  # [BK, BM]: consecutive pixels fastest")
            amask = [m for m in (f"({inb})[None, :]" if inb else None, None if even else "(c < CG)[:, None]") if m]
            loop.append("    k = c * KVOL + tap")
    if amask:
        loop.append(f"    at = tl.load(a, mask={' & '.join(amask)}, other=0.0)")
    else:
        loop.append("    at = tl.load(a)")
    if wmask:
        loop.append(f"    b = tl.load(w_ptr + k[:, None] + wcol[None, :], mask={wmask}, other=0.0)")
    else:
        loop.append("    b = tl.load(w_ptr + k[:, None] + wcol[None, :])")
    a_tile = "at" if channels_last else "tl.trans(at)"
    loop.append(f'    acc = tl.dot({a_tile}, b, acc, input_precision="{prec}")')
    tail = textwrap.dedent("""\
        acc = tl.trans(acc)  # [BN channels, BM pixels]: the store runs along consecutive pixels
        cw = g * NG + rn  # output channel
        if INT64:
            cw = cw.to(tl.int64)
            rm = rm.to(tl.int64)
        ow = rm % OW  # the true rows, for the store
        t = rm // OW
        oh = t % OH
        t = t // OH
        od = t % OD
        nb = t // OD
        mask = (rn < NG)[:, None] & (rm < M)[None, :]
    """) + _store_code(spec, name)
    return head + "\n".join(loop) + "\n" + tail


def _direct_kernel(spec: ConvSpec, config: dict[str, Any], name: str) -> str:
    kd_, kh_, kw_ = spec.kernel
    unroll = spec.taps <= DIRECT_UNROLL_TAPS
    head = textwrap.dedent("""\
        pid = tl.program_id(0)
        grid_p = tl.cdiv(M, BM)
        pp = pid % grid_p  # pixel tiles fastest: neighbouring programs share input rows in L2
        pc = pid // grid_p
        rm = pp * BM + tl.arange(0, BM)
        rn = pc * BN + tl.arange(0, BN)
        mm = rm % M  # rows and channels past the edge wrap onto valid ones: loads need no row mask
        cc = rn % C_OUT
    """) + _row_coords() + textwrap.dedent("""\
        xrow = nb * s_xn + id0 * s_xd + ih0 * s_xh + iw0 * s_xw
        wrow = cc * KTOT
        if INT64:
            wrow = wrow.to(tl.int64)
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    """)
    if spec.groups == 1:  # every channel reads the same input channel: one pixel vector per tap
        xch = ""
    else:
        head += "xch = (cc // NG) * CG * s_xc  # the input channels of each output channel's group\n" \
                "if INT64:\n    xch = xch.to(tl.int64)\n"
        xch = "xch[:, None] + "
    loop = [f"for c in {'tl.static_range' if spec.cg <= 4 else 'range'}(CG):",
            f"    for tap in {'tl.static_range' if unroll else 'range'}(KVOL):"]
    loop += [f"        kd = tap // {kh_ * kw_}" if kd_ > 1 else "        kd = 0",
             f"        kh = (tap // {kw_}) % {kh_}" if kh_ > 1 else "        kh = 0",
             f"        kw = tap % {kw_}" if kw_ > 1 else "        kw = 0",
             "        xt = xrow + c * s_xc + kd * (DD * s_xd) + kh * (DH * s_xh) + kw * (DW * s_xw)"]
    inb = _bounds(spec, tuple(f"k{a} * {d}" if n > 1 else None for a, n, d in zip("dhw", spec.kernel, spec.dilation)))
    mask = f", mask=({inb})[None, :], other=0.0" if inb else ""
    if spec.groups == 1:
        loop.append(f"        xv = tl.load(x_ptr + xt[None, :]{mask}).to(tl.float32)")
    else:
        loop.append(f"        xv = tl.load(x_ptr + {xch}xt[None, :]{mask}).to(tl.float32)")
    loop += ["        wv = tl.load(w_ptr + wrow + (c * KVOL + tap)).to(tl.float32)",
             "        acc += xv * wv[:, None]"]
    tail = textwrap.dedent("""\
        cw = rn
        if INT64:
            cw = cw.to(tl.int64)
            rm = rm.to(tl.int64)
        ow = rm % OW  # the true rows, for the store
        t = rm // OW
        oh = t % OH
        t = t // OH
        od = t % OD
        nb = t // OD
        mask = (rn < C_OUT)[:, None] & (rm < M)[None, :]
    """) + _store_code(spec, name)
    return head + "\n".join(loop) + "\n" + tail


def _library_epilogue_kernel(spec: ConvSpec, name: str) -> str:
    """A pointwise kernel over the library conv's contiguous NC(D)HW output: each element's channel and pixel
    coordinates address the epilogue inputs; `out = epilogue(y)`."""
    loads, args = [], []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        if i.kind == "scalar":
            loads.append(f"{n}_v = {n}")
        elif i.kind == "col":
            loads.append(f"{n}_v = tl.load({n} + c * {n}_sc, mask=mask, other=0.0).to(tl.float32)")
        else:
            loads.append(f"{n}_v = tl.load({n} + nb * {n}_s0 + c * {n}_s1 + od * {n}_s2 + oh * {n}_s3 + ow * {n}_s4,"
                         " mask=mask, other=0.0).to(tl.float32)")
        args.append(f"{n}_v")
    body = textwrap.dedent("""\
        e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if INT64:
            e = e.to(tl.int64)
        mask = e < N
        acc = tl.load(y_ptr + e, mask=mask, other=0.0).to(tl.float32)
        sp = e % OSP
        t = e // OSP
        c = t % C_OUT
        nb = t // C_OUT
        ow = sp % OW
        t = sp // OW
        oh = t % OH
        od = t // OH
    """) + "\n".join(loads) + ("\n" if loads else "") + \
        f"out = {name}_epilogue(acc{''.join(', ' + a for a in args)})\n" + \
        "tl.store(out_ptr + e, out.to(out_ptr.dtype.element_ty), mask=mask)\n"
    params = f"y_ptr, out_ptr, {_kernel_params(spec)}N, OSP, OH, OW, C_OUT: tl.constexpr, BLOCK: tl.constexpr, " \
             "INT64: tl.constexpr"
    return f"@triton.jit\ndef {name}_kernel(\n        {params}):\n" + textwrap.indent(body, "    ")


def _epilogue_args(spec: ConvSpec, shape_expr: str) -> tuple[list[str], str]:
    """Launcher lines preparing the epilogue inputs (a scalar as a float, a per-channel column flattened, a full
    tensor broadcast to `shape_expr` and viewed as 5-D, its span joining `spans` for the int64 decision), and the
    kernel arguments they become, as one string ending in ", " (empty when there are none)."""
    lines, args = [], []
    for j, i in enumerate(_inputs(spec)):
        v = f"e{j}"
        if i.kind == "scalar":
            lines.append(f"    {v} = float(epilogue_inputs[{j}])")
            args.append(v)
        elif i.kind == "col":
            lines.append(f"    {v} = epilogue_inputs[{j}].reshape({spec.c_out})  # one value per output channel")
            args += [v, f"{v}.stride(0)"]
        else:
            lines += [f"    {v} = epilogue_inputs[{j}].expand({shape_expr})",
                      f"    while {v}.dim() < 5:",
                      f"        {v} = {v}.unsqueeze(2)",
                      f"    spans.append(sum((n - 1) * abs(s) for n, s in zip({v}.shape, {v}.stride())))"]
            args += [v] + [f"{v}.stride({d})" for d in range(5)]
    return lines, "".join(a + ", " for a in args)


def _library_launcher(spec: ConvSpec, config: dict[str, Any], name: str) -> str:
    d = spec.dims
    stride, padding, dilation = (tuple(v[3 - d:]) for v in (spec.stride, spec.padding, spec.dilation))
    ins = _inputs(spec)
    lines = [
        f"def {name}(x, w, *epilogue_inputs):",
        f"    assert x.dim() == {d + 2} and x.shape[1] == {spec.c_in}, (x.shape, {spec.c_in})",
        f"    assert len(epilogue_inputs) == {len(ins)}, 'expected {len(ins)} epilogue input(s)'",
        f"    y = torch.nn.functional.conv{d}d(x, w, None, {stride}, {padding}, {dilation}, {spec.groups})",
    ]
    if spec.epilogue is None or spec.epilogue.is_identity:
        return "\n".join(lines + [f"    return y.to(torch.{spec.out_dtype})"]) + "\n"
    lines += [
        "    y = y.contiguous()",
        "    y5 = y",
        "    while y5.dim() < 5:",
        "        y5 = y5.unsqueeze(2)",
        "    NB, _, OD, OH, OW = y5.shape",
        f"    out = y if y.dtype == torch.{spec.out_dtype} else torch.empty_like(y, dtype=torch.{spec.out_dtype})",
        "    if out.numel() == 0:",
        "        return out",
        "    spans = [y.numel()]",
    ]
    arg_lines, ep_args = _epilogue_args(spec, "y.shape")
    lines += arg_lines
    bm = config["BM"]
    lines += [
        "    INT64 = max(spans) >= 2**31",
        f"    {name}_kernel[(triton.cdiv(y.numel(), {bm}),)](",
        f"        y, out, {ep_args}y.numel(), OD * OH * OW, OH, OW, C_OUT={spec.c_out}, BLOCK={bm}, INT64=INT64,",
        f"        num_warps={config['num_warps']})",
        "    return out",
    ]
    return "\n".join(lines) + "\n"


def render(spec: ConvSpec, config: dict[str, Any], name: str) -> Rendered:
    kernels = []
    if config["ALGO"] == "library":
        if spec.epilogue is not None and not spec.epilogue.is_identity:
            ins = "".join(", " + i.name for i in _inputs(spec))
            kernels += [f"@triton.jit\ndef {name}_epilogue(acc{ins}):\n    return {spec.epilogue.expr}\n",
                        _library_epilogue_kernel(spec, name)]
        return Rendered(kernel_src="\n\n".join(kernels), launcher_src=_library_launcher(spec, config, name))
    if spec.epilogue is not None and not spec.epilogue.is_identity:
        ins = "".join(", " + i.name for i in _inputs(spec))
        kernels.append(f"@triton.jit\ndef {name}_epilogue(acc{ins}):\n    return {spec.epilogue.expr}\n")
    body = (_direct_kernel if config["ALGO"] == "direct" else _gemm_kernel)(spec, config, name)
    params = (f"x_ptr, w_ptr, out_ptr, {_kernel_params(spec)}"
              "M, D, H, W, OD, OH, OW, OSP, s_xn, s_xc, s_xd, s_xh, s_xw,\n"
              "        C_OUT: tl.constexpr, CG: tl.constexpr, NG: tl.constexpr, KVOL: tl.constexpr, "
              "KTOT: tl.constexpr,\n"
              "        SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PD: tl.constexpr, PH: tl.constexpr, "
              "PW: tl.constexpr,\n"
              "        DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,\n"
              "        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, "
              "INT64: tl.constexpr")
    kernels.append(f"@triton.jit\ndef {name}_kernel(\n        {params}):\n" + textwrap.indent(body, "    "))
    return Rendered(kernel_src="\n\n".join(kernels), launcher_src=_launcher(spec, config, name))


def _launcher(spec: ConvSpec, config: dict[str, Any], name: str) -> str:
    (kd, kh, kw), (sd, sh, sw) = spec.kernel, spec.stride
    (pd, ph, pw), (dd, dh, dw) = spec.padding, spec.dilation
    ins = _inputs(spec)
    lines = [
        f"def {name}(x, w, *epilogue_inputs):",
        f"    assert x.dim() == {spec.dims + 2} and x.shape[1] == {spec.c_in}, (x.shape, {spec.c_in})",
        f"    assert len(epilogue_inputs) == {len(ins)}, 'expected {len(ins)} epilogue input(s)'",
        "    x5, w5 = x, w.contiguous()",
        "    while x5.dim() < 5:  # 1-D and 2-D as 3-D with unit leading spatial dims",
        "        x5, w5 = x5.unsqueeze(2), w5.unsqueeze(2)",
        f"    assert tuple(w5.shape) == ({spec.c_out}, {spec.cg}, {kd}, {kh}, {kw}), w.shape",
    ]
    if config["ALGO"] == "gemm_cl":  # channels contiguous in both operands (see the module docstring)
        lines += ["    x5 = x5.permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3)",
                  "    w5 = w5.permute(0, 2, 3, 4, 1).contiguous()"]
    lines += [
        "    NB, _, D, H, W = x5.shape",
        f"    OD = (D + {2 * pd} - {dd * (kd - 1)} - 1) // {sd} + 1",
        f"    OH = (H + {2 * ph} - {dh * (kh - 1)} - 1) // {sh} + 1",
        f"    OW = (W + {2 * pw} - {dw * (kw - 1)} - 1) // {sw} + 1",
        f"    shape = (NB, {spec.c_out}) + (OD, OH, OW)[{3 - spec.dims}:]",
        f"    out = torch.empty((NB, {spec.c_out}, OD, OH, OW), device=x.device, dtype=torch.{spec.out_dtype})",
        "    M, OSP = NB * OD * OH * OW, OD * OH * OW",
        "    if out.numel() == 0:",
        "        return out.view(shape)",
        "    spans = [sum((n - 1) * abs(s) for n, s in zip(x5.shape, x5.stride())), w5.numel(), out.numel()]",
    ]
    arg_lines, ep_args = _epilogue_args(spec, "shape")
    lines += arg_lines
    bm, bn = config["BM"], config["BN"]
    if config["ALGO"] == "direct":
        grid = f"(triton.cdiv(M, {bm}) * triton.cdiv({spec.c_out}, {bn}), 1)"
    else:
        grid = f"(triton.cdiv(M, {bm}) * triton.cdiv({spec.ng}, {bn}), {spec.groups})"
    lines += [
        "    INT64 = max(spans) >= 2**31",
        f"    {name}_kernel[{grid}](",
        f"        x5, w5, out, {ep_args}M, D, H, W, OD, OH, OW, OSP, *x5.stride(),",
        f"        C_OUT={spec.c_out}, CG={spec.cg}, NG={spec.ng}, KVOL={spec.taps}, KTOT={spec.k},",
        f"        SD={sd}, SH={sh}, SW={sw}, PD={pd}, PH={ph}, PW={pw}, DD={dd}, DH={dh}, DW={dw},",
        f"        BM={bm}, BN={bn}, BK={config['BK']}, GROUP_M={config['GROUP_M']}, INT64=INT64,",
        f"        num_warps={config['num_warps']}, num_stages={config['num_stages']})",
        "    return out.view(shape)",
    ]
    return "\n".join(lines) + "\n"
