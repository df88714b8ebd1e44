"""Reductions over any dims and scans along any dim, with the elementwise chain that feeds them fused (reduce_nd and
scan_nd families).

- `chain_reduction` (whole): a reduction whose input is a chain of pointwise nodes used by nothing else, e.g.
  mean((a - b) ** 2), mean(clamp(1 - p * t, min=0)), sum(xlogy(t, t) - t * log(p)): one kernel computes the term
  and reduces it. Registered as a whole pattern so the chain is not claimed first by an elementwise group.
- `plain_reduction` (single): sum / mean / amax / amin / max.dim / min.dim / argmax / argmin / prod / logsumexp / var /
  std / 2-norm over any contiguous run of dims, keepdim, dtype. Leaves to the built-in row and column groups what
  they already compute (one last dim; dim 0 of a 2-D tensor).
- `chain_scan` (whole): cumsum / cumprod along any dim, reversed (flip -> cumsum -> flip over that dim), of a fused
  chain (cumsum(x * mask)); `exclusive_scan` (whole): cat((zeros, cumsum(x.narrow(d, 0, L - 1))), d).

- `softmax_over_dim` (whole): softmax / log_softmax along a dim that is not the last (the row family has that one),
  e.g. the channel softmax after a convolution, with the pointwise chain feeding it fused (softmax_nd family).

Reduced dims that are not one contiguous run of dims (e.g. dims (0, 2) of a 3-D tensor) stay torch calls.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ...kernels.base import EpilogueInput
from ...kernels.reduce_nd import ReduceNDSpec, ScanNDSpec, SoftmaxNDSpec
from ..group import DTYPE, Group, val
from ..lowering import lower, lowerable, schema_args
from . import Context, register

aten = torch.ops.aten

# aten op -> (family op, name of its dims argument or None for all dims)
REDUCTIONS = {
    aten.sum.dim_IntList: ("sum", "dim"), aten.sum.default: ("sum", None),
    aten.mean.dim: ("mean", "dim"), aten.mean.default: ("mean", None),
    aten.amax.default: ("max", "dim"), aten.amin.default: ("min", "dim"),
    aten.max.dim: ("max", "dim"), aten.min.dim: ("min", "dim"),
    aten.argmax.default: ("argmax", "dim"), aten.argmin.default: ("argmin", "dim"),
    aten.prod.dim_int: ("prod", "dim"), aten.prod.default: ("prod", None),
    aten.logsumexp.default: ("logsumexp", "dim"),
    aten.var.correction: ("var", "dim"), aten.std.correction: ("std", "dim"),
    aten.norm.ScalarOpt_dim: ("norm2", "dim"), aten.linalg_vector_norm.default: ("norm2", "dim"),
}
# what the partitioner's own row / column groups lower (it imports this package, so its tables can't be imported)
BUILTIN_ROW = {aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.argmax.default, aten.var.correction,
               aten.logsumexp.default}
SCANS = {aten.cumsum.default: "cumsum", aten.cumprod.default: "cumprod"}


def _extra_lowering(node: Node, expr_of) -> str | None:
    """Pointwise ops the shared lowering table lacks that losses are written with."""
    if node.target == aten.xlogy.Tensor and all(isinstance(a, Node) for a in node.args[:2]):
        a, b = expr_of(node.args[0]), expr_of(node.args[1])
        # torch: 0 where x == 0 (unless y is nan), else x * log(y)
        return f"tl.where((({a}) == 0.0) & (({b}) == ({b})), 0.0, ({a}) * tl.log({b}))"
    return None


def _pointwise(node: Node) -> bool:
    if not isinstance(node, Node):
        return False
    if lowerable(node):
        return True
    return node.op == "call_function" and node.target == aten.xlogy.Tensor and \
        isinstance(val(node), torch.Tensor) and val(node).is_floating_point()


def _chain(ctx: Context, x: Node) -> tuple[list[Node], str, list[Node]] | None:
    """(members, expression, external inputs) of the pointwise chain ending at x and used only inside it (x itself
    only by the reduction); None when x is not pointwise."""
    if not _pointwise(x) or x in ctx.taken or len(x.users) != 1:
        return None
    members = {x}
    frontier = [x]
    while frontier:
        cur = frontier.pop()
        for a in cur.all_input_nodes:
            if a not in members and _pointwise(a) and a not in ctx.taken and all(u in members for u in a.users):
                members.add(a)
                frontier.append(a)
    inputs: list[Node] = []
    memo: dict[Node, str] = {}

    def expr_of(n: Node) -> str:
        if n in memo:
            return memo[n]
        if n in members:
            memo[n] = _extra_lowering(n, expr_of) or lower(n, expr_of)
            return memo[n]
        if n not in inputs:
            inputs.append(n)
        return ctx.names[n]

    expr = expr_of(x)
    return [n for n in ctx.part.nodes if n in members], expr, inputs


def _operands(ctx: Context, x: Node, fuse_chain: bool, shape: tuple[int, ...]):
    """(chain nodes, expr, EpilogueInputs, bool input names, launcher args) for the value x, or None."""
    found = _chain(ctx, x) if fuse_chain else None
    if found is None:
        if not isinstance(x, Node):
            return None
        nodes, expr, inputs = [], ctx.names[x], [x]
    else:
        nodes, expr, inputs = found
    eis, bools = [], []
    for i in inputs:
        v = val(i)
        if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float32, torch.bfloat16, torch.float16,
                                                               torch.bool, torch.int64, torch.int32):
            return None
        try:
            if tuple(torch.broadcast_shapes(tuple(v.shape), shape)) != shape:
                return None
        except RuntimeError:
            return None
        eis.append(EpilogueInput(ctx.names[i], "scalar" if v.numel() == 1 else "full"))
        if v.dtype == torch.bool:
            bools.append(ctx.names[i])
    if not any(e.kind == "full" for e in eis) or any(not e.name.isidentifier() for e in eis):
        return None
    return nodes, expr, tuple(eis), tuple(bools), [ctx.names[i] for i in inputs]


def _split(shape: tuple[int, ...], dims: list[int]) -> tuple[int, int, int] | None:
    """(outer, R, inner) when dims are one contiguous run of dims."""
    dims = sorted(set(dims))
    if not dims or dims != list(range(dims[0], dims[-1] + 1)):
        return None
    outer = R = inner = 1
    for d, n in enumerate(shape):
        if d < dims[0]:
            outer *= n
        elif d <= dims[-1]:
            R *= n
        else:
            inner *= n
    return outer, R, inner


def _dims(b: dict[str, Any], key: str | None, rank: int) -> list[int] | None:
    dims = b.get(key) if key else None
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return [d % max(rank, 1) for d in dims]


def _reduction(ctx: Context, node: Node, fuse_chain: bool) -> Group | None:
    if node.op != "call_function" or node.target not in REDUCTIONS or node in ctx.taken:
        return None
    op, key = REDUCTIONS[node.target]
    b = schema_args(node)
    x = b.get("self", b.get("input"))
    vx = val(x)
    if not isinstance(vx, torch.Tensor) or vx.dim() < 1 or vx.numel() == 0:
        return None
    rank = vx.dim()
    dims = _dims(b, key, rank)
    if op == "norm2":
        p = b.get("p", b.get("ord", 2))
        if p is None:
            p = 2
        if float(p) != 2.0 or b.get("dtype") not in (None, vx.dtype):
            return None
    if op in ("argmax", "argmin") and b.get("dim") is None:
        dims = list(range(rank))  # over the flattened tensor: the index into x.reshape(-1)
    split = _split(tuple(vx.shape), dims)
    if split is None:
        return None
    shape = tuple(vx.shape)
    out = node
    nodes = [node]
    if node.target in (aten.max.dim, aten.min.dim):  # (values, indices): one of them may be used
        used = [u for u in node.users if u.users]
        if len(used) != 1 or used[0].target is not operator.getitem:
            return None
        out = used[0]
        if out.args[1] == 1:
            op = "argmax" if op == "max" else "argmin"
        nodes += list(node.users)
    correction = 1
    if op in ("var", "std"):
        c = b.get("correction")
        correction = 1 if c is None else c
        if float(correction) != int(correction):
            return None
    vout = val(out)
    if not isinstance(vout, torch.Tensor):
        return None
    out_dtype = "int64" if op in ("argmax", "argmin") else DTYPE.get(vout.dtype)
    if out_dtype is None or (op in ("argmax", "argmin") and vout.dtype != torch.int64):
        return None
    operands = _operands(ctx, x, fuse_chain, shape)
    if operands is None:
        return None
    chain, expr, eis, bools, args = operands
    if fuse_chain and not chain:
        return None
    if not fuse_chain and rank >= 1:
        # what the built-in groups already compute: a reduction over the last dim, or over dim 0 of a 2-D tensor
        if node.target in BUILTIN_ROW and dims == [rank - 1] and b.get("dim") is not None and \
                ctx.part.row_group(node, ctx.names) is not None:
            return None
        if node.target in BUILTIN_ROW and ctx.part.col_group(node, ctx.names) is not None:
            return None
    if fuse_chain and node.target == aten.mean.dim and ctx.part.rmsnorm_group(node, ctx.names) is not None:
        return None  # rmsnorm written out: the row family computes it whole
    spec = ReduceNDSpec(op, *split, shape, tuple(vout.shape), out_dtype, expr, eis, bools, int(correction))
    return Group("reduce_nd", out, chain + nodes, args, spec)


def chain_reduction(ctx: Context, node: Node) -> Group | None:
    return _reduction(ctx, node, fuse_chain=True)


def plain_reduction(ctx: Context, node: Node) -> Group | None:
    return _reduction(ctx, node, fuse_chain=False)


def _flip_of(n: Any, dim: int, rank: int) -> bool:
    return isinstance(n, Node) and n.target == aten.flip.default and \
        [d % rank for d in n.args[1]] == [dim]


def _scan(ctx: Context, node: Node, exclusive_of: Node | None = None) -> Group | None:
    """node: a cumsum/cumprod. exclusive_of: x, when node scans x.narrow(dim, 0, L - 1) for an exclusive scan."""
    if node.op != "call_function" or node.target not in SCANS or node in ctx.taken:
        return None
    b = schema_args(node)
    x = b["self"]
    vx = val(x)
    if not isinstance(vx, torch.Tensor) or vx.dim() < 1 or vx.numel() == 0 or \
            b.get("dtype") not in (None, vx.dtype) or vx.dtype not in DTYPE:
        return None
    rank = vx.dim()
    dim = b["dim"] % rank
    nodes: list[Node] = [node]
    out = node
    reverse = False
    if exclusive_of is not None:
        src = exclusive_of
    elif _flip_of(x, dim, rank) and len(x.users) == 1 and len(node.users) == 1 and \
            _flip_of(next(iter(node.users)), dim, rank):
        reverse = True
        nodes.append(x)
        out = next(iter(node.users))
        nodes.append(out)
        src = x.args[0]
    else:
        src = x
    shape = tuple(val(src).shape)
    operands = _operands(ctx, src, True, shape) or _operands(ctx, src, False, shape)
    if operands is None:
        return None
    chain, expr, eis, bools, args = operands
    if not chain and not reverse and exclusive_of is None and SCANS[node.target] == "cumsum" and dim == rank - 1:
        return None  # the built-in scan group computes a plain forward cumsum over the last dim
    outer, L, inner = _split(shape, [dim])
    vout = val(out)
    spec = ScanNDSpec(SCANS[node.target], outer, L, inner, shape, DTYPE[vout.dtype], expr, eis, bools,
                      reverse=reverse, exclusive=exclusive_of is not None)
    return Group("scan_nd", out, chain + nodes, args, spec)


def chain_scan(ctx: Context, node: Node) -> Group | None:
    return _scan(ctx, node)


def exclusive_scan(ctx: Context, node: Node) -> Group | None:
    """cat((zeros of x's shape with size 1 along dim, scan(x.narrow(dim, 0, L - 1), dim)), dim)."""
    if node.op != "call_function" or node.target != aten.cat.default:
        return None
    tensors = node.args[0]
    if len(tensors) != 2 or not all(isinstance(t, Node) for t in tensors):
        return None
    zeros, scan = tensors
    if scan.target not in SCANS or len(scan.users) != 1 or len(zeros.users) != 1:
        return None
    rank = val(scan).dim()
    dim = (node.args[1] if len(node.args) > 1 else 0) % rank
    if schema_args(scan)["dim"] % rank != dim:
        return None
    sl = scan.args[0]
    if not (isinstance(sl, Node) and sl.target == aten.slice.Tensor and len(sl.users) == 1):
        return None
    sb = schema_args(sl)
    x = sb["self"]
    L = val(x).shape[dim]
    if sb["dim"] % rank != dim or (sb.get("start") or 0) != 0 or sb.get("end") != L - 1 or sb.get("step", 1) != 1:
        return None
    if tuple(val(node).shape) != tuple(val(x).shape) or val(zeros).shape[dim] != 1:
        return None
    # the zeros: zeros_like / zeros / new_zeros of the right shape, possibly of a select + unsqueeze of x
    pieces = [zeros]
    if zeros.target not in (aten.zeros_like.default, aten.zeros.default, aten.new_zeros.default):
        return None
    cur = zeros.args[0] if zeros.target == aten.zeros_like.default else None
    while isinstance(cur, Node) and cur.target in (aten.unsqueeze.default, aten.select.int) and len(cur.users) == 1:
        pieces.append(cur)
        cur = cur.args[0]
    if zeros.target == aten.zeros_like.default and cur is not x:
        return None
    kind = SCANS[scan.target]
    if kind != "cumsum":
        return None  # an exclusive cumprod starts from ones, not zeros
    g = _scan(ctx, scan, exclusive_of=x)
    if g is None:
        return None
    return Group("scan_nd", node, g.nodes + [sl] + pieces + [node], g.args, g.spec)


SOFTMAXES = {aten._softmax.default: "softmax", aten._log_softmax.default: "log_softmax"}


def softmax_over_dim(ctx: Context, node: Node) -> Group | None:
    if node.op != "call_function" or node.target not in SOFTMAXES or node in ctx.taken:
        return None
    x, dim, half_to_float = node.args[:3]
    vx, vout = val(x), val(node)
    if not isinstance(vx, torch.Tensor) or vx.dim() < 2 or vx.numel() == 0 or half_to_float or \
            vout.dtype not in DTYPE or vx.dtype != vout.dtype:
        return None
    rank = vx.dim()
    dim = dim % rank
    if dim == rank - 1:
        return None  # the row family's
    shape = tuple(vx.shape)
    operands = _operands(ctx, x, True, shape) or _operands(ctx, x, False, shape)
    if operands is None:
        return None
    chain, expr, eis, bools, args = operands
    spec = SoftmaxNDSpec(SOFTMAXES[node.target], *_split(shape, [dim]), shape, DTYPE[vout.dtype], expr, eis, bools)
    return Group("softmax_nd", node, chain + [node], args, spec)


register(whole=(exclusive_scan, chain_scan, chain_reduction, softmax_over_dim), single=(plain_reduction,))
