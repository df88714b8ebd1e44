"""Reductions: along the last dimension (row family), along dim 0 (column family) and prefix sums (scan family).

Row family (`RowSpec`, `RowReduceFamily`): x is viewed as [rows, n_cols] (`x.reshape(-1, n_cols)`, the launcher
restores the shape). One program handles ROWS_PER_PROGRAM rows. Two strategies:

- "single": the whole row (BLOCK = next_power_of_2(n_cols)) stays in registers as a [ROWS, BLOCK] tile; one read,
  one write. Valid up to BLOCK 16384 (fp32) / 32768 (16-bit).
- "loop": one row per program, walked in chunks of BLOCK. Softmax / log_softmax / logsumexp / cross-entropy keep an
  online (max, sum of exp) pair; layernorm and var merge per-chunk (mean, M2) pairs (Chan's parallel Welford, as
  accurate as two passes over the data); rmsnorm, sum, mean and max keep a [BLOCK] accumulator and reduce once at
  the end. The normalisations then make a second pass that writes the output.

All arithmetic is fp32; outputs are stored in the input dtype (argmax: int64, cross-entropy: fp32). An optional
`prologue` (an `Epilogue` over `acc`, the loaded fp32 value, and named inputs of kind "full" (x's shape), "col"
([n_cols]), "row" (one per row, x.shape[:-1]) or "scalar") is applied to every loaded element before the reduction,
e.g. softmax(x * scale + mask): `Epilogue("acc * scale + mask", (EpilogueInput("scale", "scalar"),
EpilogueInput("mask", "full")))`.

Launcher arguments, in order: x (cross_entropy: logits [rows, C], then int64 targets [rows]), weight (if has_weight),
bias (if has_bias), then the prologue inputs in their order (scalars may be Python numbers or 1-element tensors).

Column family (`ColSpec`, `ColReduceFamily`): sum / mean / max over dim 0 of a 2-D tensor; programs own BLOCK_N
columns and walk rows BLOCK_M at a time with a [BLOCK_M, BLOCK_N] fp32 accumulator; SPLIT_M > 1 splits the rows over
more programs that combine with fp32 atomics (add, or max) into a buffer cast to the input dtype at the end.

Scan family (`ScanSpec`, `ScanFamily`): cumsum along the last dimension, "single" (tl.cumsum over the row held in
registers, ROWS_PER_PROGRAM rows per program) or "loop" (chunks of BLOCK with a running carry).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..core.target import H200
from ._common import RESERVED_NAMES, next_pow2, register_budget, threads_check, usable_name
from .base import DTYPE_BYTES, Epilogue, Rendered, grid_space

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
WARPS = (1, 2, 4, 8, 16, 32)
ROWS_CHOICES = (1, 2, 4, 8, 16, 32)
LOOP_BLOCKS = (256, 512, 1024, 2048, 4096, 8192, 16384)
LOOP_STAGES = (1, 2, 3)
# Register budget, calibrated by compiling the rendered kernels for sm_90 (Triton 3.6, ptxas resource usage): about
# 128 fp32 tile elements per thread fit in 255 registers without spilling (~250 regs for softmax at 128), 64 for
# layernorm / rmsnorm (more tiles alive: 232 regs at 64, spills at 128); 256 per thread spills for every op. Where
# num_warps leaves fewer than 255 registers a thread (16 warps: 128, 32 warps: 64) the budget shrinks in proportion.
ELEMS_PER_THREAD = 128
NORM_ELEMS_PER_THREAD = 64
MAX_TILE = 16384  # elements of a multi-row tile

ROW_OPS = ("softmax", "log_softmax", "layernorm", "rmsnorm", "sum", "max", "mean", "var", "var_mean", "argmax",
           "cross_entropy", "logsumexp")
WELFORD_OPS = ("layernorm", "var", "var_mean")  # (mean, M2) statistics
NORM_OPS = ("softmax", "log_softmax", "layernorm", "rmsnorm")  # output has x's shape
ONLINE_OPS = ("softmax", "log_softmax", "logsumexp", "cross_entropy")  # (max, sum exp) statistics
PROLOGUE_KINDS = ("full", "col", "row", "scalar")
NEG_INF = 'float("-inf")'


def single_block_cap(dtype: str) -> int:
    """Largest row block kept in registers: 16384 for 4-byte inputs, 32768 for 2-byte ones."""
    return 16384 if DTYPE_BYTES.get(dtype, 4) >= 4 else 32768


def _regs_check(elements: int, num_warps: int, per_thread: int = ELEMS_PER_THREAD) -> str | None:
    threads = 32 * num_warps
    budget = register_budget(per_thread, num_warps)
    if elements / threads > budget:
        return (f"{elements} fp32 tile elements over {threads} threads: {elements / threads:.0f} per thread > "
                f"{budget:.0f} (registers would spill)")
    return None


# --------------------------------------------------------------------------------------------------------- prologue

class _Prologue:
    """Code generation for an elementwise prologue over the loaded tile (`acc`) and named inputs."""

    def __init__(self, pro: Epilogue | None):
        self.pro = None if pro is None or pro.is_identity else pro
        self.inputs = self.pro.inputs if self.pro else ()

    def problem(self) -> str | None:
        names = [i.name for i in self.inputs]
        if len(set(names)) != len(names):
            return f"prologue input names repeat: {names}"
        for inp in self.inputs:
            if not usable_name(inp.name):
                return f"prologue input name {inp.name!r} is not usable (reserved: {sorted(RESERVED_NAMES)})"
            if inp.kind not in PROLOGUE_KINDS:
                return f"prologue input {inp.name!r} has kind {inp.kind!r}; supported: {PROLOGUE_KINDS}"
        return None

    @property
    def expr(self) -> str:
        expr = self.pro.expr
        for inp in self.inputs:  # names -> p_<name> (kernel locals never start with p_)
            expr = re.sub(rf"(?<![\w.]){re.escape(inp.name)}(?!\w)", f"p_{inp.name}", expr)
        return expr

    def kernel_params(self) -> list[str]:
        out = []
        for inp in self.inputs:
            out.append(f"p_{inp.name}_ptr")
            if inp.kind == "full":
                out.append(f"p_{inp.name}_stride")
        return out

    def hoisted(self) -> list[str]:
        """Per-program loads (scalars, per-row values) and row offsets of full inputs."""
        lines = []
        for inp in self.inputs:
            n = inp.name
            if inp.kind == "scalar":
                lines.append(f"p_{n} = tl.load(p_{n}_ptr).to(tl.float32)")
            elif inp.kind == "row":
                lines.append(f"p_{n} = tl.load(p_{n}_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)[:, None]")
            elif inp.kind == "full":
                lines.append(f"p_{n}_row = rows.to(tl.int64)[:, None] * p_{n}_stride")
        return lines

    def load_tile(self, fill: str | None) -> list[str]:
        """Lines that leave the (prologue-applied) fp32 tile in `acc`; masked lanes hold `fill` (None: don't care)."""
        if self.pro is None:
            other = fill if fill is not None else "0.0"
            return [f"acc = tl.load(x_ptr + x_row + cols, mask=mask, other={other}).to(tl.float32)"]
        lines = ["acc = tl.load(x_ptr + x_row + cols, mask=mask, other=0.0).to(tl.float32)"]
        for inp in self.inputs:
            n = inp.name
            if inp.kind == "full":
                lines.append(f"p_{n} = tl.load(p_{n}_ptr + p_{n}_row + cols, mask=mask, other=0.0).to(tl.float32)")
            elif inp.kind == "col":
                lines.append(f"p_{n} = tl.load(p_{n}_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)")
        lines.append(f"acc = {self.expr}")
        if fill is not None:
            lines.append(f"acc = tl.where(mask, acc, {fill})")
        return lines

    def launcher_params(self) -> list[str]:
        return [f"p_{i.name}" for i in self.inputs]

    def launcher_prep(self) -> list[str]:
        lines = []
        for inp in self.inputs:
            n = f"p_{inp.name}"
            if inp.kind == "full":
                lines += [f"{n} = {n}.expand(x.shape).reshape(-1, n_cols)",
                          f"if {n}.stride(1) != 1:",
                          f"    {n} = {n}.contiguous()"]
            elif inp.kind == "col":
                lines.append(f"{n} = {n}.reshape(-1).expand(n_cols).contiguous()")
            elif inp.kind == "row":
                lines.append(f"{n} = {n}.reshape(-1).expand(n_rows).contiguous()")
            else:
                lines.append(f"{n} = torch.as_tensor({n}, dtype=torch.float32, device=x.device).reshape(1)")
        return lines

    def launch_args(self) -> list[str]:
        out = []
        for inp in self.inputs:
            out.append(f"p_{inp.name}")
            if inp.kind == "full":
                out.append(f"p_{inp.name}.stride(0)")
        return out


# ------------------------------------------------------------------------------------------------------ row family

@dataclasses.dataclass(frozen=True)
class RowSpec:
    """A reduction / normalisation along the last dimension of x, viewed as [rows, n_cols].

    op: one of ROW_OPS. eps: layernorm / rmsnorm. has_weight: per-column scale (layernorm, rmsnorm); has_bias:
    per-column shift (layernorm). correction: var's divisor is n_cols - correction (torch.var: 1 unbiased, 0
    biased). var_mean returns (var, mean) from one pass, like torch.var_mean; keepdim (var_mean only: the other ops
    get their keepdim from the caller) keeps the reduced dimension as size 1. reduction: cross_entropy only, "none"
    (per-row fp32 loss) or "mean". ignore_index: cross_entropy only; None: every target counts (mean = out.mean());
    an int: those rows get loss 0 and the mean divides by the rest.
    prologue: elementwise expression applied to each loaded element (see the module docstring).
    """
    op: str
    n_cols: int
    dtype: str
    eps: float = 1e-5
    has_weight: bool = False
    has_bias: bool = False
    prologue: Epilogue | None = None
    correction: int = 1
    reduction: str = "none"
    ignore_index: int | None = None
    keepdim: bool = False


def _row_spec_problem(spec: RowSpec) -> str | None:
    if spec.op not in ROW_OPS:
        return f"unknown row op {spec.op!r}; supported: {ROW_OPS}"
    if spec.dtype not in FLOAT_DTYPES:
        return f"dtype {spec.dtype!r} not supported; supported: {FLOAT_DTYPES}"
    if spec.n_cols < 1:
        return "n_cols must be >= 1"
    if spec.has_weight and spec.op not in ("layernorm", "rmsnorm"):
        return f"weight only for layernorm / rmsnorm, not {spec.op}"
    if spec.has_bias and spec.op != "layernorm":
        return f"bias only for layernorm, not {spec.op}"
    if spec.reduction not in ("none", "mean") or (spec.reduction != "none" and spec.op != "cross_entropy"):
        return f"reduction {spec.reduction!r} only 'none', or 'mean' for cross_entropy"
    if spec.ignore_index is not None and spec.op != "cross_entropy":
        return "ignore_index only for cross_entropy"
    if spec.keepdim and spec.op != "var_mean":
        return "keepdim only for var_mean (two outputs); other ops unsqueeze their one output"
    return _Prologue(spec.prologue).problem()


class RowReduceFamily:
    """Config: strategy ("single" | "loop"), BLOCK, ROWS_PER_PROGRAM, num_warps, num_stages (loop only)."""
    name = "row_reduce"
    template_version = 1  # see base.Family

    def space(self, spec: RowSpec) -> list[dict[str, Any]]:
        single = grid_space(strategy=("single",), BLOCK=(next_pow2(spec.n_cols),), ROWS_PER_PROGRAM=ROWS_CHOICES,
                            num_warps=WARPS, num_stages=(1,))
        loop = grid_space(strategy=("loop",), BLOCK=LOOP_BLOCKS, ROWS_PER_PROGRAM=(1,), num_warps=WARPS,
                          num_stages=LOOP_STAGES)
        return single + loop

    def check(self, spec: RowSpec, config: dict[str, Any]) -> str | None:
        problem = _row_spec_problem(spec)
        if problem:
            return problem
        strategy, block, rows = config["strategy"], config["BLOCK"], config["ROWS_PER_PROGRAM"]
        warps, stages = config["num_warps"], config["num_stages"]
        full = next_pow2(spec.n_cols)
        if warps not in WARPS:
            return f"num_warps {warps} not in {WARPS}"
        if block < 1 or block & (block - 1):
            return f"BLOCK {block} is not a power of two"
        if stages < 1:
            return "num_stages must be >= 1"
        if strategy == "single":
            if block != full:
                return f"single: BLOCK {block} must be next_power_of_2(n_cols) = {full}"
            cap = single_block_cap(spec.dtype)
            if block > cap:
                return f"single: row block {block} > {cap} for {spec.dtype}: does not fit in registers; use loop"
            if rows not in ROWS_CHOICES:
                return f"ROWS_PER_PROGRAM {rows} not in {ROWS_CHOICES}"
            if rows > 1 and rows * block > MAX_TILE:
                return f"{rows} rows x {block} = {rows * block} elements > {MAX_TILE} per program"
        elif strategy == "loop":
            if rows != 1:
                return "loop: one row per program (ROWS_PER_PROGRAM must be 1)"
            if block >= full:
                return f"loop: BLOCK {block} covers the row ({spec.n_cols}); use single"
        else:
            return f"unknown strategy {strategy!r}"
        budget = NORM_ELEMS_PER_THREAD if spec.op in ("layernorm", "rmsnorm") else ELEMS_PER_THREAD
        return _regs_check(rows * block, warps, budget) or threads_check(warps, rows * block)

    def default(self, spec: RowSpec) -> dict[str, Any]:
        full = next_pow2(spec.n_cols)
        rows = max(1, min(8, 2048 // full))
        warps = max(1, min(16, rows * full // 256))
        candidates = [{"strategy": "single", "BLOCK": full, "ROWS_PER_PROGRAM": rows, "num_warps": w, "num_stages": 1}
                      for w in (warps, 32)]
        candidates.append({"strategy": "loop", "BLOCK": min(4096, full // 2), "ROWS_PER_PROGRAM": 1, "num_warps": 8,
                           "num_stages": 2})
        for config in candidates + self.space(spec):
            if self.check(spec, config) is None:
                return config
        raise ValueError(f"no valid config for {spec}")

    # -- rendering

    def render(self, spec: RowSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        return Rendered(self._kernel(spec, config, name), self._launcher(spec, config, name))

    def _kernel(self, spec: RowSpec, config: dict[str, Any], name: str) -> str:
        op, pro = spec.op, _Prologue(spec.prologue)
        params = ["x_ptr", "out_ptr"] + (["mean_ptr"] if op == "var_mean" else [])
        if op == "cross_entropy":
            params.append("tgt_ptr")
        if spec.has_weight:
            params.append("w_ptr")
        if spec.has_bias:
            params.append("b_ptr")
        params += pro.kernel_params() + ["n_rows", "n_cols", "stride_x"]
        if op in ("var", "var_mean"):
            params.append("var_div")
        params += ["BLOCK: tl.constexpr", "ROWS: tl.constexpr"]

        head = ["pid = tl.program_id(0)",
                "rows = pid * ROWS + tl.arange(0, ROWS)",
                "row_mask = rows < n_rows",
                "x_row = rows.to(tl.int64)[:, None] * stride_x"]
        if op in NORM_OPS:
            head.append("out_row = rows.to(tl.int64)[:, None] * n_cols")
        if op == "cross_entropy":
            head.append("tgt = tl.load(tgt_ptr + rows, mask=row_mask, other=0)")
        head += pro.hoisted()

        body = self._single(spec, pro) if config["strategy"] == "single" else self._loop(spec, pro)
        lines = ["@triton.jit", f"def {name}_kernel({', '.join(params)}):"] + ["    " + ln for ln in head + body]
        return "\n".join(lines) + "\n"

    # tail lines shared by both strategies

    @staticmethod
    def _affine(spec: RowSpec) -> list[str]:
        out = []
        if spec.has_weight:
            out += ["w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)", "y = y * w"]
        if spec.has_bias:
            out += ["b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)", "y = y + b"]
        return out

    @staticmethod
    def _store_row_value(value: str, ptr: str = "out_ptr") -> list[str]:
        return [f"tl.store({ptr} + rows, {value}.to({ptr}.dtype.element_ty), mask=row_mask)"]

    @staticmethod
    def _store_welford(op: str) -> list[str]:
        """var: M2 / divisor; var_mean: that and the mean, from the same statistics."""
        lines = RowReduceFamily._store_row_value("(m2 / var_div)")
        if op == "var_mean":
            lines += RowReduceFamily._store_row_value("mean", "mean_ptr")
        return lines

    @staticmethod
    def _store_tile() -> list[str]:
        return ["tl.store(out_ptr + out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)"]

    @staticmethod
    def _ce_finish(spec: RowSpec) -> list[str]:
        lines = ["loss = lse - xt"]
        if spec.ignore_index is not None:
            lines.append(f"loss = tl.where(tgt == {int(spec.ignore_index)}, 0.0, loss)")
        return lines + RowReduceFamily._store_row_value("loss")

    def _single(self, spec: RowSpec, pro: _Prologue) -> list[str]:
        op, eps = spec.op, repr(float(spec.eps))
        lines = ["cols = tl.arange(0, BLOCK)[None, :]",
                 "col_mask = cols < n_cols",
                 "mask = row_mask[:, None] & col_mask"]
        fill = NEG_INF if op in ONLINE_OPS + ("max", "argmax") else "0.0"
        lines += pro.load_tile(fill)
        if op in ONLINE_OPS:
            lines += ["m = tl.max(acc, axis=1)",
                      f"m = tl.where(m == {NEG_INF}, 0.0, m)",  # all -inf rows: no nan from -inf - -inf
                      "e = tl.exp(acc - m[:, None])",
                      "l = tl.sum(e, axis=1)"]
            if op == "softmax":
                lines += ["y = e * (1.0 / l)[:, None]"] + self._store_tile()
            elif op == "log_softmax":
                lines += ["y = acc - (m + tl.log(l))[:, None]"] + self._store_tile()
            elif op == "logsumexp":
                lines += ["lse = m + tl.log(l)"] + self._store_row_value("lse")
            else:
                lines += ["lse = m + tl.log(l)",
                          "xt = tl.sum(tl.where(cols == tgt[:, None], acc, 0.0), axis=1)"] + self._ce_finish(spec)
        elif op in WELFORD_OPS:
            lines += ["mean = tl.sum(acc, axis=1) / n_cols",
                      "d = tl.where(mask, acc - mean[:, None], 0.0)",
                      "m2 = tl.sum(d * d, axis=1)"]
            if op != "layernorm":
                lines += self._store_welford(op)
            else:
                lines += [f"rstd = 1.0 / tl.sqrt(m2 / n_cols + {eps})", "y = d * rstd[:, None]"]
                lines += self._affine(spec) + self._store_tile()
        elif op == "rmsnorm":
            lines += [f"rstd = 1.0 / tl.sqrt(tl.sum(acc * acc, axis=1) / n_cols + {eps})", "y = acc * rstd[:, None]"]
            lines += self._affine(spec) + self._store_tile()
        elif op in ("sum", "mean"):
            lines += ["s = tl.sum(acc, axis=1)"] + (["s = s / n_cols"] if op == "mean" else [])
            lines += self._store_row_value("s")
        elif op == "max":
            lines += self._store_row_value("tl.max(acc, axis=1)")
        elif op == "argmax":
            lines += self._store_row_value("tl.argmax(acc, axis=1).to(tl.int64)")
        return lines

    def _loop(self, spec: RowSpec, pro: _Prologue) -> list[str]:
        op, eps = spec.op, repr(float(spec.eps))
        chunk = ["cols = start + offs",
                 "col_mask = cols < n_cols",
                 "mask = row_mask[:, None] & col_mask"]
        loop_head = "for start in range(0, n_cols, BLOCK):"

        def loop(fill: str | None, update: list[str]) -> list[str]:
            return [loop_head] + ["    " + ln for ln in chunk + pro.load_tile(fill) + update]

        lines = ["offs = tl.arange(0, BLOCK)[None, :]"]
        if op in ONLINE_OPS:
            lines += [f"m_i = tl.full([ROWS], {NEG_INF}, tl.float32)",
                      "l_i = tl.zeros([ROWS], tl.float32)"]
            update = ["m_new = tl.maximum(m_i, tl.max(acc, axis=1))",
                      f"m_safe = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
                      "l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(acc - m_safe[:, None]), axis=1)",
                      "m_i = m_new"]
            if op == "cross_entropy":
                lines.append("xt = tl.zeros([ROWS], tl.float32)")
                update.append("xt += tl.sum(tl.where(cols == tgt[:, None], acc, 0.0), axis=1)")
            lines += loop(NEG_INF, update)
            lines += [f"m_i = tl.where(m_i == {NEG_INF}, 0.0, m_i)", "lse = m_i + tl.log(l_i)"]
            if op == "softmax":
                lines += ["inv_l = 1.0 / l_i"]
                lines += loop(None, ["y = tl.exp(acc - m_i[:, None]) * inv_l[:, None]"] + self._store_tile())
            elif op == "log_softmax":
                lines += loop(None, ["y = acc - lse[:, None]"] + self._store_tile())
            elif op == "logsumexp":
                lines += self._store_row_value("lse")
            else:
                lines += self._ce_finish(spec)
        elif op in WELFORD_OPS:
            # Chan et al.: merge each chunk's (count, mean, M2) into the running one
            lines += ["mean = tl.zeros([ROWS], tl.float32)",
                      "m2 = tl.zeros([ROWS], tl.float32)",
                      "count = tl.zeros([ROWS], tl.float32)"]
            lines += loop("0.0", ["cnt = tl.minimum(n_cols - start, BLOCK).to(tl.float32)",
                                  "c_mean = tl.sum(acc, axis=1) / cnt",
                                  "d = tl.where(mask, acc - c_mean[:, None], 0.0)",
                                  "tot = count + cnt",
                                  "delta = c_mean - mean",
                                  "frac = cnt / tot",
                                  "mean += delta * frac",
                                  "m2 += tl.sum(d * d, axis=1) + delta * delta * count * frac",
                                  "count = tot"])
            if op != "layernorm":
                lines += self._store_welford(op)
            else:
                lines += [f"rstd = 1.0 / tl.sqrt(m2 / n_cols + {eps})"]
                lines += loop(None, ["y = (acc - mean[:, None]) * rstd[:, None]"] + self._affine(spec)
                              + self._store_tile())
        elif op == "rmsnorm":
            lines += ["sq = tl.zeros([ROWS, BLOCK], tl.float32)"]
            lines += loop("0.0", ["sq += acc * acc"])
            lines += [f"rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=1) / n_cols + {eps})"]
            lines += loop(None, ["y = acc * rstd[:, None]"] + self._affine(spec) + self._store_tile())
        elif op in ("sum", "mean"):
            lines += ["s = tl.zeros([ROWS, BLOCK], tl.float32)"]
            lines += loop("0.0", ["s += acc"])
            lines += ["t = tl.sum(s, axis=1)"] + (["t = t / n_cols"] if op == "mean" else [])
            lines += self._store_row_value("t")
        elif op == "max":
            lines += [f"mx = tl.full([ROWS, BLOCK], {NEG_INF}, tl.float32)"]
            lines += loop(NEG_INF, ["mx = tl.maximum(mx, acc)"])
            lines += self._store_row_value("tl.max(mx, axis=1)")
        elif op == "argmax":
            # per chunk (max, first index); a later chunk wins only when strictly larger: torch's first index
            lines += [f"best = tl.full([ROWS], {NEG_INF}, tl.float32)",
                      "best_idx = tl.zeros([ROWS], tl.int32)"]
            lines += loop(NEG_INF, ["c_max = tl.max(acc, axis=1)",
                                    "c_idx = tl.argmax(acc, axis=1) + start",
                                    "better = c_max > best",
                                    "best_idx = tl.where(better, c_idx, best_idx)",
                                    "best = tl.where(better, c_max, best)"])
            lines += self._store_row_value("best_idx.to(tl.int64)")
        return lines

    def _launcher(self, spec: RowSpec, config: dict[str, Any], name: str) -> str:
        op, pro = spec.op, _Prologue(spec.prologue)
        rows = config["ROWS_PER_PROGRAM"]
        params = ["x"] + (["targets"] if op == "cross_entropy" else [])
        params += (["weight"] if spec.has_weight else []) + (["bias"] if spec.has_bias else [])
        params += pro.launcher_params()
        body = [f"n_cols = {spec.n_cols}",
                "assert x.shape[-1] == n_cols, (tuple(x.shape), n_cols)"]
        if op == "cross_entropy":
            body.append("assert x.dim() == 2, 'cross_entropy: logits [rows, classes]'")
        body += ["x2 = x.reshape(-1, n_cols)",
                 "if x2.stride(1) != 1:",
                 "    x2 = x2.contiguous()",
                 "n_rows = x2.shape[0]"]
        if op in NORM_OPS:
            body += ["out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)"]
            result = "out.view(x.shape)"
        elif op == "argmax":
            body += ["out = torch.empty(x.shape[:-1], dtype=torch.int64, device=x.device)"]
            result = "out"
        elif op == "cross_entropy":
            body += ["out = torch.empty((n_rows,), dtype=torch.float32, device=x.device)"]
            if spec.reduction == "none":
                result = "out"
            elif spec.ignore_index is None:
                result = "out.mean()"
            else:
                result = f"out.sum() / (targets != {int(spec.ignore_index)}).sum()"
        elif op == "var_mean":
            body += ["out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)",
                     "mean = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)"]
            result = "(out.unsqueeze(-1), mean.unsqueeze(-1))" if spec.keepdim else "(out, mean)"
        else:
            body += ["out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)"]
            result = "out"
        body += ["if n_rows == 0:", f"    return {result}"]
        args = ["x2", "out"] + (["mean"] if op == "var_mean" else [])
        if op == "cross_entropy":
            body.append("targets = targets.reshape(-1).contiguous()")
            args.append("targets")
        if spec.has_weight:
            body.append("weight = weight.reshape(-1).contiguous()")
            args.append("weight")
        if spec.has_bias:
            body.append("bias = bias.reshape(-1).contiguous()")
            args.append("bias")
        body += pro.launcher_prep()
        args += pro.launch_args() + ["n_rows", "n_cols", "x2.stride(0)"]
        if op in ("var", "var_mean"):
            args.append(f"float(max(n_cols - {int(spec.correction)}, 0))")
        kw = [f"BLOCK={config['BLOCK']}", f"ROWS={rows}", f"num_warps={config['num_warps']}"]
        if config["strategy"] == "loop":
            kw.append(f"num_stages={config['num_stages']}")
        body += [f"grid = (triton.cdiv(n_rows, {rows}),)",
                 f"{name}_kernel[grid]({', '.join(args + kw)})",
                 f"return {result}"]
        return f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in body)


# --------------------------------------------------------------------------------------------------- column family

COL_OPS = ("sum", "mean", "max")
COL_BLOCK_N = (16, 32, 64, 128, 256, 512)
COL_BLOCK_M = (4, 8, 16, 32, 64, 128)
COL_SPLIT_M = (1, 2, 4, 8, 16, 32)
COL_WARPS = (1, 2, 4, 8)
COL_ELEMS_PER_THREAD = 64


@dataclasses.dataclass(frozen=True)
class ColSpec:
    """op over dim 0 of a 2-D [n_rows, n_cols] tensor (any strides); the output is [n_cols] in the input dtype."""
    op: str
    n_rows: int
    n_cols: int
    dtype: str


class ColReduceFamily:
    """Config: BLOCK_N (columns per program), BLOCK_M (rows per iteration), SPLIT_M (programs along the rows,
    combined with fp32 atomics), num_warps."""
    name = "col_reduce"
    template_version = 1  # see base.Family

    def space(self, spec: ColSpec) -> list[dict[str, Any]]:
        return grid_space(BLOCK_N=COL_BLOCK_N, BLOCK_M=COL_BLOCK_M, SPLIT_M=COL_SPLIT_M, num_warps=COL_WARPS)

    def check(self, spec: ColSpec, config: dict[str, Any]) -> str | None:
        if spec.op not in COL_OPS:
            return f"unknown column op {spec.op!r}; supported: {COL_OPS}"
        if spec.dtype not in FLOAT_DTYPES:
            return f"dtype {spec.dtype!r} not supported; supported: {FLOAT_DTYPES}"
        if spec.n_rows < 1 or spec.n_cols < 1:
            return "n_rows and n_cols must be >= 1"
        bn, bm, split, warps = config["BLOCK_N"], config["BLOCK_M"], config["SPLIT_M"], config["num_warps"]
        for key, v in (("BLOCK_N", bn), ("BLOCK_M", bm), ("SPLIT_M", split)):
            if v < 1 or v & (v - 1):
                return f"{key} {v} is not a power of two"
        if bn > max(COL_BLOCK_N[0], next_pow2(spec.n_cols)):
            return f"BLOCK_N {bn} wider than the {spec.n_cols} columns"
        if bm > max(COL_BLOCK_M[0], next_pow2(spec.n_rows)):
            return f"BLOCK_M {bm} taller than the {spec.n_rows} rows"
        if split > 1 and split > -(-spec.n_rows // bm):
            return f"SPLIT_M {split} > {-(-spec.n_rows // bm)} row blocks: empty splits"
        # the accumulator, the loaded tile and 64-bit addresses: 128 elements a thread spills on sm_90, 64 does not
        return _regs_check(bm * bn, warps, COL_ELEMS_PER_THREAD) or threads_check(warps, bm * bn)

    def default(self, spec: ColSpec) -> dict[str, Any]:
        bn = min(128, max(COL_BLOCK_N[0], next_pow2(spec.n_cols)))
        bm = min(128, max(COL_BLOCK_M[0], 4096 // bn), max(COL_BLOCK_M[0], next_pow2(spec.n_rows)))
        col_blocks = -(-spec.n_cols // bn)
        split = 1
        while split < 32 and col_blocks * split * 2 <= 2 * H200.sms and spec.n_rows // (split * 2) >= 4 * bm:
            split *= 2  # aim for ~2 waves of programs when there are few columns
        config = {"BLOCK_N": bn, "BLOCK_M": bm, "SPLIT_M": split, "num_warps": 4 if bm * bn >= 1024 else 1}
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: ColSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        op, split = spec.op, config["SPLIT_M"]
        is_max = op == "max"
        fill = NEG_INF if is_max else "0.0"
        init = f"tl.full([BLOCK_M, BLOCK_N], {NEG_INF}, tl.float32)" if is_max else \
            "tl.zeros([BLOCK_M, BLOCK_N], tl.float32)"
        update = "acc = tl.maximum(acc, v)" if is_max else "acc += v"
        final = "r = tl.max(acc, axis=0)" if is_max else "r = tl.sum(acc, axis=0)"
        lines = ["@triton.jit",
                 f"def {name}_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, rows_per_split, scale,",
                 "        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):",
                 "    pid_n = tl.program_id(0)",
                 "    pid_m = tl.program_id(1)",
                 "    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
                 "    col_mask = cols < n_cols",
                 "    col_off = cols[None, :].to(tl.int64) * stride_n",
                 "    offs_m = pid_m * rows_per_split + tl.arange(0, BLOCK_M)",
                 f"    acc = {init}",
                 "    for start in range(0, rows_per_split, BLOCK_M):",
                 "        rows = start + offs_m",
                 "        mask = (rows < n_rows)[:, None] & col_mask[None, :]",
                 "        v = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_m + col_off, mask=mask,",
                 f"                    other={fill}).to(tl.float32)",
                 f"        {update}",
                 f"    {final}"]
        if op == "mean":
            lines.append("    r = r * scale")
        if split == 1:
            lines.append("    tl.store(out_ptr + cols, r.to(out_ptr.dtype.element_ty), mask=col_mask)")
        elif is_max:
            lines.append("    tl.atomic_max(out_ptr + cols, r, mask=col_mask)")
        else:
            lines.append("    tl.atomic_add(out_ptr + cols, r, mask=col_mask)")
        kernel = "\n".join(lines) + "\n"

        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        body = ["assert x.dim() == 2, 'column reduction of a 2-D tensor'",
                "n_rows, n_cols = x.shape"]
        if split == 1:
            body.append("out = torch.empty((n_cols,), dtype=x.dtype, device=x.device)")
        elif is_max:
            body.append(f"out = torch.full((n_cols,), {NEG_INF}, dtype=torch.float32, device=x.device)")
        else:
            body.append("out = torch.zeros((n_cols,), dtype=torch.float32, device=x.device)")
        body += [f"rows_per_split = max(1, triton.cdiv(triton.cdiv(n_rows, {split}), {bm})) * {bm}",
                 f"grid = (triton.cdiv(n_cols, {bn}), triton.cdiv(n_rows, rows_per_split))",
                 "if n_cols > 0 and n_rows > 0:",
                 f"    {name}_kernel[grid](x, out, n_rows, n_cols, x.stride(0), x.stride(1), rows_per_split, "
                 f"1.0 / max(n_rows, 1), BLOCK_M={bm}, BLOCK_N={bn}, num_warps={config['num_warps']})"]
        if split == 1:
            body.append("return out")
        else:
            body.append("return out if x.dtype == torch.float32 else out.to(x.dtype)")
        launcher = f"def {name}(x):\n" + "".join(f"    {ln}\n" for ln in body)
        return Rendered(kernel, launcher)


# ----------------------------------------------------------------------------------------------------- scan family

SCAN_OPS = ("cumsum",)


@dataclasses.dataclass(frozen=True)
class ScanSpec:
    """Inclusive prefix sum along the last dimension of x viewed as [rows, n_cols]; output in x's dtype and shape."""
    op: str = "cumsum"
    n_cols: int = 1
    dtype: str = "float32"


class ScanFamily:
    """Config: strategy ("single" | "loop"), BLOCK, ROWS_PER_PROGRAM (single only), num_warps, num_stages (loop)."""
    name = "scan"
    template_version = 1  # see base.Family

    def space(self, spec: ScanSpec) -> list[dict[str, Any]]:
        return RowReduceFamily().space(RowSpec("sum", spec.n_cols, spec.dtype))

    def check(self, spec: ScanSpec, config: dict[str, Any]) -> str | None:
        if spec.op not in SCAN_OPS:
            return f"unknown scan op {spec.op!r}; supported: {SCAN_OPS}"
        # the row reductions' tiling rules (cumsum at 128 elements a thread: ~245 registers, no spill)
        return RowReduceFamily().check(RowSpec("sum", spec.n_cols, spec.dtype), config)

    def default(self, spec: ScanSpec) -> dict[str, Any]:
        config = RowReduceFamily().default(RowSpec("sum", spec.n_cols, spec.dtype))
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: ScanSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        load = "v = tl.load(x_ptr + x_row + cols, mask=mask, other=0.0).to(tl.float32)"
        store = "tl.store(out_ptr + out_row + cols, c.to(out_ptr.dtype.element_ty), mask=mask)"
        head = ["pid = tl.program_id(0)",
                "rows = pid * ROWS + tl.arange(0, ROWS)",
                "row_mask = rows < n_rows",
                "x_row = rows.to(tl.int64)[:, None] * stride_x",
                "out_row = rows.to(tl.int64)[:, None] * n_cols"]
        if config["strategy"] == "single":
            body = ["cols = tl.arange(0, BLOCK)[None, :]",
                    "mask = row_mask[:, None] & (cols < n_cols)",
                    load,
                    "c = tl.cumsum(v, axis=1)",
                    store]
        else:
            body = ["offs = tl.arange(0, BLOCK)[None, :]",
                    "carry = tl.zeros([ROWS], tl.float32)",
                    "for start in range(0, n_cols, BLOCK):",
                    "    cols = start + offs",
                    "    mask = row_mask[:, None] & (cols < n_cols)",
                    "    " + load,
                    "    c = tl.cumsum(v, axis=1) + carry[:, None]",
                    "    " + store,
                    # running total = the chunk's last prefix (masked lanes add 0). Not `carry += tl.sum(v)`: that
                    # reduce-and-accumulate next to the scan crashes Triton 3.6's thread-locality pass on sm_90
                    "    carry = tl.sum(tl.where(offs == BLOCK - 1, c, 0.0), axis=1)"]
        kernel = "\n".join(["@triton.jit",
                            f"def {name}_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x, BLOCK: tl.constexpr, "
                            "ROWS: tl.constexpr):"] + ["    " + ln for ln in head + body]) + "\n"
        rows = config["ROWS_PER_PROGRAM"]
        kw = [f"BLOCK={config['BLOCK']}", f"ROWS={rows}", f"num_warps={config['num_warps']}"]
        if config["strategy"] == "loop":
            kw.append(f"num_stages={config['num_stages']}")
        body = [f"n_cols = {spec.n_cols}",
                "assert x.shape[-1] == n_cols, (tuple(x.shape), n_cols)",
                "x2 = x.reshape(-1, n_cols)",
                "if x2.stride(1) != 1:",
                "    x2 = x2.contiguous()",
                "n_rows = x2.shape[0]",
                "out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)",
                "if n_rows > 0:",
                f"    {name}_kernel[(triton.cdiv(n_rows, {rows}),)](x2, out, n_rows, n_cols, x2.stride(0), "
                f"{', '.join(kw)})",
                "return out.view(x.shape)"]
        launcher = f"def {name}(x):\n" + "".join(f"    {ln}\n" for ln in body)
        return Rendered(kernel, launcher)


ROW_REDUCE = RowReduceFamily()
COL_REDUCE = ColReduceFamily()
SCAN = ScanFamily()
