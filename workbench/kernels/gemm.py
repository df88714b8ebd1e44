"""GEMM family: C = epilogue(A @ B) for [M, K] x [K, N] (or batched [B, M, K] x [B, K, N]) with any strides.

The kernel is the classic Triton tiled matmul: a BM x BN output tile per program, a K loop of BK-wide slabs through
`tl.dot` with fp32 accumulation, grouped tile order (GROUP_M rows of tiles share B slabs in L2), rows and columns
wrapped modulo M and N so the K loop's loads need no row/column mask (only the store and the epilogue are masked), and
a K mask that is compiled out when K divides evenly. Variants chosen by the configuration:

- SPLIT_K > 1: program (tile, z) sums every SPLIT_K-th BK slab starting at slab z into an fp32 workspace
  [SPLIT_K, B, M, N]; a second small kernel adds the SPLIT_K planes and applies the epilogue once, after the sum.
- PERSISTENT: min(#tiles, NUM_SMS) programs, each walking tiles pid, pid + NUM_SMS, ... (NUM_SMS: the H200's SMs).

The epilogue is a `@triton.jit` helper `{name}_epilogue(acc, <inputs>)` returning `spec.epilogue.expr`; each input is
loaded per its kind ("col" [N], "row" [M], "full" [M, N], all broadcast over the batch unless given per batch;
"scalar": a Python float argument), converted to fp32 and passed by name. The launcher is
`{name}(a, b, *epilogue_inputs)` with the inputs in the order of `spec.epilogue.inputs`.
"""
from __future__ import annotations

import ast
import dataclasses
import textwrap
from typing import Any

from ..core.target import H200
from ._common import RESERVED_NAMES, usable_name
from .base import DTYPE_BYTES, SHARED_LIMIT, Epilogue, Rendered, grid_space

name = "gemm"
template_version = 1  # see base.Family

IN_DTYPES = ("float32", "bfloat16", "float16")
OUT_DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("ieee", "tf32", "tf32x3")  # tf32x3: three tf32 products, near-fp32 accuracy on tensor cores
KINDS = ("row", "col", "full", "scalar")
NUM_SMS = H200.sms  # a config may override it with "NUM_SMS"
REDUCE_BM, REDUCE_BN = 32, 64  # tile of the split-K reduction kernel

# Register budget of the accumulator, in bytes per thread (128 fp32 values, half of the 255-register file).
ACC_BYTES_PER_THREAD = 512
# The fp32 "ieee" dot runs on FMA units with both operands held in registers: keep tiles modest.
IEEE_MAX_BK = 32
IEEE_ACC_BYTES_PER_THREAD = 256
X3_ACC_BYTES_PER_THREAD = 256
# Operand tiles: where Triton cannot prove a stride a multiple of 16 elements (awkward shapes such as K = 200), the K
# loop's loads are not vectorised and stage through registers with a pointer per element; an A (BM x BK) or B
# (BK x BN) tile of 128 or more elements per thread then spills (measured on sm_90: experiments/spill_study.py,
# results/kernels/spills.md). The check's reason starts with SPILL_RULE_PREFIX (the study samples the space without it).
OPERAND_ELEMS_PER_THREAD = 128
SPILL_RULE_PREFIX = "operand tile"


@dataclasses.dataclass(frozen=True)
class GemmSpec:
    in_dtype: str                 # dtype of A and B: float32 | bfloat16 | float16
    out_dtype: str                # dtype of C
    batched: bool = False         # [B, M, K] x [B, K, N] (batch stride 0 broadcasts)
    precision: str = "ieee"       # fp32 inputs: "ieee" (fp32-accurate), "tf32", "tf32x3"; ignored for 16-bit inputs
    epilogue: Epilogue | None = None
    # the whole output is one element: split-K is refused, its reduce kernel does not compile there
    # (results/gpu_tests_h200_session13/README.md)
    single_output: bool = False
    # the split-K factor the problem's shape asks for (`split_k_for`): a few output tiles over a long K leave most
    # SMs idle (256x256 output, K = 524288: 4 CTAs on 132 SMs), so the default splits K and the space reaches further
    split_k_hint: int = 1
    # the epilogue zeroes the output outside a band (triu/tril of a product): ("upper", d) keeps col - row >= d,
    # ("lower", d) keeps col - row <= d. A tile wholly outside it skips its K loop: triu of a square product then
    # computes about half the tiles.
    band: tuple[str, int] | None = None


