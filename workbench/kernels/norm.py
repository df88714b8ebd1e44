"""Normalisations over grouped statistics (the "norm" family): layer norm over several trailing dims, group norm,
instance norm, batch norm (training: batch statistics and the running-stat update; eval: running statistics) and the
L1 / L2 / Frobenius normalisations x / ||x||.

x (contiguous) is viewed as [outer, groups, inner]. A *slice* is the set of elements one statistic covers:
- `span_outer=False`: one slice per (outer, group), its `inner` elements contiguous (layer / group / instance norm,
  L-norms over trailing dims, a norm over the whole tensor with outer = groups = 1);
- `span_outer=True`: one slice per group, spanning every outer index (batch norm: per channel over N x spatial).
Element k of a slice (k < slice length L) sits at outer o = k // inner, position i = k % inner in its group. Each
group holds `cpg` channels of inner // cpg elements each; channel = group * cpg + i // (inner // cpg) indexes the
per-channel weight / bias / running statistics (layer norm's per-element affine: cpg = inner).

Statistics (`stat`): "moments" (mean and biased variance, merged chunk by chunk with Chan's parallel Welford
update), y = (x - mean) * rsqrt(var + eps); "sumsq" / "sumabs": d = sum(x^2) or sum(|x|) times `denom_scale`
(1 or 1/L for a mean), sqrt for sumsq, clamped to eps below when `clamp`, y = x / d; "given": mean and var are the
running statistics (eval-mode batch norm), so the kernel is elementwise. Then y * weight[ch] + bias[ch], then the
optional `epilogue` (an `Epilogue` over `acc` and inputs of kind "scalar", "full" (x's shape, contiguous) or
"channel" (one value per channel)). Training batch norm (`momentum` set) also updates the running buffers in place:
running_mean <- (1 - m) running_mean + m mean, running_var <- (1 - m) running_var + m var * L / (L - 1).

Strategies (config "strategy"):
- "single": the slice (L <= BLOCK = next_power_of_2(L)) stays in registers: one read, one write per element;
- "loop": one program per slice, a statistics pass over BLOCK chunks then a normalising pass (two reads);
- "split": for long slices and few of them: a partial-statistics kernel over chunks of BLOCK x ITERS elements
  (grid slices x chunks), a finalising kernel per slice that merges the partials (and updates running stats), and a
  normalising kernel over the same chunks. "given" statistics use only the normalising kernel.
Launcher arguments, in order: x, weight (has_weight), bias (has_bias), running_mean and running_var ("given" or
momentum set), then the epilogue inputs. All arithmetic is fp32; the output has x's shape and dtype.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..core.target import H200
from ._common import RESERVED_NAMES, next_pow2, register_budget, threads_check, usable_name
from .base import Epilogue, Rendered, grid_space

STATS = ("moments", "sumsq", "sumabs", "given")
FLOAT_DTYPES = ("float32", "bfloat16", "float16")
EPILOGUE_KINDS = ("scalar", "full", "channel")
WARPS = (1, 2, 4, 8, 16)
BLOCKS = (256, 512, 1024, 2048, 4096, 8192)
ITERS = (1, 2, 4, 8, 16, 32, 64)
# the single strategy keeps the slice, its centred copy and the output alive: the row family's calibration for
# layer norm (64 fp32 elements a thread fit in 255 registers on sm_90, 128 spill) applies
ELEMS_PER_THREAD = 64
SINGLE_CAP = 16384
MAX_GRID_Y = 65535  # CUDA's limit on the second grid dimension (the split strategy's chunks)
PARTIAL_BLOCK_CAP = 1024  # partials merged per step of the finalising loop
MAX_INDEX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class NormSpec:
    stat: str
    outer: int
    groups: int
    inner: int
    dtype: str
    span_outer: bool = False
    cpg: int = 1
    eps: float = 1e-5
    has_weight: bool = False
    has_bias: bool = False
    denom_scale: float = 1.0
    clamp: bool = False
    momentum: float | None = None
    epilogue: Epilogue | None = None

    @property
    def slices(self) -> int:
        return self.groups if self.span_outer else self.outer * self.groups

    @property
    def length(self) -> int:
        return self.outer * self.inner if self.span_outer else self.inner

    @property
    def channels(self) -> int:
        return self.groups * self.cpg

    @property
    def has_running(self) -> bool:
        return self.stat == "given" or self.momentum is not None


def _spec_problem(spec: NormSpec) -> str | None:
    if spec.stat not in STATS:
        return f"unknown statistic {spec.stat!r}; supported: {STATS}"
    if spec.dtype not in FLOAT_DTYPES:
        return f"dtype {spec.dtype!r} not supported; supported: {FLOAT_DTYPES}"
    if min(spec.outer, spec.groups, spec.inner, spec.cpg) < 1:
        return "outer, groups, inner and cpg must be >= 1"
    if spec.inner % spec.cpg:
        return f"inner {spec.inner} is not a multiple of cpg {spec.cpg}"
    if spec.outer * spec.groups * spec.inner > MAX_INDEX * 64:
        return "tensor too large"
    if spec.length > MAX_INDEX - max(BLOCKS) * max(ITERS):
        return f"slice length {spec.length} too long for 32-bit offsets within a slice"
    if spec.momentum is not None and (spec.stat != "moments" or not spec.span_outer or spec.cpg != 1):
        return "a running-stat update only for batch statistics (moments, span_outer, cpg 1)"
    if spec.stat == "given" and (not spec.span_outer or spec.cpg != 1):
        return "given statistics are per channel: span_outer with cpg 1"
    if spec.stat in ("sumsq", "sumabs") and (spec.has_weight or spec.has_bias):
        return "no affine for the L-norms"
    epi = spec.epilogue
    if epi is not None:
        names = [i.name for i in epi.inputs]
        if len(set(names)) != len(names):
            return f"epilogue input names repeat: {names}"
        for inp in epi.inputs:
            if not usable_name(inp.name):
                return f"epilogue input name {inp.name!r} is not usable (reserved: {sorted(RESERVED_NAMES)})"
            if inp.kind not in EPILOGUE_KINDS:
                return f"epilogue input {inp.name!r} has kind {inp.kind!r}; supported: {EPILOGUE_KINDS}"
    return None


def _regs_check(elements: int, num_warps: int) -> str | None:
    threads = 32 * num_warps
    budget = register_budget(ELEMS_PER_THREAD, num_warps)
    if elements / threads > budget:
        return (f"{elements} fp32 tile elements over {threads} threads: {elements / threads:.0f} per thread > "
                f"{budget:.0f} (registers would spill)")
    return None


class GroupedNormFamily:
    """Config: strategy ("single" | "loop" | "split"), BLOCK, ITERS (split: blocks per chunk), num_warps."""
    name = "norm"
    template_version = 1  # see base.Family

    def space(self, spec: NormSpec) -> list[dict[str, Any]]:
        single = grid_space(strategy=("single",), BLOCK=(next_pow2(spec.length),), ITERS=(1,), num_warps=WARPS)
        loop = grid_space(strategy=("loop",), BLOCK=BLOCKS, ITERS=(1,), num_warps=WARPS)
        split = grid_space(strategy=("split",), BLOCK=BLOCKS, ITERS=ITERS, num_warps=WARPS)
        return single + loop + split

    def check(self, spec: NormSpec, config: dict[str, Any]) -> str | None:
        problem = _spec_problem(spec)
        if problem:
            return problem
        strategy, block, iters, warps = config["strategy"], config["BLOCK"], config["ITERS"], config["num_warps"]
        if warps not in WARPS:
            return f"num_warps {warps} not in {WARPS}"
        if block < 1 or block & (block - 1) or iters < 1 or iters & (iters - 1):
            return f"BLOCK {block} and ITERS {iters} must be powers of two"
        full = next_pow2(spec.length)
        if spec.stat == "given" and strategy != "split":
            return "given statistics: only the normalising kernel (strategy split)"
        if strategy == "single":
            if block != full:
                return f"single: BLOCK {block} must be next_power_of_2(slice length {spec.length}) = {full}"
            if block > SINGLE_CAP:
                return f"single: slice block {block} > {SINGLE_CAP} does not fit in registers; use loop or split"
            if iters != 1:
                return "single: ITERS must be 1"
        elif strategy == "loop":
            if block >= full:
                return f"loop: BLOCK {block} covers the slice ({spec.length}); use single"
            if iters != 1:
                return "loop: ITERS must be 1"
        elif strategy == "split":
            chunks = -(-spec.length // (block * iters))
            if spec.stat != "given":
                if chunks < 2:
                    return f"split: one chunk of {block} x {iters} covers the slice ({spec.length}); use loop or single"
                if iters > 1 and block * iters // 2 >= spec.length:
                    return "split: half the chunk already covers the slice"
            if block > max(BLOCKS[0], full):
                return f"split: BLOCK {block} wider than the slice ({spec.length})"
            if chunks > MAX_GRID_Y:
                return f"split: {chunks} chunks a slice > {MAX_GRID_Y} (grid limit); use larger chunks"
        else:
            return f"unknown strategy {strategy!r}"
        return _regs_check(block, warps) or threads_check(warps, block)

    def default(self, spec: NormSpec) -> dict[str, Any]:
        length, slices = spec.length, spec.slices
        full = next_pow2(length)
        candidates = []
        if full <= 4096 and spec.stat != "given":
            candidates.append({"strategy": "single", "BLOCK": full, "ITERS": 1,
                               "num_warps": max(1, min(16, full // 256))})
        if slices >= 2 * H200.sms and spec.stat != "given":
            candidates.append({"strategy": "loop", "BLOCK": min(4096, full // 2), "ITERS": 1, "num_warps": 8})
        # split: chunks as long as possible while slices x chunks still fill ~8 waves of programs
        block = min(4096, max(BLOCKS[0], full))
        for iters in reversed(ITERS):
            if slices * -(-length // (block * iters)) >= 8 * H200.sms or iters == 1:
                candidates.append({"strategy": "split", "BLOCK": block, "ITERS": iters, "num_warps": 8})
                break
        for config in candidates + self.space(spec):
            if self.check(spec, config) is None:
                return config
        raise ValueError(f"no valid config for {spec}")

    # -- rendering

    def render(self, spec: NormSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        return Rendered(_Kernels(spec, config, name).source(), _launcher(spec, config, name))


# ------------------------------------------------------------------------------------------------ code generation

def _indent(lines: list[str], n: int = 1) -> list[str]:
    return ["    " * n + ln for ln in lines]


class _Kernels:
    def __init__(self, spec: NormSpec, config: dict[str, Any], name: str):
        self.spec, self.config, self.name = spec, config, name
        self.epi = None if spec.epilogue is None or spec.epilogue.is_identity else spec.epilogue

    # pieces shared by every kernel
    def slice_head(self) -> list[str]:
        """Per-program: the slice s, its group g, and the base offset of its first element."""
        s = self.spec
        if s.span_outer:
            return ["g = s", "base = g.to(tl.int64) * inner"]
        return ["g = s % n_groups", "base = s.to(tl.int64) * inner"]

    def offsets(self, k: str = "k") -> list[str]:
        """Addresses of slice elements k (int32 offsets within the slice) and their in-group position i."""
        if self.spec.span_outer:
            return [f"o = {k} // inner", f"i = {k} - o * inner",
                    "addr = base + o.to(tl.int64) * outer_stride + i"]
        return [f"i = {k}", "addr = base + i"]

    def channel(self) -> list[str]:
        s = self.spec
        if s.cpg == 1:
            return ["ch = g"]
        return ["ch = g * CPG + i // spatial"]

    def uses_channel(self) -> bool:
        s = self.spec
        return s.has_weight or s.has_bias or any(i.kind == "channel" for i in (self.epi.inputs if self.epi else ()))

    def load_x(self, mask: str = "mask") -> str:
        return f"x = tl.load(x_ptr + addr, mask={mask}, other=0.0).to(tl.float32)"

    def transform(self) -> list[str]:
        """The stored value from x, `a` and `b` (y_hat = (x - a) * b), then the affine and the epilogue."""
        s = self.spec
        lines = ["y = (x - a) * b" if s.stat in ("moments", "given") else "y = x * b"]
        ch_needed = self.uses_channel()
        if ch_needed:
            lines += self.channel()
        # one channel a group (cpg 1): ch is the program's scalar, loaded without a mask
        cmask = "" if s.cpg == 1 else ", mask=mask, other=0.0"
        if s.has_weight:
            lines.append(f"y = y * tl.load(w_ptr + ch{cmask}).to(tl.float32)")
        if s.has_bias:
            lines.append(f"y = y + tl.load(bias_ptr + ch{cmask}).to(tl.float32)")
        if self.epi is not None:
            expr = self.epi.expr
            for inp in self.epi.inputs:
                n = inp.name
                if inp.kind == "scalar":
                    lines.append(f"e_{n} = tl.load(e_{n}_ptr).to(tl.float32)")
                elif inp.kind == "full":
                    lines.append(f"e_{n} = tl.load(e_{n}_ptr + addr, mask=mask, other=0.0).to(tl.float32)")
                else:
                    lines.append(f"e_{n} = tl.load(e_{n}_ptr + ch{cmask}).to(tl.float32)")
                expr = re.sub(rf"(?<![\w.]){re.escape(n)}(?!\w)", f"e_{n}", expr)
            expr = re.sub(r"(?<![\w.])acc(?!\w)", "y", expr)
            lines.append(f"y = {expr}")
        lines.append("tl.store(out_ptr + addr, y.to(out_ptr.dtype.element_ty), mask=mask)")
        return lines

    def finish_stats(self, count: str) -> list[str]:
        """From the merged statistics (mean, m2 or total) to `a`, `b`: y_hat = (x - a) * b."""
        s = self.spec
        if s.stat == "moments":
            return ["a = mean", f"b = 1.0 / tl.sqrt(m2 / {count} + eps)"]
        d = "tl.sqrt(total * denom_scale)" if s.stat == "sumsq" else "total * denom_scale"
        lines = ["a = 0.0", f"d = {d}"]
        if s.clamp:
            lines.append("d = tl.maximum(d, eps)")
        return lines + ["b = 1.0 / d"]

    def running_update(self) -> list[str]:
        if self.spec.momentum is None:
            return []
        return ["rm = tl.load(rm_ptr + g).to(tl.float32)",
                "rv = tl.load(rv_ptr + g).to(tl.float32)",
                "tl.store(rm_ptr + g, ((1.0 - momentum) * rm + momentum * mean).to(rm_ptr.dtype.element_ty))",
                "tl.store(rv_ptr + g, ((1.0 - momentum) * rv + momentum * (m2 / unbias_div))"
                ".to(rv_ptr.dtype.element_ty))"]

    def chunk_stats(self) -> list[str]:
        """Statistics of the tile x (masked lanes 0): c_n, c_mean, c_m2 (moments) or c_total."""
        s = self.spec
        if s.stat == "moments":
            return ["c_n = tl.sum(mask.to(tl.float32), axis=0)",
                    "c_mean = tl.sum(x, axis=0) / tl.maximum(c_n, 1.0)",
                    "c_dev = tl.where(mask, x - c_mean, 0.0)",
                    "c_m2 = tl.sum(c_dev * c_dev, axis=0)"]
        if s.stat == "sumsq":
            return ["c_total = tl.sum(x * x, axis=0)"]
        return ["c_total = tl.sum(tl.abs(x), axis=0)"]

    @staticmethod
    def merge() -> list[str]:
        """Chan's update of the running (n, mean, m2) with a chunk's (c_n, c_mean, c_m2)."""
        return ["n_new = n + c_n",
                "delta = c_mean - mean",
                "frac = c_n / tl.maximum(n_new, 1.0)",
                "mean = mean + delta * frac",
                "m2 = m2 + c_m2 + delta * delta * n * frac",
                "n = n_new"]

    def params(self, extra: list[str]) -> str:
        s = self.spec
        ps = ["x_ptr", "out_ptr"]
        ps += ["w_ptr"] if s.has_weight else []
        ps += ["bias_ptr"] if s.has_bias else []
        ps += ["rm_ptr", "rv_ptr"] if s.has_running else []
        for inp in (self.epi.inputs if self.epi else ()):
            ps.append(f"e_{inp.name}_ptr")
        ps += extra + ["n_groups", "inner", "outer_stride", "length", "spatial", "eps", "denom_scale", "momentum",
                       "unbias_div", "BLOCK: tl.constexpr", "CPG: tl.constexpr"]
        return ", ".join(ps)

    def kernel(self, suffix: str, extra: list[str], body: list[str], extra_const: str = "") -> list[str]:
        params = self.params(extra) + (f", {extra_const}" if extra_const else "")
        return ["@triton.jit", f"def {self.name}_{suffix}({params}):"] + _indent(body) + [""]

    # the strategies
    def source(self) -> str:
        strategy = self.config["strategy"]
        if strategy == "single":
            return "\n".join(self.single())
        if strategy == "loop":
            return "\n".join(self.loop())
        return "\n".join(self.split())

    def single(self) -> list[str]:
        s = self.spec
        body = ["s = tl.program_id(0)"] + self.slice_head() + ["k = tl.arange(0, BLOCK)", "mask = k < length"]
        body += self.offsets() + [self.load_x()]
        if s.stat == "moments":
            body += ["mean = tl.sum(x, axis=0) / length",
                     "dev = tl.where(mask, x - mean, 0.0)",
                     "m2 = tl.sum(dev * dev, axis=0)"]
        else:
            body += [ln.replace("c_total", "total") for ln in self.chunk_stats()]
        body += self.finish_stats("length") + self.running_update() + self.transform()
        return self.kernel("kernel", [], body)

    def loop(self) -> list[str]:
        s = self.spec
        body = ["s = tl.program_id(0)"] + self.slice_head() + ["offs = tl.arange(0, BLOCK)"]
        if s.stat == "moments":
            body += ["n = 0.0", "mean = 0.0", "m2 = 0.0"]
            update = self.chunk_stats() + self.merge()
        else:
            body += ["acc_t = tl.zeros([BLOCK], tl.float32)"]
            update = ["acc_t += x * x" if s.stat == "sumsq" else "acc_t += tl.abs(x)"]
        body += ["for start in range(0, length, BLOCK):",
                 *_indent(["k = start + offs", "mask = k < length"] + self.offsets() + [self.load_x()] + update)]
        if s.stat != "moments":
            body.append("total = tl.sum(acc_t, axis=0)")
        body += self.finish_stats("length") + self.running_update()
        body += ["for start in range(0, length, BLOCK):",
                 *_indent(["k = start + offs", "mask = k < length"] + self.offsets() + [self.load_x()]
                          + self.transform())]
        return self.kernel("kernel", [], body)

    def chunk_walk(self) -> list[str]:
        """The chunk this program owns in the split strategy: ITERS blocks from chunk_start."""
        return ["s = tl.program_id(0)", "p = tl.program_id(1)", "n_chunks = tl.num_programs(1)"] + \
            self.slice_head() + ["offs = tl.arange(0, BLOCK)", "chunk_start = p * (BLOCK * ITERS)"]

    def split(self) -> list[str]:
        s = self.spec
        out: list[str] = []
        const = "ITERS: tl.constexpr"
        if s.stat != "given":
            # 1. partial statistics of each chunk: (n, mean, m2) or total, at [s, p] of the partial buffers
            body = self.chunk_walk()
            if s.stat == "moments":
                body += ["n = 0.0", "mean = 0.0", "m2 = 0.0"]
                update = self.chunk_stats() + self.merge()
            else:
                body += ["acc_t = tl.zeros([BLOCK], tl.float32)"]
                update = ["acc_t += x * x" if s.stat == "sumsq" else "acc_t += tl.abs(x)"]
            body += ["for it in range(ITERS):",
                     *_indent(["k = chunk_start + it * BLOCK + offs", "mask = k < length"] + self.offsets()
                              + [self.load_x()] + update),
                     "slot = s.to(tl.int64) * n_chunks + p"]
            if s.stat == "moments":
                body += ["tl.store(pn_ptr + slot, n)", "tl.store(pmean_ptr + slot, mean)",
                         "tl.store(pm2_ptr + slot, m2)"]
            else:
                body += ["tl.store(pmean_ptr + slot, tl.sum(acc_t, axis=0))"]
            out += self.kernel("partial", ["pn_ptr", "pmean_ptr", "pm2_ptr", "a_ptr", "b_ptr", "n_chunks_total"],
                               body, const)
            # 2. one program per slice merges the partials into a, b (and updates the running statistics)
            body = ["s = tl.program_id(0)"] + self.slice_head() + ["q = tl.arange(0, PBLOCK)",
                                                                   "row = s.to(tl.int64) * n_chunks_total"]
            if s.stat == "moments":
                body += ["n = 0.0", "mean = 0.0", "m2 = 0.0",
                         "for start in range(0, n_chunks_total, PBLOCK):",
                         *_indent(["qm = start + q < n_chunks_total",
                                   "pn = tl.load(pn_ptr + row + start + q, mask=qm, other=0.0)",
                                   "pmean = tl.load(pmean_ptr + row + start + q, mask=qm, other=0.0)",
                                   "pm2 = tl.load(pm2_ptr + row + start + q, mask=qm, other=0.0)",
                                   # this block's partials merged exactly: mean of means weighted by counts, and
                                   # M2 = sum M2_j + sum n_j (mean_j - mean_block)^2
                                   "c_n = tl.sum(pn, axis=0)",
                                   "c_mean = tl.sum(pn * pmean, axis=0) / tl.maximum(c_n, 1.0)",
                                   "c_dev = pmean - c_mean",
                                   "c_m2 = tl.sum(pm2 + pn * c_dev * c_dev, axis=0)"] + self.merge())]
            else:
                body += ["acc_p = tl.zeros([PBLOCK], tl.float32)",
                         "for start in range(0, n_chunks_total, PBLOCK):",
                         *_indent(["qm = start + q < n_chunks_total",
                                   "acc_p += tl.load(pmean_ptr + row + start + q, mask=qm, other=0.0)"]),
                         "total = tl.sum(acc_p, axis=0)"]
            body += self.finish_stats("length") + self.running_update()
            body += ["tl.store(a_ptr + s, a)", "tl.store(b_ptr + s, b)"]
            out += self.kernel("finalise", ["pn_ptr", "pmean_ptr", "pm2_ptr", "a_ptr", "b_ptr", "n_chunks_total"],
                               body, "PBLOCK: tl.constexpr")
        # 3. normalise each chunk with its slice's a, b
        body = self.chunk_walk()
        if s.stat == "given":
            body += ["a = tl.load(rm_ptr + g).to(tl.float32)",
                     "b = 1.0 / tl.sqrt(tl.load(rv_ptr + g).to(tl.float32) + eps)"]
        else:
            body += ["a = tl.load(a_ptr + s)", "b = tl.load(b_ptr + s)"]
        body += ["for it in range(ITERS):",
                 *_indent(["k = chunk_start + it * BLOCK + offs", "mask = k < length"] + self.offsets()
                          + [self.load_x()] + self.transform())]
        out += self.kernel("apply", ["pn_ptr", "pmean_ptr", "pm2_ptr", "a_ptr", "b_ptr", "n_chunks_total"],
                           body, const)
        return out


def _launcher(spec: NormSpec, config: dict[str, Any], name: str) -> str:
    epi = None if spec.epilogue is None or spec.epilogue.is_identity else spec.epilogue
    params = ["x"] + (["weight"] if spec.has_weight else []) + (["bias"] if spec.has_bias else [])
    params += ["running_mean", "running_var"] if spec.has_running else []
    params += [f"e_{i.name}" for i in (epi.inputs if epi else ())]
    numel = spec.outer * spec.groups * spec.inner
    body = [f"assert x.numel() == {numel}, (tuple(x.shape), {numel})",
            "x = x.contiguous()",
            "out = torch.empty_like(x)"]
    args = ["x", "out"]
    if spec.has_weight:
        body.append("weight = weight.reshape(-1).contiguous()")
        args.append("weight")
    if spec.has_bias:
        body.append("bias = bias.reshape(-1).contiguous()")
        args.append("bias")
    if spec.has_running:
        args += ["running_mean", "running_var"]  # updated in place: the module's own buffers
    for inp in (epi.inputs if epi else ()):
        n = f"e_{inp.name}"
        if inp.kind == "scalar":
            body.append(f"{n} = torch.as_tensor({n}, dtype=torch.float32, device=x.device).reshape(1)")
        elif inp.kind == "full":
            body.append(f"{n} = {n}.expand(x.shape).contiguous()")
        else:
            body.append(f"{n} = {n}.reshape(-1).expand({spec.channels}).contiguous()")
        args.append(n)
    length = spec.length
    consts = [f"{spec.groups}", f"{spec.inner}", f"{spec.groups * spec.inner}", f"{length}",
              f"{spec.inner // spec.cpg}", repr(float(spec.eps)), repr(float(spec.denom_scale)),
              repr(float(spec.momentum or 0.0)), repr(float(max(length - 1, 1)))]
    block, warps, strategy = config["BLOCK"], config["num_warps"], config["strategy"]
    kw = [f"BLOCK={block}", f"CPG={spec.cpg}"]
    slices = spec.slices
    if strategy in ("single", "loop"):
        body.append(f"{name}_kernel[({slices},)]({', '.join(args + consts + kw)}, num_warps={warps})")
    else:
        iters = config["ITERS"]
        chunks = -(-length // (block * iters))
        body += [f"a = torch.empty(({slices},), dtype=torch.float32, device=x.device)",
                 f"b = torch.empty(({slices},), dtype=torch.float32, device=x.device)"]
        if spec.stat == "moments":
            body += [f"pn = torch.empty(({slices}, {chunks}), dtype=torch.float32, device=x.device)",
                     "pmean = torch.empty_like(pn)",
                     "pm2 = torch.empty_like(pn)"]
        elif spec.stat != "given":
            body += [f"pmean = torch.empty(({slices}, {chunks}), dtype=torch.float32, device=x.device)",
                     "pn = pm2 = pmean"]
        else:
            body.append("pn = pmean = pm2 = a")
        split_args = args + ["pn", "pmean", "pm2", "a", "b", str(chunks)] + consts
        if spec.stat != "given":
            pblock = min(PARTIAL_BLOCK_CAP, next_pow2(chunks))
            body += [f"{name}_partial[({slices}, {chunks})]({', '.join(split_args + kw)}, ITERS={iters}, "
                     f"num_warps={warps})",
                     f"{name}_finalise[({slices},)]({', '.join(split_args + kw)}, PBLOCK={pblock}, "
                     f"num_warps={max(1, min(8, pblock // 128))})"]
        body.append(f"{name}_apply[({slices}, {chunks})]({', '.join(split_args + kw)}, ITERS={iters}, "
                    f"num_warps={warps})")
    body.append("return out")
    return f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in body)


GROUPED_NORM = GroupedNormFamily()
