"""Transposed-convolution family: y = epilogue(conv_transpose(x, w)) for 1-D/2-D/3-D inputs in N C (D) (H) W layout,
any stride, padding, output_padding, dilation and groups. Lower ranks run as 3-D with unit dimensions.

The kernel is an output-stationary implicit GEMM on `tl.dot`: a program owns BM output pixels x BN output channels
of one group and reduces over (C_in / groups) x the kernel window, BK input channels at a time. For output coordinate
o and kernel tap k the input coordinate is i = (o + pad - k * dil) / stride, a contribution only when the division is
exact and 0 <= i < in_size. The weight ([C_in, C_out / groups, k...] in torch) is repacked by the launcher to
[taps, C_in, C_out / groups] so the B tile's loads run along output channels. The reduction is one flat loop over
(tap, channel slab), so the software pipeline spans taps as well as channel slabs. Variants chosen by the config:

- PHASED = False: every output pixel in a tile, each tap masked per pixel where the division is inexact (at
  stride s, only about 1/s of the taps per dimension contribute to a pixel; the rest is masked MMA work).
- PHASED = True (sub-pixel decomposition): a program's pixels share one stride phase o = r + s * q, for which the
  contributing taps are the same for every pixel (k = k0, k0 + s / gcd(s, dil), ...): the loop visits only those,
  so no MMA work goes to invalid taps. At stride 1 both variants are the same kernel.

The epilogue is a `@triton.jit` helper `{name}_epilogue(acc, <inputs>)` returning `spec.epilogue.expr`; inputs are
"col" (one value per output channel, shape [C_out]), "full" (output-shaped, any strides, broadcast like torch) or
"scalar" (a Python float). The launcher is `{name}(x, w, *epilogue_inputs)`.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import textwrap
from typing import Any

from ._common import RESERVED_NAMES, next_pow2, usable_name
from .base import DTYPE_BYTES, SHARED_LIMIT, Epilogue, Rendered, grid_space

name = "conv_transpose"
template_version = 1  # see base.Family

IN_DTYPES = ("float32", "bfloat16", "float16")
OUT_DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("ieee", "tf32", "tf32x3")
KINDS = ("col", "full", "scalar")

# Register budgets of the fp32 accumulator in bytes per thread, as in the GEMM family (gemm.py says why).
ACC_BYTES_PER_THREAD = 512
X3_ACC_BYTES_PER_THREAD = 256
IEEE_ACC_BYTES_PER_THREAD = 256
IEEE_MAX_BK = 32
# The A tile is a gather (per-pixel input coordinates, masks): its loads are never vectorised and stage through
# registers, so an operand tile of this many elements per thread or more spills (gemm.OPERAND_ELEMS_PER_THREAD).
OPERAND_ELEMS_PER_THREAD = 128


@dataclasses.dataclass(frozen=True)
class ConvTransposeSpec:
    rank: int                        # 1, 2 or 3 spatial dimensions
    stride: tuple[int, ...]          # one entry per spatial dimension
    padding: tuple[int, ...]
    output_padding: tuple[int, ...]  # only changes the output size (the launcher computes it)
    dilation: tuple[int, ...]
    groups: int
    c_in: int                        # input channels (all groups)
    c_out: int                       # output channels (all groups)
    in_dtype: str                    # x and w
    out_dtype: str
    precision: str = "ieee"          # fp32 inputs: "ieee", "tf32", "tf32x3"; ignored for 16-bit inputs
    epilogue: Epilogue | None = None

    @property
    def c_in_group(self) -> int:
        return self.c_in // self.groups

    @property
    def c_out_group(self) -> int:
        return self.c_out // self.groups

    @property
    def strided(self) -> bool:
        return any(s > 1 for s in self.stride)


def space(spec: ConvTransposeSpec) -> list[dict[str, Any]]:
    return grid_space(BM=(32, 64, 128, 256), BN=(16, 32, 64, 128), BK=(16, 32, 64), num_warps=(4, 8),
                      num_stages=(2, 3, 4), PHASED=(False, True))


def _fit(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, next_pow2(n)))


def default(spec: ConvTransposeSpec) -> dict[str, Any]:
    bn = _fit(spec.c_out_group, 16, 64 if spec.in_dtype == "float32" else 128)
    bk = _fit(spec.c_in_group, 16, 32 if spec.in_dtype == "float32" else 64)
    cfg = dict(BM=128, BN=bn, BK=bk, num_warps=4, num_stages=3, PHASED=spec.strided)
    if spec.in_dtype == "float32" and spec.precision == "ieee":
        cfg.update(BM=64, BN=min(bn, 64))
    elif bn >= 128:
        cfg["num_warps"] = 8
    while check(spec, cfg) is not None and cfg["BM"] > 32:  # shrink toward a valid tile (the space's smallest fits)
        cfg["BM"] //= 2
    return cfg


def _epilogue_problem(ep: Epilogue | None) -> str | None:
    if ep is None:
        return None
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


def check(spec: ConvTransposeSpec, config: dict[str, Any]) -> str | None:
    if spec.in_dtype not in IN_DTYPES:
        return f"input dtype {spec.in_dtype} unsupported (one of {IN_DTYPES})"
    if spec.out_dtype not in OUT_DTYPES:
        return f"output dtype {spec.out_dtype} unsupported (one of {OUT_DTYPES})"
    if spec.precision not in PRECISIONS:
        return f"precision {spec.precision!r} unknown (one of {PRECISIONS})"
    if spec.rank not in (1, 2, 3) or any(len(t) != spec.rank for t in (spec.stride, spec.padding,
                                                                      spec.output_padding, spec.dilation)):
        return f"rank {spec.rank} with stride/padding/output_padding/dilation of other lengths"
    if min(spec.stride + spec.dilation) < 1 or min(spec.padding + spec.output_padding) < 0:
        return "stride and dilation must be at least 1, padding and output_padding at least 0"
    if spec.groups < 1 or spec.c_in % spec.groups or spec.c_out % spec.groups:
        return f"{spec.groups} groups do not divide {spec.c_in} input and {spec.c_out} output channels"
    why = _epilogue_problem(spec.epilogue)
    if why:
        return why
    bm, bn, bk = config["BM"], config["BN"], config["BK"]
    warps, stages = config["num_warps"], config["num_stages"]
    if any(t < 16 or t & (t - 1) for t in (bm, bn, bk)):
        return f"tile {bm}x{bn}x{bk}: tl.dot needs power-of-two tile sizes of at least 16"
    if warps not in (1, 2, 4, 8, 16) or stages < 1:
        return "num_warps must be a power of two up to 16 and num_stages at least 1"
    if config["PHASED"] and not spec.strided:
        return "PHASED at stride 1: one phase, the same kernel as PHASED = False"
    # tiles much wider than the channels they cover only multiply zeros
    if bn > max(16, next_pow2(spec.c_out_group)):
        return f"BN {bn} over {spec.c_out_group} output channels per group: the tile is mostly padding"
    if bk > max(16, next_pow2(spec.c_in_group)):
        return f"BK {bk} over {spec.c_in_group} input channels per group: the slab is mostly padding"
    nbytes = DTYPE_BYTES[spec.in_dtype]
    x3 = spec.in_dtype == "float32" and spec.precision == "tf32x3"
    pipeline = int((bm * bk + bk * bn) * nbytes * stages * (1.3 if x3 else 1.0))
    if pipeline > SHARED_LIMIT:
        return f"shared memory {pipeline // 1024} KB for {stages} stages of {bm}x{bk} + {bk}x{bn} tiles > " \
               f"{SHARED_LIMIT // 1024} KB"
    if bm * bn * 4 > SHARED_LIMIT:
        return f"shared memory {bm * bn * 4 // 1024} KB for the {bm}x{bn} fp32 accumulator's layout conversion " \
               f"> {SHARED_LIMIT // 1024} KB"
    threads = warps * 32
    acc = bm * bn * 4 // threads
    if acc > ACC_BYTES_PER_THREAD:
        return f"accumulator {bm}x{bn} fp32 needs {acc} bytes per thread over {warps} warps " \
               f"(> {ACC_BYTES_PER_THREAD}: register spills)"
    if bm * bn < threads * 8:
        return f"tile {bm}x{bn} gives fewer than 8 outputs per thread with {warps} warps (wasted warps)"
    if x3:
        if bk > 32 and bm < 64:
            return f"fp32 tf32x3 dot: BK {bk} spills with BM < 64"
        if acc > X3_ACC_BYTES_PER_THREAD:
            return f"fp32 tf32x3 dot: accumulator {acc} bytes per thread > {X3_ACC_BYTES_PER_THREAD} " \
                   "(the split operands also live in registers)"
    if spec.in_dtype == "float32" and spec.precision == "ieee":
        if bk > IEEE_MAX_BK:
            return f"fp32 ieee dot runs on FMA units with operands in registers: BK {bk} > {IEEE_MAX_BK} spills"
        if acc > IEEE_ACC_BYTES_PER_THREAD:
            return f"fp32 ieee dot: accumulator {acc} bytes per thread > {IEEE_ACC_BYTES_PER_THREAD}"
    operand = max(bm * bk, bk * bn) // threads
    if operand >= OPERAND_ELEMS_PER_THREAD:
        return f"operand tile {bm}x{bk} / {bk}x{bn} has {operand} elements per thread over {warps} warps " \
               f"(>= {OPERAND_ELEMS_PER_THREAD}: the gathered loads stage through registers and spill)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Rendering

def _inputs(spec: ConvTransposeSpec):
    return spec.epilogue.inputs if spec.epilogue is not None else ()


def _kernel_params(spec: ConvTransposeSpec) -> str:
    out = []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        out += {"col": [n, f"{n}_sc"], "full": [n] + [f"{n}_s{j}" for j in range(5)], "scalar": [n]}[i.kind]
    return "".join(p + ", " for p in out)


def _epilogue_code(spec: ConvTransposeSpec, name: str) -> str:
    """Lines that load the epilogue inputs for output pixels (bn_, od, oh, ow), channels co and compute `out`."""
    lines, args = [], []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        if i.kind == "scalar":
            lines.append(f"{n}_v = {n}")
        elif i.kind == "col":
            lines.append(f"{n}_v = tl.load({n} + co * {n}_sc, mask=co_ok, other=0.0).to(tl.float32)[None, :]")
        else:
            lines.append(f"{n}_v = tl.load({n} + (nb.to(tl.int64) * {n}_s0 + od * {n}_s2 + oh * {n}_s3 + "
                         f"ow * {n}_s4)[:, None] + (co * {n}_s1)[None, :], mask=mask, other=0.0).to(tl.float32)")
        args.append(f"{n}_v")
    if spec.epilogue is None or spec.epilogue.is_identity:
        lines.append("out = acc")
    else:
        lines.append(f"out = {name}_epilogue(acc{''.join(', ' + a for a in args)})")
    return "\n".join(lines)


KERNEL_BODY = """\
pid_m = tl.program_id(0)
pid_n = tl.program_id(1)
pid_z = tl.program_id(2)  # group and (PHASED) stride phase
g = pid_z % GROUPS
phase = pid_z // GROUPS
# per-dimension phase r (PHASED) and the tap recurrence: taps k = k0, k0 + STEP, ... contribute to outputs r + s*q
if PHASED:
    rw = phase % SW
    rh = (phase // SW) % SH
    rd = phase // (SW * SH)
    PD = tl.cdiv(OD - rd, SD)  # outputs of this phase, per dimension
    PH = tl.cdiv(OH - rh, SH)
    PW = tl.cdiv(OW - rw, SW)
    cd = rd + PAD_D
    ch = rh + PAD_H
    cw = rw + PAD_W
    k0d = KD
    k0h = KH
    k0w = KW
    for k in tl.static_range(STEP_D):
        k0d = tl.where(((cd - k * DIL_D) % SD == 0) & (k < k0d), k, k0d)
    for k in tl.static_range(STEP_H):
        k0h = tl.where(((ch - k * DIL_H) % SH == 0) & (k < k0h), k, k0h)
    for k in tl.static_range(STEP_W):
        k0w = tl.where(((cw - k * DIL_W) % SW == 0) & (k < k0w), k, k0w)
    nd = tl.maximum(tl.cdiv(KD - k0d, STEP_D), 0)
    nh = tl.maximum(tl.cdiv(KH - k0h, STEP_H), 0)
    nw = tl.maximum(tl.cdiv(KW - k0w, STEP_W), 0)
else:
    rw = 0
    rh = 0
    rd = 0
    PD = OD
    PH = OH
    PW = OW
    k0d = 0
    k0h = 0
    k0w = 0
    nd = KD
    nh = KH
    nw = KW
rm = pid_m * BM + tl.arange(0, BM)
row_ok = rm < NB * PD * PH * PW
qw = rm % PW
qh = (rm // PW) % PH
qd = (rm // (PW * PH)) % PD
nb = rm // (PW * PH * PD)
if PHASED:
    od = rd + SD * qd
    oh = rh + SH * qh
    ow = rw + SW * qw
    row_ok = row_ok & (od < OD) & (oh < OH) & (ow < OW)
else:
    od = qd
    oh = qh
    ow = qw
x_row = x_ptr + nb.to(tl.int64) * s_xn
rk = tl.arange(0, BK)
co = pid_n * BN + tl.arange(0, BN)
co_ok = co < COG
ci_slabs = tl.cdiv(CIG, BK)
x_ch = (g * CIG + rk).to(tl.int64) * s_xc
w_col = w_ptr + (g * CIG + rk).to(tl.int64)[:, None] * COG + co[None, :]
acc = tl.zeros((BM, BN), dtype=tl.float32)
for t in range(0, nd * nh * nw * ci_slabs):
    ci0 = (t % ci_slabs) * BK
    tap = t // ci_slabs
    kw = k0w + (tap % nw) * STEP_W
    kh = k0h + ((tap // nw) % nh) * STEP_H
    kd = k0d + (tap // (nw * nh)) * STEP_D
    if PHASED:  # exact divisions: the phase makes every tap visited contribute
        idd = qd + (cd - kd * DIL_D) // SD
        ih = qh + (ch - kh * DIL_H) // SH
        iw = qw + (cw - kw * DIL_W) // SW
        ok = row_ok
    else:
        td = od + PAD_D - kd * DIL_D
        th = oh + PAD_H - kh * DIL_H
        tw = ow + PAD_W - kw * DIL_W
        ok = row_ok & (td >= 0) & (th >= 0) & (tw >= 0)
        if SD > 1:
            ok = ok & (td % SD == 0)
        if SH > 1:
            ok = ok & (th % SH == 0)
        if SW > 1:
            ok = ok & (tw % SW == 0)
        idd = td // SD
        ih = th // SH
        iw = tw // SW
    ok = ok & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
    a_ptrs = (x_row + idd * s_xd + ih * s_xh + iw * s_xw)[:, None] + (x_ch + ci0.to(tl.int64) * s_xc)[None, :]
    b_ptrs = w_col + ((kd * KH + kh) * KW + kw).to(tl.int64) * CI * COG + ci0 * COG
    if EVEN_C:
        a = tl.load(a_ptrs, mask=ok[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=co_ok[None, :], other=0.0)
    else:
        k_ok = rk < CIG - ci0
        a = tl.load(a_ptrs, mask=ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & co_ok[None, :], other=0.0)
    acc = tl.dot(a, b, acc, input_precision="{prec}")
co = g * COG + co  # global output channel (epilogue inputs and the store)
mask = row_ok[:, None] & co_ok[None, :]
{epilogue}
y_ptrs = y_ptr + (nb.to(tl.int64) * s_yn + od * s_yd + oh * s_yh + ow * s_yw)[:, None] + \\
    (co.to(tl.int64) * s_yc)[None, :]
tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=mask)
"""

PARAMS = ("x_ptr, w_ptr, y_ptr, {ep}NB, CI, ID, IH, IW, OD, OH, OW, KD, KH, KW,\n"
          "        s_xn, s_xc, s_xd, s_xh, s_xw, s_yn, s_yc, s_yd, s_yh, s_yw,\n"
          "        CIG: tl.constexpr, COG: tl.constexpr, GROUPS: tl.constexpr,\n"
          "        SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,\n"
          "        PAD_D: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr,\n"
          "        DIL_D: tl.constexpr, DIL_H: tl.constexpr, DIL_W: tl.constexpr,\n"
          "        STEP_D: tl.constexpr, STEP_H: tl.constexpr, STEP_W: tl.constexpr,\n"
          "        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PHASED: tl.constexpr,\n"
          "        EVEN_C: tl.constexpr")


def _dot_precision(spec: ConvTransposeSpec) -> str:
    return spec.precision if spec.in_dtype == "float32" else "tf32"


def render(spec: ConvTransposeSpec, config: dict[str, Any], name: str) -> Rendered:
    kernels = []
    if spec.epilogue is not None and not spec.epilogue.is_identity:
        ins = "".join(", " + i.name for i in _inputs(spec))
        kernels.append(f"@triton.jit\ndef {name}_epilogue(acc{ins}):\n    return {spec.epilogue.expr}\n")
    body = KERNEL_BODY.replace("{prec}", _dot_precision(spec)).replace("{epilogue}", _epilogue_code(spec, name))
    params = PARAMS.replace("{ep}", _kernel_params(spec))
    kernels.append(f"@triton.jit\ndef {name}_kernel(\n        {params}):\n" + textwrap.indent(body, "    "))
    return Rendered(kernel_src="\n\n".join(kernels), launcher_src=_launcher(spec, config, name))


def _pad3(t: tuple[int, ...], fill: int) -> tuple[int, ...]:
    """A per-dimension tuple as (D, H, W): lower ranks get unit leading dimensions."""
    return (fill,) * (3 - len(t)) + tuple(t)


def _launcher(spec: ConvTransposeSpec, config: dict[str, Any], name: str) -> str:
    r = spec.rank
    sd, sh, sw = _pad3(spec.stride, 1)
    pd, ph, pw = _pad3(spec.padding, 0)
    opd, oph, opw = _pad3(spec.output_padding, 0)
    dd, dh, dw = _pad3(spec.dilation, 1)
    phased = bool(config["PHASED"])
    # PHASED: the taps of one phase recur every s / gcd(s, dil); otherwise every tap is visited
    steps = tuple(s // math.gcd(s, d) if phased else 1 for s, d in ((sd, dd), (sh, dh), (sw, dw)))
    phases = sd * sh * sw if phased else 1
    unit = "[:, :" + ", None" * (3 - r) + "]" if r < 3 else ""  # [N, C, ...] -> [N, C, 1.., ...]
    lead = ", ".join(["None"] * (3 - r))
    ins = _inputs(spec)
    lines = [
        f"def {name}(x, w, *epilogue_inputs):",
        f"    assert x.dim() == {r + 2} and w.dim() == {r + 2}, (x.shape, w.shape)",
        f"    assert len(epilogue_inputs) == {len(ins)}, 'expected {len(ins)} epilogue input(s)'",
        f"    x5 = x{unit}" if r < 3 else "    x5 = x",
        f"    w5 = w{unit}" if r < 3 else "    w5 = w",
        "    NB, CI, ID, IH, IW = x5.shape",
        "    _, COG, KD, KH, KW = w5.shape",
        f"    assert w5.shape[0] == CI == {spec.c_in} and COG * {spec.groups} == {spec.c_out}, (x.shape, w.shape)",
        f"    OD = (ID - 1) * {sd} - {2 * pd} + {dd} * (KD - 1) + {opd} + 1",
        f"    OH = (IH - 1) * {sh} - {2 * ph} + {dh} * (KH - 1) + {oph} + 1",
        f"    OW = (IW - 1) * {sw} - {2 * pw} + {dw} * (KW - 1) + {opw} + 1",
        f"    y5 = torch.empty((NB, {spec.c_out}, OD, OH, OW), device=x.device, dtype=torch.{spec.out_dtype})",
        f"    y = y5.view(y5.shape[:2] + y5.shape[{5 - r}:])",
        "    if y.numel() == 0:",
        "        return y",
        "    # taps-major, output channels innermost: the B tile's loads run along output channels",
        "    wp = w5.permute(2, 3, 4, 0, 1).contiguous()",
    ]
    args = []
    for j, i in enumerate(ins):
        v = f"e{j}"
        if i.kind == "scalar":
            lines.append(f"    {v} = float(epilogue_inputs[{j}])")
            args.append(v)
        elif i.kind == "col":
            lines.append(f"    {v} = epilogue_inputs[{j}].reshape(-1).expand({spec.c_out})")
            args += [v, f"{v}.stride(0)"]
        else:
            lines.append(f"    {v} = epilogue_inputs[{j}].expand(y.shape)" + (f"[:, :, {lead}]" if r < 3 else ""))
            args += [v] + [f"{v}.stride({d})" for d in range(5)]
    ep_args = "".join(a + ", " for a in args)
    bm, bn, bk = config["BM"], config["BN"], config["BK"]
    rows = f"NB * triton.cdiv(OD, {sd}) * triton.cdiv(OH, {sh}) * triton.cdiv(OW, {sw})" if phased \
        else "NB * OD * OH * OW"
    lines += [
        f"    grid = (triton.cdiv({rows}, {bm}), triton.cdiv(COG, {bn}), {spec.groups * phases})",
        f"    {name}_kernel[grid](x5, wp, y5, {ep_args}NB, CI, ID, IH, IW, OD, OH, OW, KD, KH, KW,",
        "        x5.stride(0), x5.stride(1), x5.stride(2), x5.stride(3), x5.stride(4),",
        "        y5.stride(0), y5.stride(1), y5.stride(2), y5.stride(3), y5.stride(4),",
        f"        CIG={spec.c_in_group}, COG={spec.c_out_group}, GROUPS={spec.groups}, SD={sd}, SH={sh}, SW={sw},",
        f"        PAD_D={pd}, PAD_H={ph}, PAD_W={pw}, DIL_D={dd}, DIL_H={dh}, DIL_W={dw},",
        f"        STEP_D={steps[0]}, STEP_H={steps[1]}, STEP_W={steps[2]},",
        f"        BM={bm}, BN={bn}, BK={bk}, PHASED={phased}, EVEN_C={spec.c_in_group % bk == 0},",
        f"        num_warps={config['num_warps']}, num_stages={config['num_stages']})",
        "    return y",
    ]
    return "\n".join(lines) + "\n"
