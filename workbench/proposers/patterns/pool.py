"""Pooling: the aten ops make_fx gives for nn.MaxPool*/AvgPool*/AdaptiveAvgPool*/AdaptiveMaxPool* and a mean over
every spatial dim (global average pooling), as one group of the pool family (`workbench.kernels.pool`).

What the traces hold (torch 2.x): 1-D pooling is the 2-D op on an unsqueezed input (squeezed after); max pooling is
`max_pool{2,3}d_with_indices` followed by getitem 0 (values) and 1 (indices), both present whether or not the indices
are used; adaptive max pooling likewise returns (values, indices); AdaptiveAvgPool to 1 is `mean.dim(x, [-1, -2],
keepdim=True)`. When the indices are dead the group takes them (and their dead views) along and computes only the
values; when they are used the launcher returns both and the getitems index its tuple.

The elementwise chain that consumes only the pooled values (possibly through one view that removes or adds unit
dims, such as the squeeze of 1-D pooling or a flatten after global pooling) is fused as an epilogue when its inputs
are per-channel, broadcastable to the output, or scalars.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import Node

from ...kernels import pool as P
from ...kernels._common import usable_name
from ...kernels.base import Epilogue, EpilogueInput
from ..group import DTYPE, Group, val
from ..lowering import schema_args
from . import Context, register

aten = torch.ops.aten

MAX_OPS = {aten.max_pool2d_with_indices.default: 2, aten.max_pool3d_with_indices.default: 3}
MAX_PLAIN_OPS = {aten.max_pool1d.default: 1, aten.max_pool2d.default: 2, aten.max_pool3d.default: 3}
AVG_OPS = {aten.avg_pool1d.default: 1, aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3}
ADAPTIVE_AVG_OPS = {aten._adaptive_avg_pool2d.default: 2, aten._adaptive_avg_pool3d.default: 3,
                    aten.adaptive_avg_pool1d.default: 1}
ADAPTIVE_MAX_OPS = {aten.adaptive_max_pool2d.default: 2, aten.adaptive_max_pool3d.default: 3}
UNIT_VIEWS = {aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.view.default,
              aten._unsafe_view.default, aten.reshape.default}


def _triple(v, rank: int, fill: int) -> tuple[int, int, int] | None:
    """A pooling hyper-parameter (int or list of 1 or `rank` ints) as (D, H, W), unit dims padded with `fill`."""
    if isinstance(v, int):
        v = [v]
    v = list(v)
    if len(v) == 1:
        v = v * rank
    if len(v) != rank or not all(isinstance(t, int) for t in v):
        return None
    return tuple([fill] * (3 - rank) + v)


def _dead(n: Node) -> list[Node] | None:
    """n and everything downstream of it when none of it reaches the graph's output, else None."""
    out, frontier = [], [n]
    while frontier:
        cur = frontier.pop()
        if cur in out:
            continue
        if cur.op != "call_function":
            return None
        out.append(cur)
        frontier += list(cur.users)
    return out


def _spatial(x: Node, rank: int) -> tuple[tuple[int, int, int], tuple[int, ...]] | None:
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dim() not in (rank + 1, rank + 2) or v.dtype not in DTYPE:
        return None
    size = tuple(int(s) for s in v.shape[v.dim() - rank:])
    return (1,) * (3 - rank) + size, tuple(int(s) for s in v.shape[:v.dim() - rank])


def _unit_view(n: Node) -> bool:
    """A view that only removes or adds unit dims (the data order is unchanged)."""
    if n.target not in UNIT_VIEWS or not isinstance(n.args[0], Node):
        return False
    a, b = val(n.args[0]), val(n)
    return [s for s in a.shape if s != 1] == [s for s in b.shape if s != 1]


def _epilogue(ctx: Context, pooled: Node, lead: tuple[int, ...], first: Node):
    """(epilogue, its argument names, its nodes, the result node) of the fusible chain after `pooled`, or None."""
    if not ctx.fuse.get(first.name, True) or len(pooled.users) != 1:
        return None
    acc, user = pooled, next(iter(pooled.users))
    views = []
    if _unit_view(user) and len(user.users) == 1:
        views, acc, user = [user], user, next(iter(user.users))
    root = ctx.ew_of.get(user)
    if root is None or any(m in ctx.taken for m in ctx.ew[root]):  # a whole pattern claimed the chain
        return None
    members = ctx.ew[root]
    out_shape = tuple(val(acc).shape)
    if tuple(val(root).shape) != out_shape or val(root).dtype not in DTYPE:
        return None
    expr, inputs = ctx.part.elementwise_spec(root, members, ctx.names, acc=acc)
    if "__ACC__" not in expr:
        return None
    channel = len(lead) - 1  # position of C in the pooled output (and in a view that only drops unit dims after it)
    if views and [s for s in out_shape[:channel + 1]] != list(lead):
        return None
    kinds = []
    for i in inputs:
        v = val(i)
        if not isinstance(v, torch.Tensor) or not usable_name(ctx.names[i]) or v.dtype == torch.bool:
            return None
        if v.numel() == 1:
            kinds.append("scalar")
            continue
        shape = (1,) * (len(out_shape) - v.dim()) + tuple(v.shape)
        if len(shape) != len(out_shape) or any(s not in (1, o) for s, o in zip(shape, out_shape)):
            return None
        per_channel = all(s == 1 for j, s in enumerate(shape) if j != channel) and shape[channel] == lead[-1]
        kinds.append("col" if per_channel else "full")
    ep = Epilogue(expr.replace("__ACC__", "acc"), tuple(EpilogueInput(ctx.names[i], k) for i, k in zip(inputs, kinds)))
    return ep, [ctx.names[i] for i in inputs], views + list(members), root


