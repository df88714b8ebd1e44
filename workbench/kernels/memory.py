"""Memory movement: permute-and-copy (`PermuteSpec`, `PermuteFamily`) and embedding gathers (`GatherSpec`,
`GatherFamily`). Data moves in its own dtype (no arithmetic), so every dtype is exact.

Permute: out = x.permute(perm).contiguous() for 1-D to 4-D x. At render time size-1 axes are dropped and input axes
that stay adjacent, in order, in the output are merged (NCHW -> NHWC is [N, C, H*W] -> [N, H*W, C]); the launcher
makes x contiguous and views it with the merged sizes. Then either
- "transpose": the input's last (contiguous) axis A moves; the output's last axis B comes from another input axis.
  A program loads a [BLOCK_B, BLOCK_A] tile coalesced along A, and stores its `tl.trans` coalesced along B (the
  compiler stages the transpose through shared memory). The remaining (at most two) axes and both tile indices are
  flattened into grid axis 0.
- "copy": the last axis stays last; a strided copy of rows: [BLOCK_A rows, BLOCK_B columns] tiles of the output
  viewed as [R, L], each output row read from its input row.
Config: BLOCK_A, BLOCK_B (transpose: 16..128 each; copy: BLOCK_A rows 1..64, BLOCK_B columns 16..1024), num_warps.

Gather: out[i, :] = weight[idx[i], :] (torch.nn.functional.embedding) for an index tensor of any shape; the result
has shape idx.shape + (dim,). Programs own ROWS_PER_PROGRAM indices x BLOCK_D columns. Indices are not bounds-checked.
Launcher: `def name(idx, weight)`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._common import next_pow2, register_budget, threads_check
from .base import DTYPE_BYTES, SHARED_LIMIT, Rendered, grid_space

DTYPES = ("float32", "bfloat16", "float16", "float64", "int64", "int32")
PERMUTE_WARPS = (1, 2, 4, 8, 16)
TRANSPOSE_BLOCKS = (16, 32, 64, 128)
COPY_ROWS = (1, 2, 4, 8, 16, 32, 64)
COPY_COLS = (16, 32, 64, 128, 256, 512, 1024)
# Tile elements per thread that stay in registers: 64-bit addresses for loads and stores cost more registers than
# the data (sm_90 compiles: a 64x64 fp32 transpose over 1 warp, 128 a thread, 162 registers; 128x128 over 4 warps
# spills; a gather at 256 a thread spills). Shrinks in proportion where num_warps leaves fewer than 255 registers.
ELEMS_PER_THREAD = 64


def _regs_check(elements: int, elem_bytes: int, num_warps: int) -> str | None:
    threads = 32 * num_warps
    budget = register_budget(ELEMS_PER_THREAD, num_warps) / (2 if elem_bytes > 4 else 1)  # 8-byte data: two registers
    if elements / threads > budget:
        return f"{elements} elements over {threads} threads: {elements / threads:.0f} per thread > {budget:.0f} " \
               f"(registers would spill)"
    return None


# ------------------------------------------------------------------------------------------------------- permute

@dataclasses.dataclass(frozen=True)
class PermuteSpec:
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class _Plan:
    """The merged problem: `groups` are lists of input axes, in output order; `perm` the merged permutation."""
    groups: tuple[tuple[int, ...], ...]  # in output order
    in_groups: tuple[tuple[int, ...], ...]  # in input order
    perm: tuple[int, ...]  # merged: output axis j is merged input axis perm[j]
    dropped: tuple[int, ...]  # size-1 input axes

    @property
    def kind(self) -> str:
        return "copy" if self.perm[-1] == len(self.perm) - 1 else "transpose"

    def sizes(self, shape: tuple[int, ...]) -> list[int]:
        """Merged input sizes for a concrete shape."""
        return [math.prod(shape[a] for a in g) for g in self.in_groups]


def _plan(spec: PermuteSpec) -> _Plan:
    nd = len(spec.shape)
    keep = [a for a in range(nd) if spec.shape[a] != 1]
    if not keep:
        keep = [nd - 1]
    position = {a: i for i, a in enumerate(keep)}
    groups: list[list[int]] = []
    for a in spec.perm:
        if a not in position:
            continue
        if groups and position[a] == position[groups[-1][-1]] + 1:
            groups[-1].append(a)
        else:
            groups.append([a])
    in_groups = sorted(groups, key=lambda g: g[0])
    perm = tuple(in_groups.index(g) for g in groups)
    return _Plan(tuple(map(tuple, groups)), tuple(map(tuple, in_groups)), perm,
                 tuple(a for a in range(nd) if a not in keep))


def _permute_problem(spec: PermuteSpec) -> str | None:
    if not 1 <= len(spec.shape) <= 4:
        return f"{len(spec.shape)}-D: 1-D to 4-D only"
    if sorted(spec.perm) != list(range(len(spec.shape))):
        return f"perm {spec.perm} is not a permutation of {len(spec.shape)} axes"
    if any(s < 1 for s in spec.shape):
        return f"shape {spec.shape} has an empty axis"
    if spec.dtype not in DTYPES:
        return f"dtype {spec.dtype!r} not supported; supported: {DTYPES}"
    return None


class PermuteFamily:
    """Config: BLOCK_A, BLOCK_B, num_warps (see the module docstring for what A and B are per kernel kind)."""
    name = "permute"
    template_version = 1  # see base.Family

    def plan(self, spec: PermuteSpec) -> _Plan:
        return _plan(spec)

    def space(self, spec: PermuteSpec) -> list[dict[str, Any]]:
        if _permute_problem(spec) is None and _plan(spec).kind == "copy":
            return grid_space(BLOCK_A=COPY_ROWS, BLOCK_B=COPY_COLS, num_warps=PERMUTE_WARPS)
        return grid_space(BLOCK_A=TRANSPOSE_BLOCKS, BLOCK_B=TRANSPOSE_BLOCKS, num_warps=PERMUTE_WARPS)

    def check(self, spec: PermuteSpec, config: dict[str, Any]) -> str | None:
        problem = _permute_problem(spec)
        if problem:
            return problem
        plan = _plan(spec)
        sizes = plan.sizes(spec.shape)
        ba, bb, warps = config["BLOCK_A"], config["BLOCK_B"], config["num_warps"]
        if warps not in PERMUTE_WARPS:
            return f"num_warps {warps} not in {PERMUTE_WARPS}"
        nbytes = DTYPE_BYTES[spec.dtype]
        if plan.kind == "copy":
            rows, cols = math.prod(sizes[a] for a in plan.perm[:-1]), sizes[-1]
            if ba not in COPY_ROWS or bb not in COPY_COLS:
                return f"copy: BLOCK_A in {COPY_ROWS}, BLOCK_B in {COPY_COLS}"
            if ba > next_pow2(rows):
                return f"copy: BLOCK_A {ba} rows > {rows} rows"
            if bb > max(COPY_COLS[0], next_pow2(cols)):
                return f"copy: BLOCK_B {bb} wider than the {cols} columns"
            return _regs_check(ba * bb, nbytes, warps) or threads_check(warps, ba * bb)
        size_a, size_b = sizes[-1], sizes[plan.perm[-1]]
        if ba not in TRANSPOSE_BLOCKS or bb not in TRANSPOSE_BLOCKS:
            return f"transpose: BLOCK_A and BLOCK_B in {TRANSPOSE_BLOCKS}"
        if ba > max(TRANSPOSE_BLOCKS[0], next_pow2(size_a)):
            return f"transpose: BLOCK_A {ba} > the {size_a} elements of the moving axis"
        if bb > max(TRANSPOSE_BLOCKS[0], next_pow2(size_b)):
            return f"transpose: BLOCK_B {bb} > the {size_b} elements of the output's last axis"
        if ba * bb * nbytes > SHARED_LIMIT:
            return "transpose tile larger than shared memory"
        return _regs_check(ba * bb, nbytes, warps) or threads_check(warps, ba * bb)

    def default(self, spec: PermuteSpec) -> dict[str, Any]:
        config = None
        if _permute_problem(spec) is None:
            plan = _plan(spec)
            sizes = plan.sizes(spec.shape)
            if plan.kind == "copy":
                rows, cols = math.prod(sizes[a] for a in plan.perm[:-1]), sizes[-1]
                bb = min(512, max(16, next_pow2(cols)))
                ba = min(64, next_pow2(rows), max(1, 4096 // bb))
            else:
                ba = min(64, max(16, next_pow2(sizes[-1])))
                bb = min(64, max(16, next_pow2(sizes[plan.perm[-1]])))
            config = {"BLOCK_A": ba, "BLOCK_B": bb, "num_warps": max(1, min(4, ba * bb // 256))}
            if self.check(spec, config) is None:
                return config
        valid = [c for c in self.space(spec) if self.check(spec, c) is None]
        # nearest to a 4096-element tile over 4 warps
        return min(valid, key=lambda c: (abs(math.log2(c["BLOCK_A"] * c["BLOCK_B"]) - 12),
                                         abs(math.log2(c["num_warps"]) - 2)))

    def render(self, spec: PermuteSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        plan = _plan(spec)
        nd, m = len(spec.shape), len(plan.perm)
        ba, bb, warps = config["BLOCK_A"], config["BLOCK_B"], config["num_warps"]

        # launcher prologue: merged sizes (from the runtime shape), contiguous strides, output
        size_exprs = [" * ".join(f"x.shape[{a}]" for a in g) for g in plan.in_groups]
        body = [f"assert x.dim() == {nd}, (tuple(x.shape), {nd})"]
        body += [f"assert x.shape[{a}] == 1, 'axis {a} was size 1 in the spec'" for a in plan.dropped]
        body += [f"out = torch.empty([x.shape[a] for a in {tuple(spec.perm)}], dtype=x.dtype, device=x.device)",
                 "x = x.contiguous()"]
        body += [f"n{i} = {e}" for i, e in enumerate(size_exprs)]
        # strides of the contiguous merged input: s_i = prod(n_{i+1..})
        for i in range(m):
            body.append(f"s{i} = " + (" * ".join(f"n{j}" for j in range(i + 1, m)) or "1"))
        body.append("if out.numel() == 0:")
        body.append("    return out")

        if plan.kind == "copy":
            lead = plan.perm[:-1]  # merged input axes of the output's leading dims, in output order
            k = len(lead)
            # output row r -> (o_0, .., o_{k-1}) over the output's leading sizes; source offset = sum o_j * s_{lead_j}
            params = ["x_ptr", "out_ptr", "R", "L"] + [f"d{j}" for j in range(1, k)] + [f"s{j}" for j in range(k)]
            lines = ["@triton.jit",
                     f"def {name}_kernel({', '.join(params)}, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr):",
                     "    pid = tl.program_id(0)",
                     "    n_b = tl.cdiv(L, BLOCK_B)",
                     "    r = (pid // n_b) * BLOCK_A + tl.arange(0, BLOCK_A)",
                     "    c = (pid % n_b) * BLOCK_B + tl.arange(0, BLOCK_B)",
                     "    mask = (r < R)[:, None] & (c < L)[None, :]"]
            # index arithmetic in int32 (64-bit division is a slow, register-hungry subroutine), offsets in int64
            if k == 0:
                lines.append("    src = r.to(tl.int64) * L")
            else:
                lines.append("    t = r")
                terms = []
                for j in range(k - 1, 0, -1):
                    lines += [f"    o{j} = t % d{j}", f"    t = t // d{j}"]
                    terms.append(f"o{j}.to(tl.int64) * s{j}")
                terms.append("t.to(tl.int64) * s0")
                lines.append(f"    src = {' + '.join(reversed(terms))}")
            lines += ["    v = tl.load(x_ptr + src[:, None] + c[None, :], mask=mask)",
                      "    tl.store(out_ptr + r.to(tl.int64)[:, None] * L + c[None, :], v, mask=mask)"]
            body += ["L = n" + str(m - 1),
                     "R = out.numel() // L"]
            args = ["x", "out", "R", "L"] + [f"n{lead[j]}" for j in range(1, k)] + [f"s{lead[j]}" for j in range(k)]
            body += [f"grid = (triton.cdiv(R, {ba}) * triton.cdiv(L, {bb}),)",
                     f"{name}_kernel[grid]({', '.join(args)}, BLOCK_A={ba}, BLOCK_B={bb}, num_warps={warps})",
                     "return out"]
        else:
            a_ax, b_ax = m - 1, plan.perm[-1]
            rest = [i for i in range(m) if i not in (a_ax, b_ax)]  # merged input axes, in input order
            # output strides of the merged output: output axis j has stride prod(out sizes after j)
            out_pos = {ax: j for j, ax in enumerate(plan.perm)}
            for j in range(m):
                body.append(f"os{j} = " + (" * ".join(f"n{plan.perm[i]}" for i in range(j + 1, m)) or "1"))
            params = ["x_ptr", "out_ptr", "LA", "LB", "sB", "oA"]
            params += [f"e{i}" for i in range(1, len(rest))]
            params += [f"ri{i}" for i in range(len(rest))] + [f"ro{i}" for i in range(len(rest))]
            lines = ["@triton.jit",
                     f"def {name}_kernel({', '.join(params)}, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr):",
                     "    pid = tl.program_id(0)",
                     "    n_a = tl.cdiv(LA, BLOCK_A)",
                     "    n_b = tl.cdiv(LB, BLOCK_B)",
                     "    pid_a = pid % n_a",
                     "    t = pid // n_a",
                     "    pid_b = t % n_b"]
            if rest:
                lines.append("    q = t // n_b")
                in_terms, out_terms = [], []
                for i in range(len(rest) - 1, 0, -1):
                    lines += [f"    q{i} = q % e{i}", f"    q = q // e{i}"]
                    in_terms.append(f"q{i}.to(tl.int64) * ri{i}")
                    out_terms.append(f"q{i}.to(tl.int64) * ro{i}")
                in_terms.append("q.to(tl.int64) * ri0")
                out_terms.append("q.to(tl.int64) * ro0")
                lines += [f"    in_base = {' + '.join(reversed(in_terms))}",
                          f"    out_base = {' + '.join(reversed(out_terms))}"]
            else:
                lines += ["    in_base = 0", "    out_base = 0"]
            lines += ["    a = pid_a * BLOCK_A + tl.arange(0, BLOCK_A)",
                      "    b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)",
                      "    a_mask = a < LA",
                      "    b_mask = b < LB",
                      "    # [BLOCK_B, BLOCK_A], coalesced along the input's contiguous axis A",
                      "    tile = tl.load(x_ptr + in_base + b.to(tl.int64)[:, None] * sB + a[None, :],",
                      "                   mask=b_mask[:, None] & a_mask[None, :])",
                      "    # [BLOCK_A, BLOCK_B], coalesced along the output's contiguous axis B",
                      "    tl.store(out_ptr + out_base + a.to(tl.int64)[:, None] * oA + b[None, :], tl.trans(tile),",
                      "             mask=a_mask[:, None] & b_mask[None, :])"]
            args = ["x", "out", f"n{a_ax}", f"n{b_ax}", f"s{b_ax}", f"os{out_pos[a_ax]}"]
            args += [f"n{rest[i]}" for i in range(1, len(rest))]
            args += [f"s{r}" for r in rest] + [f"os{out_pos[r]}" for r in rest]
            n_rest = " * ".join(f"n{r}" for r in rest) or "1"
            body += [f"grid = (triton.cdiv(n{a_ax}, {ba}) * triton.cdiv(n{b_ax}, {bb}) * {n_rest},)",
                     f"{name}_kernel[grid]({', '.join(args)}, BLOCK_A={ba}, BLOCK_B={bb}, num_warps={warps})",
                     "return out"]
        kernel = "\n".join(lines) + "\n"
        launcher = f"def {name}(x):\n" + "".join(f"    {ln}\n" for ln in body)
        return Rendered(kernel, launcher)


# -------------------------------------------------------------------------------------------------------- gather

GATHER_BLOCK_D = (32, 64, 128, 256, 512, 1024, 2048, 4096)
GATHER_ROWS = (1, 2, 4, 8, 16, 32)
GATHER_WARPS = (1, 2, 4, 8, 16)


@dataclasses.dataclass(frozen=True)
class GatherSpec:
    """Embedding lookup: weight [num_embeddings, dim] of `dtype`, indices of `index_dtype` ("int64" or "int32")."""
    num_embeddings: int
    dim: int
    dtype: str
    index_dtype: str = "int64"


class GatherFamily:
    """Config: BLOCK_D (columns per program), ROWS_PER_PROGRAM (indices per program), num_warps."""
    name = "gather"
    template_version = 1  # see base.Family

    def space(self, spec: GatherSpec) -> list[dict[str, Any]]:
        return grid_space(BLOCK_D=GATHER_BLOCK_D, ROWS_PER_PROGRAM=GATHER_ROWS, num_warps=GATHER_WARPS)

    def check(self, spec: GatherSpec, config: dict[str, Any]) -> str | None:
        if spec.dtype not in DTYPES:
            return f"dtype {spec.dtype!r} not supported; supported: {DTYPES}"
        if spec.index_dtype not in ("int64", "int32"):
            return f"index dtype {spec.index_dtype!r}: int64 or int32"
        if spec.dim < 1 or spec.num_embeddings < 1:
            return "dim and num_embeddings must be >= 1"
        bd, rows, warps = config["BLOCK_D"], config["ROWS_PER_PROGRAM"], config["num_warps"]
        if bd < 1 or bd & (bd - 1) or rows < 1 or rows & (rows - 1):
            return "BLOCK_D and ROWS_PER_PROGRAM must be powers of two"
        if warps not in GATHER_WARPS:
            return f"num_warps {warps} not in {GATHER_WARPS}"
        if bd > max(GATHER_BLOCK_D[0], next_pow2(spec.dim)):
            return f"BLOCK_D {bd} wider than dim {spec.dim}"
        return _regs_check(rows * bd, DTYPE_BYTES[spec.dtype], warps) or threads_check(warps, rows * bd)

    def default(self, spec: GatherSpec) -> dict[str, Any]:
        bd = min(1024, max(32, next_pow2(spec.dim)))
        rows = max(1, min(32, 1024 // bd))
        config = {"BLOCK_D": bd, "ROWS_PER_PROGRAM": rows, "num_warps": 4}
        if self.check(spec, config) is None:
            return config
        return next(c for c in self.space(spec) if self.check(spec, c) is None)

    def render(self, spec: GatherSpec, config: dict[str, Any], name: str) -> Rendered:
        problem = self.check(spec, config)
        if problem:
            raise ValueError(f"invalid config {config} for {spec}: {problem}")
        bd, rows, warps = config["BLOCK_D"], config["ROWS_PER_PROGRAM"], config["num_warps"]
        kernel = "\n".join([
            "@triton.jit",
            f"def {name}_kernel(idx_ptr, w_ptr, out_ptr, n_idx, dim, stride_w, BLOCK_D: tl.constexpr, "
            "ROWS: tl.constexpr):",
            "    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)",
            "    row_mask = rows < n_idx",
            "    idx = tl.load(idx_ptr + rows, mask=row_mask, other=0).to(tl.int64)",
            "    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)",
            "    mask = row_mask[:, None] & (cols < dim)[None, :]",
            "    v = tl.load(w_ptr + idx[:, None] * stride_w + cols[None, :], mask=mask)",
            "    tl.store(out_ptr + rows.to(tl.int64)[:, None] * dim + cols[None, :], v, mask=mask)"]) + "\n"
        body = [f"assert weight.dim() == 2 and weight.shape[1] == {spec.dim}, tuple(weight.shape)",
                "if weight.stride(1) != 1:",
                "    weight = weight.contiguous()",
                "flat = idx.reshape(-1)",
                "if flat.stride(0) != 1:",
                "    flat = flat.contiguous()",
                "n_idx, dim = flat.shape[0], weight.shape[1]",
                "out = torch.empty((n_idx, dim), dtype=weight.dtype, device=weight.device)",
                "if n_idx > 0:",
                f"    grid = (triton.cdiv(n_idx, {rows}), triton.cdiv(dim, {bd}))",
                f"    {name}_kernel[grid](flat, weight, out, n_idx, dim, weight.stride(0), BLOCK_D={bd}, ROWS={rows}, "
                f"num_warps={warps})",
                "return out.view(*idx.shape, dim)"]
        launcher = f"def {name}(idx, weight):\n" + "".join(f"    {ln}\n" for ln in body)
        return Rendered(kernel, launcher)


PERMUTE = PermuteFamily()
GATHER = GatherFamily()