MAX_SPLIT_K = 64
MIN_SLABS_PER_SPLIT = 32           # each split still streams at least this many BK slabs: the partial sums pay off


def split_k_for(spec: GemmSpec, batch: int, m: int, n: int, k: int) -> int:
    """The power-of-two split of K that brings the default tile's CTA count near two waves of the H200's SMs, when
    the output alone gives less than one wave; 1 when it fills the machine, K is short or the output is one
    element. The fp32 workspace [SPLIT_K, B, M, N] stays small: at most two waves of default tiles (< 20 MB)."""
    if spec.single_output:
        return 1
    d = default(spec)
    tiles = batch * -(-m // d["BM"]) * -(-n // d["BN"])
    slabs = -(-k // d["BK"])
    split = 1
    while (split * 2 <= MAX_SPLIT_K and tiles * split * 2 <= 2 * NUM_SMS
           and slabs // (split * 2) >= MIN_SLABS_PER_SPLIT):
        split *= 2
    return split if tiles < NUM_SMS else 1


def space(spec: GemmSpec) -> list[dict[str, Any]]:
    splits = {1, 2, 4}
    if spec.split_k_hint > 4:
        splits |= {spec.split_k_hint // 2, spec.split_k_hint, min(MAX_SPLIT_K, spec.split_k_hint * 2)}
    return grid_space(BM=(16, 32, 64, 128, 256), BN=(16, 32, 64, 128, 256), BK=(32, 64, 128), GROUP_M=(1, 8),
                      num_warps=(4, 8), num_stages=(2, 3, 4, 5), SPLIT_K=tuple(sorted(splits)),
                      PERSISTENT=(False, True))


def default(spec: GemmSpec) -> dict[str, Any]:
    base = dict(GROUP_M=8, SPLIT_K=1 if spec.single_output else spec.split_k_hint, PERSISTENT=False)
    if spec.in_dtype != "float32":
        return dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3, **base)
    if spec.precision == "ieee":
        return dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3, **base)
    return dict(BM=128, BN=128, BK=32, num_warps=8, num_stages=3, **base)


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


def check(spec: GemmSpec, config: dict[str, Any]) -> str | None:
    if spec.in_dtype not in IN_DTYPES:
        return f"input dtype {spec.in_dtype} unsupported (one of {IN_DTYPES})"
    if spec.out_dtype not in OUT_DTYPES:
        return f"output dtype {spec.out_dtype} unsupported (one of {OUT_DTYPES})"
    if spec.precision not in PRECISIONS:
        return f"precision {spec.precision!r} unknown (one of {PRECISIONS})"
    why = _epilogue_problem(spec.epilogue)
    if why:
        return why
    if spec.band is not None and (spec.band[0] not in ("upper", "lower") or spec.epilogue is None):
        return f"band {spec.band!r}: ('upper' | 'lower', diagonal), with the epilogue that zeroes outside it"
    bm, bn, bk = config["BM"], config["BN"], config["BK"]
    warps, stages, split = config["num_warps"], config["num_stages"], config["SPLIT_K"]
    if any(t < 16 or t % 16 for t in (bm, bn, bk)):
        return f"tile {bm}x{bn}x{bk}: tl.dot needs every tile size a multiple of 16"
    if any(t & (t - 1) for t in (bm, bn, bk)):
        return f"tile {bm}x{bn}x{bk}: block sizes must be powers of two"
    if warps not in (1, 2, 4, 8, 16) or stages < 1 or split < 1 or config["GROUP_M"] < 1:
        return "num_warps must be a power of two up to 16, num_stages, SPLIT_K and GROUP_M at least 1"
    if split > 1 and config["PERSISTENT"]:
        return "SPLIT_K > 1 is not combined with the persistent variant"
    if split > 1 and spec.single_output:
        return "SPLIT_K > 1 on a one-element output: nothing to split over, and its reduce kernel does not compile"
    nbytes = DTYPE_BYTES[spec.in_dtype]
    x3 = spec.in_dtype == "float32" and spec.precision == "tf32x3"
    # Pipeline buffers (tf32x3 keeps split operands too: up to 1.3x, measured), and the fp32 accumulator tile that
    # the store's layout conversion may stage through shared memory (the buffers are reused for it).
    pipeline = int((bm * bk + bk * bn) * nbytes * stages * (1.3 if x3 else 1.0))
    if pipeline > SHARED_LIMIT:
        return f"shared memory {pipeline // 1024} KB for {stages} stages of {bm}x{bk} + {bk}x{bn} tiles > " \
               f"{SHARED_LIMIT // 1024} KB"
    if bm * bn * 4 > SHARED_LIMIT:
        return f"shared memory {bm * bn * 4 // 1024} KB for the {bm}x{bn} fp32 accumulator's layout conversion " \
               f"before the store > {SHARED_LIMIT // 1024} KB"
    threads = warps * 32
    acc = bm * bn * 4 // threads
    if acc > ACC_BYTES_PER_THREAD:
        return f"accumulator {bm}x{bn} fp32 needs {acc} bytes per thread over {warps} warps " \
               f"(> {ACC_BYTES_PER_THREAD}: register spills)"
    if bm * bn < threads * 8:
        return f"tile {bm}x{bn} gives fewer than 8 outputs per thread with {warps} warps (wasted warps)"
    if spec.in_dtype == "float32" and bk > 64 and stages > 3:
        return "fp32 inputs with BK > 64 and more than 3 stages: too much shared memory traffic per stage"
    if x3:  # three tf32 products on hi/lo splits of both operands: about twice the operand registers
        if bk > 64 or (bm < 64 and bk > 32):
            return f"fp32 tf32x3 dot: BK {bk} spills (BK <= 64, and <= 32 when BM < 64)"
        if acc > X3_ACC_BYTES_PER_THREAD:
            return f"fp32 tf32x3 dot: accumulator {acc} bytes per thread > {X3_ACC_BYTES_PER_THREAD} " \
                   "(the split operands also live in registers)"
    if spec.in_dtype == "float32" and spec.precision == "ieee":
        if bk > IEEE_MAX_BK:
            return f"fp32 ieee dot runs on FMA units with operands in registers: BK {bk} > {IEEE_MAX_BK} spills"
        if acc > IEEE_ACC_BYTES_PER_THREAD:
            return f"fp32 ieee dot: accumulator {acc} bytes per thread > {IEEE_ACC_BYTES_PER_THREAD} " \
                   "(operands also live in registers)"
    operand = max(bm * bk, bk * bn) // threads
    if operand >= OPERAND_ELEMS_PER_THREAD:  # keep last: SPILL_RULE_PREFIX
        return f"operand tile {bm}x{bk} / {bk}x{bn} has {operand} elements per thread over {warps} warps " \
               f"(>= {OPERAND_ELEMS_PER_THREAD}: its loads stage through registers and spill at unaligned shapes)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Rendering

def _inputs(spec: GemmSpec):
    return spec.epilogue.inputs if spec.epilogue is not None else ()


def _kernel_params(spec: GemmSpec) -> str:
    """Kernel parameters of the epilogue inputs: pointer and (batch, row/col) strides, or the scalar value."""
    out = []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        out += {"col": [n, f"{n}_sb", f"{n}_sn"], "row": [n, f"{n}_sb", f"{n}_sm"],
                "full": [n, f"{n}_sb", f"{n}_sm", f"{n}_sn"], "scalar": [n]}[i.kind]
    return "".join(p + ", " for p in out)


def _epilogue_code(spec: GemmSpec, name: str) -> str:
    """Lines (no indent) that load the epilogue inputs for tile rows rm, columns rn, batch bz and compute `out`."""
    lines, args = [], []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        if i.kind == "scalar":
            lines.append(f"{n}_v = {n}  # a Python float argument: fp32 in the kernel")
        elif i.kind == "col":
            lines.append(f"{n}_v = tl.load({n} + bz.to(tl.int64) * {n}_sb + rn * {n}_sn, mask=rn < N, "
                         f"other=0.0).to(tl.float32)[None, :]")
        elif i.kind == "row":
            lines.append(f"{n}_v = tl.load({n} + bz.to(tl.int64) * {n}_sb + rm * {n}_sm, mask=rm < M, "
                         f"other=0.0).to(tl.float32)[:, None]")
        else:
            lines.append(f"{n}_v = tl.load({n} + bz.to(tl.int64) * {n}_sb + rm[:, None] * {n}_sm + rn[None, :] * "
                         f"{n}_sn, mask=mask, other=0.0).to(tl.float32)")
        args.append(f"{n}_v")
    if spec.epilogue is None or spec.epilogue.is_identity:
        lines.append("out = acc")
    else:
        lines.append(f"out = {name}_epilogue(acc{''.join(', ' + a for a in args)})")
    return "\n".join(lines)


def _dot_precision(spec: GemmSpec) -> str:
    return spec.precision if spec.in_dtype == "float32" else "tf32"


def _k_loop(spec: GemmSpec) -> tuple[str, str]:
    """Lines before the K loop and the loop's end: K, or (a band spec) 0 for a tile wholly outside the kept band,
    whose product the epilogue would zero anyway. Without a band the text is the one measured before bands."""
    if spec.band is None:
        return "", "K"
    side, d = spec.band
    test = f"(pn * BN + BN - 1) - pm * BM < {d}" if side == "upper" else f"pn * BN - (pm * BM + BM - 1) > {d}"
    pre = f"k_end = K\nif {test}:  # the whole tile lies outside the kept band: nothing to multiply\n    k_end = 0\n"
    return pre, "k_end"


def render(spec: GemmSpec, config: dict[str, Any], name: str) -> Rendered:
    split, persistent = config["SPLIT_K"], config["PERSISTENT"]
    prec = _dot_precision(spec)
    k_pre, k_end = _k_loop(spec)
    ep_params = _kernel_params(spec)
    ep_code = _epilogue_code(spec, name)
    kernels = []
    if spec.epilogue is not None and not spec.epilogue.is_identity:
        ins = "".join(", " + i.name for i in _inputs(spec))
        kernels.append(f"@triton.jit\ndef {name}_epilogue(acc{ins}):\n    return {spec.epilogue.expr}\n")

    tile_order = textwrap.dedent("""\
        grid_m = tl.cdiv(M, BM)
        grid_n = tl.cdiv(N, BN)
        group = GROUP_M * grid_n
        first_m = (tile // group) * GROUP_M
        size_m = tl.minimum(grid_m - first_m, GROUP_M)
        pm = first_m + (tile % group) % size_m
        pn = (tile % group) // size_m
    """)
    body = textwrap.dedent("""\
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        if INT64:
            rm = rm.to(tl.int64)
            rn = rn.to(tl.int64)
        rk = tl.arange(0, BK)
        am = rm % M  # rows/columns past the edge wrap onto valid ones: loads need no mask, the store drops them
        bn = rn % N
        a = a_ptr + bz.to(tl.int64) * s_ab + am[:, None] * s_am + (kz * BK + rk)[None, :] * s_ak
        b = b_ptr + bz.to(tl.int64) * s_bb + (kz * BK + rk)[:, None] * s_bk + bn[None, :] * s_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    """) + k_pre + textwrap.dedent(f"""\
        for k in range(kz * BK, {k_end}, BK * SPLIT_K):
            if EVEN_K:
                x = tl.load(a)
                y = tl.load(b)
            else:
                x = tl.load(a, mask=rk[None, :] < K - k, other=0.0)
                y = tl.load(b, mask=rk[:, None] < K - k, other=0.0)
            acc = tl.dot(x, y, acc, input_precision="{prec}")
            a += BK * SPLIT_K * s_ak
            b += BK * SPLIT_K * s_bk
        mask = (rm[:, None] < M) & (rn[None, :] < N)
    """)
    if split == 1:
        body += ep_code + "\n" + textwrap.dedent("""\
            c = c_ptr + bz.to(tl.int64) * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn
            tl.store(c, out.to(c_ptr.dtype.element_ty), mask=mask)
        """)
    else:
        body += textwrap.dedent("""\
            w = c_ptr + kz.to(tl.int64) * plane + bz.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :]
            tl.store(w, acc, mask=mask)  # fp32 partial sum; the reduction kernel applies the epilogue
        """)

    ep_line = ep_params.rstrip() + "\n        " if ep_params and split == 1 else ""
    params = (f"a_ptr, b_ptr, c_ptr, {ep_line}"
              "M, N, K, NB, plane, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn,\n"
              "        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, "
              "GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr,\n        EVEN_K: tl.constexpr, INT64: tl.constexpr")
    if persistent:
        kernel = (f"@triton.jit\ndef {name}_kernel(\n        {params}, NUM_SMS: tl.constexpr):\n"
                  "    # persistent: NUM_SMS programs (fewer when there are fewer tiles) walk the tiles of all "
                  "batches\n"
                  "    kz = 0\n"
                  "    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)\n"
                  "    for t in range(tl.program_id(0), tiles * NB, NUM_SMS):\n"
                  "        bz = t // tiles\n"
                  "        tile = t % tiles\n"
                  + textwrap.indent(tile_order + body, "        "))
    else:
        kernel = (f"@triton.jit\ndef {name}_kernel(\n        {params}):\n"
                  "    tile = tl.program_id(0)\n"
                  "    kz = tl.program_id(1)  # split-K slice: slabs kz, kz + SPLIT_K, ...\n"
                  "    bz = tl.program_id(2)  # batch\n"
                  + textwrap.indent(tile_order + body, "    "))
    kernels.append(kernel)

    if split > 1:
        reduce = (f"@triton.jit\ndef {name}_reduce(\n        w_ptr, c_ptr, {ep_params}M, N, plane, s_cb, s_cm, s_cn,\n"
                  "        BM: tl.constexpr, BN: tl.constexpr, SPLIT_K: tl.constexpr, INT64: tl.constexpr):\n"
                  "    # sum the SPLIT_K fp32 partial products, then apply the epilogue once\n"
                  + textwrap.indent(textwrap.dedent("""\
                      pid = tl.program_id(0)
                      bz = tl.program_id(1)
                      grid_n = tl.cdiv(N, BN)
                      rm = (pid // grid_n) * BM + tl.arange(0, BM)
                      rn = (pid % grid_n) * BN + tl.arange(0, BN)
                      if INT64:
                          rm = rm.to(tl.int64)
                          rn = rn.to(tl.int64)
                      mask = (rm[:, None] < M) & (rn[None, :] < N)
                      w = w_ptr + bz.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :]
                      acc = tl.zeros((BM, BN), dtype=tl.float32)
                      for z in tl.static_range(SPLIT_K):
                          acc += tl.load(w + z * plane.to(tl.int64), mask=mask, other=0.0)  # > 2**31 in all
                  """) + ep_code + "\n" + textwrap.dedent("""\
                      c = c_ptr + bz.to(tl.int64) * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn
                      tl.store(c, out.to(c_ptr.dtype.element_ty), mask=mask)
                  """), "    "))
        kernels.append(reduce)

    return Rendered(kernel_src="\n\n".join(kernels), launcher_src=_launcher(spec, config, name))


def _launcher(spec: GemmSpec, config: dict[str, Any], name: str) -> str:
    bm, bn, bk, split = config["BM"], config["BN"], config["BK"], config["SPLIT_K"]
    out_dt = "torch." + spec.out_dtype
    ins = _inputs(spec)
    lines = [f"def {name}(a, b, *epilogue_inputs):"]
    if spec.batched:
        lines += [
            "    if a.dim() == 2:",
            "        a = a.unsqueeze(0)",
            "    if b.dim() == 2:",
            "        b = b.unsqueeze(0)",
            "    NB = max(a.shape[0], b.shape[0])",
            "    M, K = a.shape[1], a.shape[2]",
            "    N = b.shape[2]",
            "    assert b.shape[1] == K and a.shape[0] in (1, NB) and b.shape[0] in (1, NB), (a.shape, b.shape)",
            "    s_ab = a.stride(0) if a.shape[0] > 1 else 0",
            "    s_bb = b.stride(0) if b.shape[0] > 1 else 0",
            f"    c = torch.empty((NB, M, N), device=a.device, dtype={out_dt})",
            "    s_cb, s_am, s_ak, s_bk, s_bn = c.stride(0), a.stride(1), a.stride(2), b.stride(1), b.stride(2)",
        ]
        lead = "NB, "
    else:
        lines += [
            "    M, K = a.shape",
            "    N = b.shape[1]",
            "    assert b.shape[0] == K, (a.shape, b.shape)",
            "    NB, s_ab, s_bb, s_cb = 1, 0, 0, 0",
            f"    c = torch.empty((M, N), device=a.device, dtype={out_dt})",
            "    s_am, s_ak, s_bk, s_bn = a.stride(0), a.stride(1), b.stride(0), b.stride(1)",
        ]
        lead = ""
    lines += [
        "    s_cm, s_cn = c.stride(-2), c.stride(-1)",
        "    if c.numel() == 0:",
        "        return c",
        f"    assert len(epilogue_inputs) == {len(ins)}, 'expected {len(ins)} epilogue input(s)'",
    ]
    # Within one matrix, offsets are int32 unless some tensor spans 2**31 elements or more (batch offsets are int64).
    spans = ["(M - 1) * abs(s_am) + (K - 1) * abs(s_ak)", "(K - 1) * abs(s_bk) + (N - 1) * abs(s_bn)",
             "(M - 1) * abs(s_cm) + (N - 1) * abs(s_cn)", "M * N"]
    args = []
    for j, i in enumerate(ins):
        v = f"e{j}"
        if i.kind == "scalar":
            lines.append(f"    {v} = float(epilogue_inputs[{j}])")
            args.append(v)
            continue
        shape = {"col": "N", "row": "M", "full": "M, N"}[i.kind]
        lines.append(f"    {v} = epilogue_inputs[{j}].expand({lead}{shape})")
        sb = f"{v}.stride(0)" if spec.batched else "0"
        if i.kind == "full":
            args += [v, sb, f"{v}.stride(-2)", f"{v}.stride(-1)"]
            spans.append(f"(M - 1) * abs({v}.stride(-2)) + (N - 1) * abs({v}.stride(-1))")
        else:
            args += [v, sb, f"{v}.stride(-1)"]
            spans.append(f"({'N' if i.kind == 'col' else 'M'} - 1) * abs({v}.stride(-1))")
    ep_args = "".join(x + ", " for x in args)
    lines.append(f"    INT64 = max({', '.join(spans)}) >= 2**31")
    lines.append(f"    EVEN_K = K % {bk} == 0")
    meta = (f"BM={bm}, BN={bn}, BK={bk}, GROUP_M={config['GROUP_M']}, SPLIT_K={split}, EVEN_K=EVEN_K, INT64=INT64, "
            f"num_warps={config['num_warps']}, num_stages={config['num_stages']}")
    tiles = f"triton.cdiv(M, {bm}) * triton.cdiv(N, {bn})"
    if config["PERSISTENT"]:
        sms = config.get("NUM_SMS", NUM_SMS)
        lines += [
            f"    grid = (min({tiles} * NB, {sms}),)",
            f"    {name}_kernel[grid](a, b, c, {ep_args}M, N, K, NB, 0, s_ab, s_am, s_ak, s_bb, s_bk, s_bn,",
            f"        s_cb, s_cm, s_cn, {meta}, NUM_SMS={sms})",
        ]
    elif split == 1:
        lines += [
            f"    grid = ({tiles}, 1, NB)",
            f"    {name}_kernel[grid](a, b, c, {ep_args}M, N, K, NB, 0, s_ab, s_am, s_ak, s_bb, s_bk, s_bn,",
            f"        s_cb, s_cm, s_cn, {meta})",
        ]
    else:
        lines += [
            f"    w = torch.empty(({split}, NB, M, N), device=a.device, dtype=torch.float32)",
            "    plane = NB * M * N",
            f"    grid = ({tiles}, {split}, NB)",
            f"    {name}_kernel[grid](a, b, w, M, N, K, NB, plane, s_ab, s_am, s_ak, s_bb, s_bk, s_bn,",
            f"        0, N, 1, {meta})",
            f"    {name}_reduce[(triton.cdiv(M, {REDUCE_BM}) * triton.cdiv(N, {REDUCE_BN}), NB)](",
            f"        w, c, {ep_args}M, N, plane, s_cb, s_cm, s_cn,",
            f"        BM={REDUCE_BM}, BN={REDUCE_BN}, SPLIT_K={split}, INT64=INT64, num_warps=4)",
        ]
    lines.append("    return c")
    return "\n".join(lines) + "\n"

