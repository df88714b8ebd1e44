"""Reductions over any contiguous run of dimensions, and scans along any dimension, of an elementwise expression.

Both families view the computed tensor as [outer, R, inner]: the reduced (or scanned) dimensions are adjacent in
memory order, `outer` is the product of the dimensions before them and `inner` of those after. The value reduced is
an elementwise expression (`expr`, fp32 Triton) over named inputs, each of the tensor's full shape ("full", loaded at
the same offset) or a single value ("scalar"); a plain reduction of x is `expr="x"`. A loss such as
mean((a - b) ** 2) is one kernel: the pointwise term is computed as it is loaded and never stored.

Reduction family (`ReduceNDSpec`, `ReduceNDFamily`): a program owns one outer index and BLOCK_I inner positions and
walks its share of R in chunks of BLOCK_R with a [BLOCK_R, BLOCK_I] fp32 tile. inner == 1 is a row reduction
(BLOCK_I = 1, the tile runs along contiguous R); inner > 1 is column style (BLOCK_I contiguous positions a row,
coalesced). SPLIT > 1 cuts R into SPLIT slices, one program each, for when outer * inner gives too few programs; each
writes fp32 partial statistics and the launcher combines the SPLIT partials in a fixed order (deterministic, no
atomics). Ops: sum, mean, max, min, prod, argmax, argmin (first index on ties, like torch), logsumexp, var, std
(two passes over the slice: mean, then the sum of squared deviations; slices merge by Chan's formula), norm2
(sqrt of the sum of squares). NaN inputs are not propagated the way torch does for max/min/argmax.

Scan family (`ScanNDSpec`, `ScanNDFamily`): cumsum / cumprod along L; a program owns one outer index and BLOCK_I
inner positions and walks L in chunks of BLOCK_L carrying the running total. `reverse` scans from the end (what
flip -> cumsum -> flip computes), `exclusive` leaves each position the scan of the ones before it (the first gets the
identity), as cat(zeros, cumsum(x[..., :-1])) computes.

Softmax family (`SoftmaxNDSpec`, `SoftmaxNDFamily`): softmax / log_softmax along R of the same view, for a dim that
is not the last (the row family has the last; a channel softmax of NCHW/NCDHW is R = C, inner = the spatial size). A
program owns one outer index and BLOCK_I inner positions: when BLOCK_R covers R the tile is loaded once and
normalised in registers; otherwise one pass keeps running (max, sum of exp) statistics and a second re-reads and
writes. The output has the input's shape.

Launcher arguments: the inputs, in `inputs` order (scalars: 1-element tensors or Python numbers). Outputs: the
reduction's shape is [outer, inner] reshaped to `out_shape`; the scan's is the inputs' shape.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..core.target import H200
from ._common import RESERVED_NAMES, next_pow2, register_budget, threads_check, usable_name
from .base import EpilogueInput, Rendered, grid_space

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
TORCH_DTYPE = {"float32": "torch.float32", "bfloat16": "torch.bfloat16", "float16": "torch.float16",
               "int64": "torch.int64"}
SOFTMAX_OPS = ("softmax", "log_softmax")
REDUCE_OPS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "logsumexp", "var", "std", "norm2")
SCAN_OPS = ("cumsum", "cumprod")
INPUT_KINDS = ("full", "scalar")
WARPS = (1, 2, 4, 8, 16)
BLOCK_R_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
BLOCK_I_CHOICES = (1, 16, 32, 64, 128, 256)
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# the accumulators, the loaded tile and 64-bit offsets: like the column family, 64 fp32 elements a thread fit
ELEMS_PER_THREAD = 64
NEG_INF, POS_INF = 'float("-inf")', 'float("inf")'
FILL = {"sum": "0.0", "mean": "0.0", "norm2": "0.0", "var": "0.0", "std": "0.0", "prod": "1.0", "max": NEG_INF,
        "argmax": NEG_INF, "logsumexp": NEG_INF, "min": POS_INF, "argmin": POS_INF}
TARGET_PROGRAMS = 4 * H200.sms  # what `default` aims SPLIT at: a few waves of programs


def _substitute(expr: str, inputs: tuple[EpilogueInput, ...]) -> str:
    """Input names -> p_<name> (kernel locals never start with p_)."""
    for inp in inputs:
        expr = re.sub(rf"(?<![\w.]){re.escape(inp.name)}(?!\w)", f"p_{inp.name}", expr)
    return expr


def _inputs_problem(expr: str, inputs: tuple[EpilogueInput, ...], bool_inputs: tuple[str, ...]) -> str | None:
    names = [i.name for i in inputs]
    if len(set(names)) != len(names):
        return f"input names repeat: {names}"
    if not any(i.kind == "full" for i in inputs):
        return "at least one input must have the tensor's full shape"
    for inp in inputs:
        if not usable_name(inp.name):
            return f"input name {inp.name!r} is not usable (reserved: {sorted(RESERVED_NAMES)})"
        if inp.kind not in INPUT_KINDS:
            return f"input {inp.name!r} has kind {inp.kind!r}; supported: {INPUT_KINDS}"
    if not set(bool_inputs) <= set(names):
        return f"bool inputs {bool_inputs} are not all inputs"
    if not expr.strip():
        return "empty expression"
    return None


def _pow2(key: str, v: int) -> str | None:
    return None if v >= 1 and not v & (v - 1) else f"{key} {v} is not a power of two"


def _loads(inputs, bool_inputs, mask: str, off: str) -> list[str]:
    lines = []
    for inp in inputs:
        n = inp.name
        cast = "" if n in bool_inputs else ".to(tl.float32)"
        if inp.kind == "scalar":
            lines.append(f"p_{n} = tl.load(p_{n}_ptr){cast}")
        else:
            lines.append(f"p_{n} = tl.load(p_{n}_ptr + {off}, mask={mask}, other=0){cast}")
    return lines


def _launcher_inputs(inputs, shape_expr: str) -> list[str]:
    """Full inputs broadcast to the tensor's shape and made one contiguous buffer (a copy only where they are not);
    scalars as 1-element tensors."""
    lines = []
    for inp in inputs:
        n = inp.name
        if inp.kind == "scalar":
            lines.append(f"p_{n} = torch.as_tensor(p_{n}, device=dev).reshape(1)")
        else:
            lines += [f"p_{n} = p_{n}.expand({shape_expr})",
                      f"if not p_{n}.is_contiguous():",
                      f"    p_{n} = p_{n}.contiguous()"]
    return lines


def _device_of(inputs) -> str:
    full = next(i for i in inputs if i.kind == "full")
    return f"dev = p_{full.name}.device"


# ------------------------------------------------------------------------------------------------- reduction

@dataclasses.dataclass(frozen=True)
class ReduceNDSpec:
    """op over R of the [outer, R, inner] view of `expr`'s value. in_shape: the shape the inputs broadcast to (its
    numel is outer * R * inner); out_shape: the result's shape (keepdim or not, as the caller wants). out_dtype: the
    result's dtype (argmax/argmin: "int64"). correction: var / std divide by R - correction."""
    op: str
    outer: int
    R: int
    inner: int
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    out_dtype: str
    expr: str
    inputs: tuple[EpilogueInput, ...]
    bool_inputs: tuple[str, ...] = ()
    correction: int = 1