def recognise(ctx: Context, node: Node) -> Group | None:
    t = node.target
    b = schema_args(node) if isinstance(t, torch._ops.OpOverload) else {}
    x = b.get("self")
    if not isinstance(x, Node):
        return None
    if t in MAX_OPS or t in MAX_PLAIN_OPS or t in AVG_OPS:
        rank = MAX_OPS.get(t) or MAX_PLAIN_OPS.get(t) or AVG_OPS[t]
        kernel = _triple(b["kernel_size"], rank, 1)
        stride = _triple(b.get("stride") or b["kernel_size"], rank, 1)
        padding = _triple(b.get("padding", 0), rank, 0)
        dilation = _triple(b.get("dilation", 1), rank, 1)
        if None in (kernel, stride, padding, dilation):
            return None
        op = "avg" if t in AVG_OPS else "max"
        extra = dict(mode="window", kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                     ceil_mode=bool(b.get("ceil_mode", False)))
        if op == "avg":
            extra.update(count_include_pad=bool(b.get("count_include_pad", True)),
                         divisor_override=b.get("divisor_override"))
    elif t in ADAPTIVE_AVG_OPS or t in ADAPTIVE_MAX_OPS:
        rank = ADAPTIVE_AVG_OPS.get(t) or ADAPTIVE_MAX_OPS[t]
        out = _triple(b["output_size"], rank, 1)
        if out is None:
            return None
        op = "avg" if t in ADAPTIVE_AVG_OPS else "max"
        extra = dict(mode="adaptive")
    elif t == aten.mean.dim:
        v = val(x)
        if not isinstance(v, torch.Tensor) or v.dim() not in (4, 5) or b.get("dtype") not in (None, v.dtype):
            return None
        dims = b.get("dim")
        if dims is None or {d % v.dim() for d in dims} != set(range(2, v.dim())) or len(dims) != v.dim() - 2:
            return None
        rank, op, extra = v.dim() - 2, "avg", dict(mode="global")
    else:
        return None
    found = _spatial(x, rank)
    if found is None:
        return None
    in_size, lead = found
    if t == aten.mean.dim:
        out_size = (1, 1, 1)
    elif extra["mode"] == "adaptive":
        out_size = out
        if out_size == (1, 1, 1):
            extra["mode"] = "global"  # adaptive to one pixel: a reduction over each plane
    else:
        out_size = tuple(P.window_out_size(i, k, s, p, d, extra["ceil_mode"])
                         for i, k, s, p, d in zip(in_size, kernel, stride, padding, dilation))

    # the tensors the op produces: values (and, for max with indices, the indices)
    tuple_out = t in MAX_OPS or t in ADAPTIVE_MAX_OPS
    nodes = [node]
    return_indices = False
    if tuple_out:
        gets = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        if len(gets) != len(node.users) or 0 not in gets:
            return None
        values = gets[0]
        dead = _dead(gets[1]) if 1 in gets else []
        if dead is None:
            return_indices = True
        else:
            nodes += [values] + dead
    else:
        values = node
    pooled_val = val(values)
    want = lead + tuple(out_size[3 - rank:])
    if t == aten.mean.dim and b.get("keepdim"):
        want = lead + (1,) * rank
    elif t == aten.mean.dim:
        want = lead
    if tuple(pooled_val.shape) != want or pooled_val.dtype != val(x).dtype:
        return None  # not the shape the family computes: leave it to torch

    epilogue, ep_args, result = None, [], values
    if return_indices:
        result = node
    else:
        fused = _epilogue(ctx, values, lead, node)
        if fused is not None:
            epilogue, ep_args, members, result = fused
            nodes += [m for m in members if m not in nodes]
    spec = P.PoolSpec(op, DTYPE[val(x).dtype], rank, in_size, out_size, return_indices=return_indices,
                      out_dtype="" if return_indices else DTYPE.get(val(result).dtype, "unsupported"),
                      epilogue=epilogue, **extra)
    if P._spec_problem(spec) is not None:
        return None
    args = [ctx.names[x]] + ep_args
    if not return_indices:  # the launcher's (N, C, *spatial) output, viewed as the group's result (mean, a view)
        args.append(f"view_shape={tuple(int(s) for s in val(result).shape)!r}")
    return Group("pool", result, nodes, args, spec, fused_epilogue=epilogue is not None)


register(single=(recognise,))
