"""Attention family: FlashAttention-style forward, o = softmax(q k^T * scale [+ causal mask]) v, for [B, H, S, D].

One program per (BLOCK_M query rows, batch * head). It keeps its q tile in registers and walks the key/value blocks
of BLOCK_N with an online softmax in fp32 (exp2, with log2(e) folded into the scale): running row maximum m, running
sum l, and the output accumulator rescaled by exp2(m_old - m_new) before each block's p @ v is added.

The key range splits in two loops: blocks every row of the tile sees in full (no masks at all), then the remaining
blocks with masks (keys past S_k, and for causal the keys after the row). Causal masking is top-left aligned (key j is
visible to query i when j <= i), as torch's `is_causal`; with causal attention, blocks past the tile's last row are
never visited. A row whose keys are all masked so far keeps m = -inf, and the update uses 0 in its place so no NaN
appears; a row with no visible key at all (only possible with S_k = 0) gives 0.

The launcher is `{name}(q, k, v)` for q [B, H, S_q, D] and k, v [B, H, S_k, D] of any strides; it returns o
[B, H, S_q, D] (contiguous) in the spec's dtype.
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from typing import Any

from .base import DTYPE_BYTES, SHARED_LIMIT, Rendered, grid_space

name = "attention"
template_version = 1  # see base.Family

DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("ieee", "tf32", "tf32x3")
LOG2E = 1.4426950408889634
# Registers per thread for the fp32 accumulator [BLOCK_M, D], the scores [BLOCK_M, BLOCK_N] (fp32 and as p in the
# input dtype) and the q tile: 768 bytes is 192 of the 255 registers a thread can hold.
REG_BYTES_PER_THREAD = 768
# fp32 tf32x3: the accumulator [BLOCK_M, D] plus the scores [BLOCK_M, BLOCK_N] and the k/v block [BLOCK_N, D], the last
# two twice (hi and lo tf32 parts), in fp32 values per thread; 160 or more spills (measured on sm_90 at D 32 and 64:
# experiments/spill_study.py, results/kernels/spills.md). The check's reason starts with SPILL_RULE_PREFIX.
X3_VALUES_PER_THREAD = 160
SPILL_RULE_PREFIX = "fp32 tf32x3 split operands"


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    head_dim: int                 # D: a power of two, 16..256
    dtype: str                    # float32 | bfloat16 | float16, of q, k, v and o
    causal: bool
    scale: float | None = None    # None: 1 / sqrt(head_dim)
    precision: str = "tf32x3"     # fp32 only: input precision of both dots ("tf32x3": near-fp32 accuracy on
    #                               tensor cores; "ieee": FMA units, spills beyond head_dim 32; "tf32")


def space(spec: AttentionSpec) -> list[dict[str, Any]]:
    return grid_space(BLOCK_M=(32, 64, 128), BLOCK_N=(32, 64, 128), num_warps=(4, 8), num_stages=(1, 2, 3, 4))


# Defaults: the first valid of these. 16-bit: 64x64, 4 warps, 3 stages was the fastest of those tried on an H200
# (0.8-0.9x of torch's flash SDPA at S=4096); fp32: 64x32 keeps tf32x3's split operands out of local memory.
PREFERRED = {
    "16-bit": (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
               dict(BLOCK_M=64, BLOCK_N=32, num_warps=8, num_stages=2)),
    "float32": (dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3),
                dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)),
}


def default(spec: AttentionSpec) -> dict[str, Any]:
    """The first valid preferred configuration, else the first valid one of the space, else the first preferred
    one (which `check` then rejects, saying why: no configuration suits the spec)."""
    preferred = PREFERRED["float32" if spec.dtype == "float32" else "16-bit"]
    valid = (c for c in (*preferred, *space(spec)) if check(spec, c) is None)
    return dict(next(valid, preferred[0]))


def check(spec: AttentionSpec, config: dict[str, Any]) -> str | None:
    d = spec.head_dim
    if spec.dtype not in DTYPES:
        return f"dtype {spec.dtype} unsupported (one of {DTYPES})"
    if spec.precision not in PRECISIONS:
        return f"precision {spec.precision!r} unknown (one of {PRECISIONS})"
    if d < 16 or d > 256 or d & (d - 1):
        return f"head_dim {d} is not a power of two in 16..256 (tl.dot and tl.arange need it)"
    if spec.scale is not None and not math.isfinite(spec.scale):
        return "scale is not finite"
    bm, bn, warps, stages = config["BLOCK_M"], config["BLOCK_N"], config["num_warps"], config["num_stages"]
    if any(t < 16 or t & (t - 1) for t in (bm, bn)):
        return f"blocks {bm}x{bn}: powers of two of at least 16 needed"
    if warps not in (1, 2, 4, 8, 16) or stages < 1:
        return "num_warps must be a power of two up to 16 and num_stages at least 1"
    nbytes = DTYPE_BYTES[spec.dtype]
    prec = spec.precision if spec.dtype == "float32" else None
    if prec == "ieee" and d > 32:
        return f"fp32 ieee dots run on FMA units with operands in registers: head_dim {d} > 32 spills " \
               "(use precision tf32x3)"
    if prec == "tf32x3" and (d > 64 or bn > 64):
        return f"fp32 tf32x3 dots keep hi/lo splits of q, k and p in registers: head_dim {d} > 64 or " \
               f"BLOCK_N {bn} > 64 spills"
    # q tile and `stages` k and v blocks; fp32 with split (tf32x3) or FMA (ieee) operands needs more (measured)
    smem = int((bm * d + 2 * bn * d * stages) * nbytes * {"tf32x3": 1.7, "ieee": 1.35}.get(prec, 1.0))
    if smem > SHARED_LIMIT:
        return f"shared memory {smem // 1024} KB (q tile and {stages} stages of k and v blocks) > " \
               f"{SHARED_LIMIT // 1024} KB"
    threads = warps * 32
    if prec == "ieee" and bm * bn > threads * 32:
        return f"fp32 ieee dots on FMA units: score tile {bm}x{bn} is over 32 values per thread with {warps} warps " \
               "(spills)"
    regs = (bm * d * 4 + bm * bn * (4 + nbytes) + bm * d * nbytes) // threads
    if regs > REG_BYTES_PER_THREAD:
        return f"about {regs} bytes of registers per thread (accumulator, scores, q) over {warps} warps " \
               f"> {REG_BYTES_PER_THREAD}: register spills"
    if bm * bn < threads * 16:
        return f"score tile {bm}x{bn} is too small for {warps} warps"
    x3_values = (bm * d + 2 * (bm * bn + bn * d)) // threads
    if prec == "tf32x3" and x3_values >= X3_VALUES_PER_THREAD:  # keep last: SPILL_RULE_PREFIX
        return f"fp32 tf32x3 split operands: accumulator, and scores and k/v block in hi and lo parts, are " \
               f"{x3_values} values per thread over {warps} warps (>= {X3_VALUES_PER_THREAD}: register spills)"
    return None


def render(spec: AttentionSpec, config: dict[str, Any], name: str) -> Rendered:
    prec = spec.precision if spec.dtype == "float32" else "tf32"
    scale = spec.scale if spec.scale is not None else 1.0 / math.sqrt(spec.head_dim)
    step = textwrap.dedent(f"""\
        kn = start_n + offs_n
        k = tl.load(k_base + kn[None, :] * s_kn + offs_d[:, None] * s_kd{{kmask}})
        qk = tl.dot(q, k, input_precision="{prec}") * qk_scale{{smask}}
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        {{msafe}}p = tl.math.exp2(qk - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + kn[:, None] * s_vn + offs_d[None, :] * s_vd{{vmask}})
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="{prec}")
        m_i = m_new
    """)
    full_step = step.format(kmask="", smask="", vmask="", msafe="m_use = m_new\n")
    masked_step = step.format(
        kmask=", mask=kn[None, :] < S_K, other=0.0",
        smask=("\nvisible = (kn[None, :] < S_K) & (kn[None, :] <= offs_m[:, None])" if spec.causal
               else "\nvisible = kn[None, :] < S_K") + "\nqk = tl.where(visible, qk, float(\"-inf\"))",
        vmask=", mask=kn[:, None] < S_K, other=0.0",
        msafe="m_use = tl.where(m_new == float(\"-inf\"), 0.0, m_new)  # a row with no visible key yet: no NaN\n")
    if spec.causal:
        bounds = textwrap.dedent("""\
            # causal: keys below the tile's first row are seen by every row; the rest up to its last row, masked
            n_full = tl.minimum(start_m * BLOCK_M, S_K) // BLOCK_N * BLOCK_N
            n_end = tl.minimum((start_m + 1) * BLOCK_M, S_K)
        """)
    else:
        bounds = textwrap.dedent("""\
            n_full = S_K // BLOCK_N * BLOCK_N  # whole key blocks: no masks
            n_end = S_K
        """)
    kernel = (
        f"@triton.jit\ndef {name}_kernel(\n"
        "        Q, K, V, O, s_qb, s_qh, s_qm, s_qd, s_kb, s_kh, s_kn, s_kd, s_vb, s_vh, s_vn, s_vd,\n"
        "        s_ob, s_oh, s_om, s_od, H, S_Q, S_K, qk_scale,\n"
        "        D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n"
        + textwrap.indent(textwrap.dedent("""\
            start_m = tl.program_id(0)
            bh = tl.program_id(1)
            b = (bh // H).to(tl.int64)
            h = (bh % H).to(tl.int64)
            offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = tl.arange(0, BLOCK_N)
            offs_d = tl.arange(0, D)
            q_base = Q + b * s_qb + h * s_qh
            k_base = K + b * s_kb + h * s_kh
            v_base = V + b * s_vb + h * s_vh
            q = tl.load(q_base + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd, mask=offs_m[:, None] < S_Q,
                        other=0.0)
            m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
            l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
            acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
        """) + bounds
            + "for start_n in range(0, n_full, BLOCK_N):\n" + textwrap.indent(full_step, "    ")
            + "for start_n in range(n_full, n_end, BLOCK_N):\n" + textwrap.indent(masked_step, "    ")
            + textwrap.dedent("""\
            l_i = tl.where(l_i == 0.0, 1.0, l_i)
            o = acc / l_i[:, None]
            o_ptrs = O + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_d[None, :] * s_od
            tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=offs_m[:, None] < S_Q)
        """), "    "))
    bm = config["BLOCK_M"]
    launcher = textwrap.dedent(f"""\
        def {name}(q, k, v):
            B, H, S_Q, D = q.shape
            S_K = k.shape[2]
            assert D == {spec.head_dim} and k.shape == (B, H, S_K, D) and v.shape == (B, H, S_K, D), \\
                (q.shape, k.shape, v.shape)
            o = torch.empty((B, H, S_Q, D), device=q.device, dtype=torch.{spec.dtype})
            if o.numel() == 0:
                return o
            grid = (triton.cdiv(S_Q, {bm}), B * H)
            {name}_kernel[grid](q, k, v, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(), H, S_Q, S_K,
                {scale * LOG2E!r}, D={spec.head_dim}, BLOCK_M={bm}, BLOCK_N={config['BLOCK_N']},
                num_warps={config['num_warps']}, num_stages={config['num_stages']})
            return o
    """)
    return Rendered(kernel_src=kernel, launcher_src=launcher)