def _reduce_spec_problem(spec: ReduceNDSpec) -> str | None:
    if spec.op not in REDUCE_OPS:
        return f"unknown op {spec.op!r}; supported: {REDUCE_OPS}"
    if min(spec.outer, spec.R, spec.inner) < 1:
        return "outer, R and inner must be >= 1 (empty tensors stay torch calls)"
    numel = 1
    for d in spec.in_shape:
        numel *= d
    if numel != spec.outer * spec.R * spec.inner:
        return f"in_shape {spec.in_shape} has {numel} elements, not outer*R*inner"
    out_numel = 1
    for d in spec.out_shape:
        out_numel *= d
    if out_numel != spec.outer * spec.inner:
        return f"out_shape {spec.out_shape} has {out_numel} elements, not outer*inner"
    arg = spec.op in ("argmax", "argmin")
    if arg != (spec.out_dtype == "int64") or (not arg and spec.out_dtype not in FLOAT_DTYPES):
        return f"out_dtype {spec.out_dtype!r} does not suit {spec.op}"
    return _inputs_problem(spec.expr, spec.inputs, spec.bool_inputs)


class ReduceNDFamily:
    """Config: BLOCK_R (reduced positions a chunk), BLOCK_I (inner positions a program; 1 when inner == 1), SPLIT
    (programs along R, partials combined by the launcher), num_warps."""
    name = "reduce_nd"
    template_version = 1  # see base.Family

    def space(self, spec: ReduceNDSpec) -> list[dict[str, Any]]:
        bi = (1,) if spec.inner == 1 else BLOCK_I_CHOICES[1:]
        return grid_space(BLOCK_R=BLOCK_R_CHOICES, BLOCK_I=bi, SPLIT=SPLIT_CHOICES, num_warps=WARPS)

    def check(self, spec: ReduceNDSpec, config: dict[str, Any]) -> str | None:
        problem = _reduce_spec_problem(spec)
        if problem:
            return problem
        br, bi, split, warps = config["BLOCK_R"], config["BLOCK_I"], config["SPLIT"], config["num_warps"]
        for key, v in (("BLOCK_R", br), ("BLOCK_I", bi), ("SPLIT", split)):
            if _pow2(key, v):
                return _pow2(key, v)
        if warps not in WARPS:
            return f"num_warps {warps} not in {WARPS}"
        if spec.inner == 1 and bi != 1:
            return "inner is 1: BLOCK_I must be 1 (a row reduction)"
        if spec.inner > 1 and bi > max(16, next_pow2(spec.inner)):
            return f"BLOCK_I {bi} wider than the {spec.inner} inner positions"
        if br > max(1, next_pow2(spec.R)):
            return f"BLOCK_R {br} longer than R = {spec.R}"
        if split > 1 and split > -(-spec.R // br):
            return f"SPLIT {split} > {-(-spec.R // br)} chunks of R: empty slices"
        budget = register_budget(ELEMS_PER_THREAD, warps)
        if br * bi / (32 * warps) > budget:
            return f"{br}x{bi} tile over {32 * warps} threads: more than {budget:.0f} elements a thread (spills)"
        return threads_check(warps, br * bi)

    def default(self, spec: ReduceNDSpec) -> dict[str, Any]:
        bi = 1 if spec.inner == 1 else min(128, max(16, next_pow2(spec.inner)))
        br = min(next_pow2(spec.R), max(1, 4096 // bi), 2048)
        programs = spec.outer * -(-spec.inner // bi)
        split = 1
        while split < SPLIT_CHOICES[-1] and programs * split < TARGET_PROGRAMS and -(-spec.R // br) >= 8 * split:
            split *= 2  # few programs and a long R: slices of at least ~4 chunks each
        warps = max(1, min(8, br * bi // 512))
        config = {"BLOCK_R": br, "BLOCK_I": bi, "SPLIT": split, "num_warps": warps}
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: ReduceNDSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        return Rendered(self._kernel(spec, config, name), self._launcher(spec, config, name))

    def _kernel(self, spec: ReduceNDSpec, config: dict[str, Any], name: str) -> str:
        op = spec.op
        split = config["SPLIT"]
        fill = FILL[op]
        expr = _substitute(spec.expr, spec.inputs)
        params = [f"p_{i.name}_ptr" for i in spec.inputs] + ["out_ptr"]
        if split > 1 and op in ("argmax", "argmin", "logsumexp", "var", "std"):
            params.append("aux_ptr")
        params += ["R", "inner", "r_per_split", "BLOCK_R: tl.constexpr", "BLOCK_I: tl.constexpr"]
        head = ["pid = tl.program_id(0)",
                "sid = tl.program_id(1)",
                "n_ib = tl.cdiv(inner, BLOCK_I)",
                "o = pid // n_ib",
                "icol = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)",
                "imask = icol < inner",
                "base = o.to(tl.int64) * R * inner",
                "r_lo = sid * r_per_split",
                "r_hi = tl.minimum(r_lo + r_per_split, R)",
                "offs_r = tl.arange(0, BLOCK_R)"]

        def chunk(update: list[str], value_fill: str = fill) -> list[str]:
            """A loop over this slice's chunks leaving the fp32 tile in v (masked lanes: value_fill)."""
            body = ["r = start + offs_r",
                    "mask = (r < r_hi)[:, None] & imask[None, :]",
                    "off = base + r.to(tl.int64)[:, None] * inner + icol[None, :]"]
            body += _loads(spec.inputs, spec.bool_inputs, "mask", "off")
            body += [f"v = ({expr}).to(tl.float32)", f"v = tl.where(mask, v, {value_fill})"]
            return ["for start in range(r_lo, r_hi, BLOCK_R):"] + ["    " + ln for ln in body + update]

        lines: list[str] = []
        tile = "[BLOCK_R, BLOCK_I]"
        out_off = "sid.to(tl.int64) * n_out + o.to(tl.int64) * inner + icol"
        lines.append("n_out = tl.num_programs(0) // n_ib * inner")  # outer * inner
        if op in ("sum", "mean", "norm2"):
            lines += [f"acc = tl.zeros({tile}, tl.float32)"]
            lines += chunk(["acc += v * v"] if op == "norm2" else ["acc += v"])
            lines += ["res = tl.sum(acc, axis=0)"]
            if split == 1:
                if op == "mean":
                    lines.append("res = res / R")
                elif op == "norm2":
                    lines.append("res = tl.sqrt(res)")
        elif op == "prod":
            lines += [f"acc = tl.full({tile}, 1.0, tl.float32)"]
            lines += chunk(["acc *= v"])
            lines += [f"res = tl.reduce(acc, 0, {name}_mul)"]
        elif op in ("max", "min"):
            f = "maximum" if op == "max" else "minimum"
            lines += [f"acc = tl.full({tile}, {fill}, tl.float32)"]
            lines += chunk([f"acc = tl.{f}(acc, v)"])
            lines += [f"res = tl.{op}(acc, axis=0)"]
        elif op in ("argmax", "argmin"):
            # per chunk (best, first index); a later chunk wins only when strictly better: torch's first index
            cmp, red = (">", "max") if op == "argmax" else ("<", "min")
            lines += [f"best = tl.full([BLOCK_I], {fill}, tl.float32)",
                      "best_idx = tl.zeros([BLOCK_I], tl.int64) + r_lo"]
            lines += chunk([f"c_best = tl.{red}(v, axis=0)",
                            f"c_idx = tl.{op}(v, axis=0).to(tl.int64) + start",
                            f"better = c_best {cmp} best",
                            "best_idx = tl.where(better, c_idx, best_idx)",
                            "best = tl.where(better, c_best, best)"])
            lines += ["res = best_idx"]
        elif op == "logsumexp":
            lines += [f"m = tl.full([BLOCK_I], {NEG_INF}, tl.float32)",
                      "s = tl.zeros([BLOCK_I], tl.float32)"]
            lines += chunk(["m_new = tl.maximum(m, tl.max(v, axis=0))",
                            f"m_safe = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
                            "s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(v - m_safe[None, :]), axis=0)",
                            "m = m_new"])
            if split == 1:
                lines += [f"res = tl.where(m == {NEG_INF}, m, m + tl.log(s))"]
            else:
                lines += ["res = m"]
        else:  # var / std: the slice's mean, then the sum of squared deviations from it
            lines += [f"acc = tl.zeros({tile}, tl.float32)"]
            lines += chunk(["acc += v"])
            lines += ["count = tl.maximum(r_hi - r_lo, 0).to(tl.float32)",
                      "mean = tl.sum(acc, axis=0) / tl.maximum(count, 1.0)",
                      f"acc2 = tl.zeros({tile}, tl.float32)"]
            lines += chunk(["d = tl.where(mask, v - mean[None, :], 0.0)", "acc2 += d * d"])
            lines += ["m2 = tl.sum(acc2, axis=0)"]
            if split == 1:
                lines += ["res = m2 / tl.maximum(R - var_corr, 0).to(tl.float32)"]
                if op == "std":
                    lines.append("res = tl.sqrt(res)")
            else:
                lines += ["res = mean"]
        out_ty = "out_ptr.dtype.element_ty" if split == 1 or op in ("argmax", "argmin") else "tl.float32"
        lines.append(f"tl.store(out_ptr + {out_off}, res.to({out_ty}), mask=imask)")
        if split > 1 and op in ("argmax", "argmin"):
            lines.append(f"tl.store(aux_ptr + {out_off}, best, mask=imask)")
        elif split > 1 and op == "logsumexp":
            lines.append(f"tl.store(aux_ptr + {out_off}, s, mask=imask)")
        elif split > 1 and op in ("var", "std"):
            lines.append(f"tl.store(aux_ptr + {out_off}, m2, mask=imask)")
        if op in ("var", "std") and split == 1:
            params.insert(params.index("r_per_split") + 1, "var_corr")
        out = []
        if op == "prod":
            out += ["@triton.jit", f"def {name}_mul(a, b):", "    return a * b", ""]
        out += ["@triton.jit", f"def {name}_kernel({', '.join(params)}):"]
        out += ["    " + ln for ln in head + lines]
        return "\n".join(out) + "\n"

    def _launcher(self, spec: ReduceNDSpec, config: dict[str, Any], name: str) -> str:
        op, split = spec.op, config["SPLIT"]
        br, bi = config["BLOCK_R"], config["BLOCK_I"]
        outer, R, inner = spec.outer, spec.R, spec.inner
        body = [_device_of(spec.inputs)] + _launcher_inputs(spec.inputs, repr(tuple(spec.in_shape)))
        odt = TORCH_DTYPE[spec.out_dtype]
        has_aux = op in ("argmax", "argmin", "logsumexp", "var", "std")
        r_per = -(-(-(-R // split)) // br) * br  # each slice a whole number of chunks
        n_slices = -(-R // r_per)  # SPLIT or fewer, where rounding slices up to chunks leaves the last ones empty
        if split == 1:
            body.append(f"out = torch.empty(({outer * inner},), dtype={odt}, device=dev)")
        else:
            pdt = "torch.int64" if op in ("argmax", "argmin") else "torch.float32"
            body.append(f"out = torch.empty(({n_slices}, {outer * inner}), dtype={pdt}, device=dev)")
            if has_aux:
                body.append(f"aux = torch.empty(({n_slices}, {outer * inner}), dtype=torch.float32, device=dev)")
        args = [f"p_{i.name}" for i in spec.inputs] + ["out"] + (["aux"] if split > 1 and has_aux else [])
        args += [str(R), str(inner), str(r_per)]
        if op in ("var", "std") and split == 1:
            args.append(str(int(spec.correction)))
        grid = f"({outer * -(-inner // bi)}, {n_slices})"
        body.append(f"{name}_kernel[{grid}]({', '.join(args)}, BLOCK_R={br}, BLOCK_I={bi}, "
                    f"num_warps={config['num_warps']})")
        if split > 1:
            # the slices' partials, combined in a fixed order (deterministic)
            counts = [min(r_per, R - s * r_per) for s in range(n_slices)]
            if op in ("sum", "mean", "norm2"):
                body.append("res = out.sum(0)")
                if op == "mean":
                    body.append(f"res = res / {R}")
                elif op == "norm2":
                    body.append("res = res.sqrt()")
            elif op == "prod":
                body.append("res = out.prod(0)")
            elif op in ("max", "min"):
                body.append(f"res = out.a{op}(0)")
            elif op in ("argmax", "argmin"):
                # the first slice holding the best value (argmax/argmin of the slices' bests picks the first)
                body += [f"pick = aux.{op}(0, keepdim=True)", "res = out.gather(0, pick).squeeze(0)"]
            elif op == "logsumexp":
                body += ["m = out.amax(0)", "m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)",
                         "res = m_safe + (aux * torch.exp(out - m_safe)).sum(0).log()"]
            else:
                body += [f"n = torch.tensor({counts!r}, dtype=torch.float32, device=dev)[:, None]",
                         f"mean = (out * n).sum(0) / {R}",
                         "m2 = (aux + n * (out - mean) ** 2).sum(0)",
                         f"res = m2 / {float(max(R - int(spec.correction), 0))!r}"]
                if op == "std":
                    body.append("res = res.sqrt()")
            body.append(f"out = res.to({odt})")
        body.append(f"return out.view({tuple(spec.out_shape)!r})")
        params = [f"p_{i.name}" for i in spec.inputs]
        return f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in body)


# ------------------------------------------------------------------------------------------------------ scan

def _tile_problem(config: dict[str, Any], block_key: str, length_name: str, length: int, inner: int) -> str | None:
    """The rules a [block, BLOCK_I] tile over one walked dim (scanned, normalised) and the inner positions keeps."""
    bl, bi, warps = config[block_key], config["BLOCK_I"], config["num_warps"]
    for key, v in ((block_key, bl), ("BLOCK_I", bi)):
        if _pow2(key, v):
            return _pow2(key, v)
    if warps not in WARPS:
        return f"num_warps {warps} not in {WARPS}"
    if inner == 1 and bi != 1:
        return "inner is 1: BLOCK_I must be 1"
    if inner > 1 and bi > max(16, next_pow2(inner)):
        return f"BLOCK_I {bi} wider than the {inner} inner positions"
    if bl > max(1, next_pow2(length)):
        return f"{block_key} {bl} longer than {length_name} = {length}"
    budget = register_budget(ELEMS_PER_THREAD, warps)
    if bl * bi / (32 * warps) > budget:
        return f"{bl}x{bi} tile over {32 * warps} threads: more than {budget:.0f} elements a thread (spills)"
    return threads_check(warps, bl * bi)


@dataclasses.dataclass(frozen=True)
class ScanNDSpec:
    """op along L of the [outer, L, inner] view of `expr`'s value (shape `shape`); the output has that shape and
    `out_dtype`. reverse: from the last position to the first; exclusive: each position gets the scan of the ones
    before it."""
    op: str
    outer: int
    L: int
    inner: int
    shape: tuple[int, ...]
    out_dtype: str
    expr: str
    inputs: tuple[EpilogueInput, ...]
    bool_inputs: tuple[str, ...] = ()
    reverse: bool = False
    exclusive: bool = False


def _scan_spec_problem(spec: ScanNDSpec) -> str | None:
    if spec.op not in SCAN_OPS:
        return f"unknown scan op {spec.op!r}; supported: {SCAN_OPS}"
    if min(spec.outer, spec.L, spec.inner) < 1:
        return "outer, L and inner must be >= 1"
    numel = 1
    for d in spec.shape:
        numel *= d
    if numel != spec.outer * spec.L * spec.inner:
        return f"shape {spec.shape} has {numel} elements, not outer*L*inner"
    if spec.out_dtype not in FLOAT_DTYPES:
        return f"out_dtype {spec.out_dtype!r} not in {FLOAT_DTYPES}"
    return _inputs_problem(spec.expr, spec.inputs, spec.bool_inputs)


class ScanNDFamily:
    """Config: BLOCK_L (scanned positions a chunk), BLOCK_I (inner positions a program; 1 when inner == 1),
    num_warps."""
    name = "scan_nd"
    template_version = 1  # see base.Family

    def space(self, spec: ScanNDSpec) -> list[dict[str, Any]]:
        bi = (1,) if spec.inner == 1 else BLOCK_I_CHOICES[1:]
        return grid_space(BLOCK_L=BLOCK_R_CHOICES, BLOCK_I=bi, num_warps=WARPS)

    def check(self, spec: ScanNDSpec, config: dict[str, Any]) -> str | None:
        problem = _scan_spec_problem(spec)
        if problem:
            return problem
        return _tile_problem(config, "BLOCK_L", "L", spec.L, spec.inner)

    def default(self, spec: ScanNDSpec) -> dict[str, Any]:
        bi = 1 if spec.inner == 1 else min(64, max(16, next_pow2(spec.inner)))
        bl = min(next_pow2(spec.L), max(1, 2048 // bi))
        config = {"BLOCK_L": bl, "BLOCK_I": bi, "num_warps": max(1, min(8, bl * bi // 256))}
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: ScanNDSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        mul = spec.op == "cumprod"
        ident = "1.0" if mul else "0.0"
        expr = _substitute(spec.expr, spec.inputs)
        # logical position j (scan order) -> physical r; exclusive scans read position j - 1
        phys = "(L - 1 - j)" if spec.reverse else "j"
        src = "(j - 1)" if spec.exclusive else "j"
        src_phys = f"(L - 1 - {src})" if spec.reverse else src
        last = (f"tl.max(tl.where(offs[:, None] == BLOCK_L - 1, c, {NEG_INF}), axis=0)" if mul else
                "tl.sum(tl.where(offs[:, None] == BLOCK_L - 1, c, 0.0), axis=0)")
        params = [f"p_{i.name}_ptr" for i in spec.inputs] + ["out_ptr", "L", "inner", "BLOCK_L: tl.constexpr",
                                                              "BLOCK_I: tl.constexpr"]
        body = ["pid = tl.program_id(0)",
                "n_ib = tl.cdiv(inner, BLOCK_I)",
                "o = pid // n_ib",
                "icol = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)",
                "imask = icol < inner",
                "base = o.to(tl.int64) * L * inner",
                "offs = tl.arange(0, BLOCK_L)",
                f"carry = tl.full([BLOCK_I], {ident}, tl.float32)",
                "for start in range(0, L, BLOCK_L):",
                "    j = start + offs",
                "    out_mask = (j < L)[:, None] & imask[None, :]",
                f"    smask = ((j < L) & ({src} >= 0))[:, None] & imask[None, :]",
                f"    off = base + {src_phys}.to(tl.int64)[:, None] * inner + icol[None, :]"]
        body += ["    " + ln for ln in _loads(spec.inputs, spec.bool_inputs, "smask", "off")]
        body += [f"    v = tl.where(smask, ({expr}).to(tl.float32), {ident})"]
        if mul:
            body += [f"    c = tl.associative_scan(v, 0, {name}_mul) * carry[None, :]"]
        else:
            body += ["    c = tl.cumsum(v, axis=0) + carry[None, :]"]
        body += [f"    o_off = base + {phys}.to(tl.int64)[:, None] * inner + icol[None, :]",
                 "    tl.store(out_ptr + o_off, c.to(out_ptr.dtype.element_ty), mask=out_mask)",
                 # the running total is the chunk's last prefix (masked lanes hold the identity). Not a reduction of
                 # v accumulated beside the scan: that crashes Triton 3.6's thread-locality pass on sm_90
                 f"    carry = {last}"]
        kernel = []
        if mul:
            kernel += ["@triton.jit", f"def {name}_mul(a, b):", "    return a * b", ""]
        kernel += ["@triton.jit", f"def {name}_kernel({', '.join(params)}):"] + ["    " + ln for ln in body]
        bi = config["BLOCK_I"]
        lb = [_device_of(spec.inputs)] + _launcher_inputs(spec.inputs, repr(tuple(spec.shape)))
        lb += [f"out = torch.empty({tuple(spec.shape)!r}, dtype={TORCH_DTYPE[spec.out_dtype]}, device=dev)",
               f"{name}_kernel[({spec.outer * -(-spec.inner // bi)},)]("
               f"{', '.join([f'p_{i.name}' for i in spec.inputs])}, out, {spec.L}, {spec.inner}, "
               f"BLOCK_L={config['BLOCK_L']}, BLOCK_I={bi}, num_warps={config['num_warps']})",
               "return out"]
        launcher = (f"def {name}({', '.join(f'p_{i.name}' for i in spec.inputs)}):\n"
                    + "".join(f"    {ln}\n" for ln in lb))
        return Rendered("\n".join(kernel) + "\n", launcher)


# ------------------------------------------------------------------------------------------------------ softmax

@dataclasses.dataclass(frozen=True)
class SoftmaxNDSpec:
    """op along R of the [outer, R, inner] view of `expr`'s value (shape `shape`); the output has that shape and
    `out_dtype`."""
    op: str
    outer: int
    R: int
    inner: int
    shape: tuple[int, ...]
    out_dtype: str
    expr: str
    inputs: tuple[EpilogueInput, ...]
    bool_inputs: tuple[str, ...] = ()


def _softmax_spec_problem(spec: SoftmaxNDSpec) -> str | None:
    if spec.op not in SOFTMAX_OPS:
        return f"unknown op {spec.op!r}; supported: {SOFTMAX_OPS}"
    if min(spec.outer, spec.R, spec.inner) < 1:
        return "outer, R and inner must be >= 1"
    numel = 1
    for d in spec.shape:
        numel *= d
    if numel != spec.outer * spec.R * spec.inner:
        return f"shape {spec.shape} has {numel} elements, not outer*R*inner"
    if spec.out_dtype not in FLOAT_DTYPES:
        return f"out_dtype {spec.out_dtype!r} not in {FLOAT_DTYPES}"
    return _inputs_problem(spec.expr, spec.inputs, spec.bool_inputs)


class SoftmaxNDFamily:
    """Config: BLOCK_R (positions of R a chunk; >= R: one pass in registers), BLOCK_I (inner positions a program;
    1 when inner == 1), num_warps."""
    name = "softmax_nd"
    template_version = 1  # see base.Family

    def space(self, spec: SoftmaxNDSpec) -> list[dict[str, Any]]:
        bi = (1,) if spec.inner == 1 else BLOCK_I_CHOICES[1:]
        return grid_space(BLOCK_R=BLOCK_R_CHOICES, BLOCK_I=bi, num_warps=WARPS)

    def check(self, spec: SoftmaxNDSpec, config: dict[str, Any]) -> str | None:
        problem = _softmax_spec_problem(spec)
        if problem:
            return problem
        return _tile_problem(config, "BLOCK_R", "R", spec.R, spec.inner)

    def default(self, spec: SoftmaxNDSpec) -> dict[str, Any]:
        """The whole of R in registers where it fits a 4096-element tile, else chunks of it."""
        bi = 1 if spec.inner == 1 else min(64, max(16, next_pow2(spec.inner)))
        br = min(next_pow2(spec.R), max(1, 4096 // bi))
        config = {"BLOCK_R": br, "BLOCK_I": bi, "num_warps": max(1, min(8, br * bi // 256))}
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: SoftmaxNDSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        br, bi = config["BLOCK_R"], config["BLOCK_I"]
        expr = _substitute(spec.expr, spec.inputs)
        log = spec.op == "log_softmax"
        params = [f"p_{i.name}_ptr" for i in spec.inputs] + ["out_ptr", "R", "inner", "BLOCK_R: tl.constexpr",
                                                              "BLOCK_I: tl.constexpr"]
        body = ["pid = tl.program_id(0)",
                "n_ib = tl.cdiv(inner, BLOCK_I)",
                "o = pid // n_ib",
                "icol = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)",
                "imask = icol < inner",
                "base = o.to(tl.int64) * R * inner",
                "offs_r = tl.arange(0, BLOCK_R)"]

        def load(indent: str) -> list[str]:
            lines = ["r = start + offs_r",
                     "mask = (r < R)[:, None] & imask[None, :]",
                     "off = base + r.to(tl.int64)[:, None] * inner + icol[None, :]"]
            lines += _loads(spec.inputs, spec.bool_inputs, "mask", "off")
            lines += [f"v = tl.where(mask, ({expr}).to(tl.float32), {NEG_INF})"]
            return [indent + ln for ln in lines]

        def store(indent: str) -> list[str]:
            res = "v - m[None, :] - tl.log(s)[None, :]" if log else "tl.exp(v - m[None, :]) / s[None, :]"
            return [indent + "tl.store(out_ptr + off, (" + res + ").to(out_ptr.dtype.element_ty), mask=mask)"]

        if br >= spec.R:  # one pass: the tile holds the whole of R
            body += ["start = 0"] + load("")
            body += ["m = tl.max(v, axis=0)", "s = tl.sum(tl.exp(v - m[None, :]), axis=0)"] + store("")
        else:
            body += [f"m = tl.full([BLOCK_I], {NEG_INF}, tl.float32)", "s = tl.zeros([BLOCK_I], tl.float32)",
                     "for start in range(0, R, BLOCK_R):"] + load("    ")
            body += ["    m_new = tl.maximum(m, tl.max(v, axis=0))",
                     f"    m_safe = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
                     "    s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(v - m_safe[None, :]), axis=0)",
                     "    m = m_new",
                     "for start in range(0, R, BLOCK_R):"] + load("    ") + store("    ")
        kernel = ["@triton.jit", f"def {name}_kernel({', '.join(params)}):"] + ["    " + ln for ln in body]
        lb = [_device_of(spec.inputs)] + _launcher_inputs(spec.inputs, repr(tuple(spec.shape)))
        lb += [f"out = torch.empty({tuple(spec.shape)!r}, dtype={TORCH_DTYPE[spec.out_dtype]}, device=dev)",
               f"{name}_kernel[({spec.outer * -(-spec.inner // bi)},)]("
               f"{', '.join([f'p_{i.name}' for i in spec.inputs])}, out, {spec.R}, {spec.inner}, "
               f"BLOCK_R={br}, BLOCK_I={bi}, num_warps={config['num_warps']})",
               "return out"]
        launcher = (f"def {name}({', '.join(f'p_{i.name}' for i in spec.inputs)}):\n"
                    + "".join(f"    {ln}\n" for ln in lb))
        return Rendered("\n".join(kernel) + "\n", launcher)


REDUCE_ND = ReduceNDFamily()
SCAN_ND = ScanNDFamily()
SOFTMAX_ND = SoftmaxNDFamily()
