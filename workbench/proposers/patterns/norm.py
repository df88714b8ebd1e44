"""Normalisations lowered to the grouped-statistics family (`workbench.kernels.norm`).

Single-op recognisers (the aten norm ops, each with only its first output used):
- `native_layer_norm` over a `normalized_shape` of rank >= 2 (rank 1 is the row family's);
- `native_group_norm`;
- `native_batch_norm` / `_native_batch_norm_legit` in training mode (batch statistics; with running buffers the
  kernel updates them in place, as the aten op does) and in eval mode, and `_native_batch_norm_legit_no_training`.
  Instance norm traces to a training-mode `native_batch_norm` over the input viewed as [1, N*C, *] (the affine
  weight repeated N times), so it is this case too.
A whole pattern: x / ||x|| with the norm over all dims or a trailing set of dims (kept), written as
`linalg_vector_norm(x, 2 or 1, dims, keepdim)` (torch.norm, F.normalize with its clamp_min(eps) and expand) or as
`mean` / `sum` of `abs(x)` (an L1 normalisation).

The elementwise chain that consumes only the norm's output is fused as an epilogue when the fusion choice allows it
(inputs: scalars, tensors of the output's shape, or one value per channel).
"""
from __future__ import annotations

import dataclasses
import math
import operator

import torch
from torch.fx import Node

from ...kernels.base import Epilogue, EpilogueInput, valid_space
from ...kernels.norm import GROUPED_NORM, NormSpec
from ..group import DTYPE, Group, val
from ..lowering import schema_args
from . import Context, register

aten = torch.ops.aten

BATCH_NORM_OPS = (aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
VIEW_OPS = (aten.expand.default, aten.view.default, aten.reshape.default)


def _only_first_output(node: Node, n_outputs: int) -> Node | None:
    """The getitem(0) of a multi-output node when none of its other outputs is used, else None."""
    first = None
    for u in node.users:
        if u.target is not operator.getitem:
            return None
        if u.args[1] == 0:
            first = u
        elif u.users:
            return None
    return first


def _channel_shape_ok(shape: tuple[int, ...], channel_dims: tuple[int, ...], rank: int, axis: int) -> bool:
    """Does a broadcast input of `shape` hold one value per channel, the channels being the dims of x (rank `rank`)
    from `axis` on with sizes `channel_dims`?"""
    padded = (1,) * (rank - len(shape)) + tuple(shape)
    if len(padded) != rank:
        return False
    want = [1] * rank
    want[axis:axis + len(channel_dims)] = channel_dims
    return list(padded) == want


def _epilogue(ctx: Context, key: str, first: Node, x: Node, channel_dims: tuple[int, ...], channel_axis: int):
    """(epilogue, input names, member nodes, result node) of the elementwise chain consuming only `first`, or None.
    `key`: the group's first node's name, the fusion choice's key (`partition.fusion_points` names groups so)."""
    if not ctx.fuse.get(key, True) or len(first.users) != 1:
        return None
    root = ctx.ew_of.get(next(iter(first.users)))
    if root is None or any(m in ctx.taken for m in ctx.ew[root]):
        return None
    out_shape = tuple(val(first).shape)
    if tuple(val(root).shape) != out_shape or val(root).dtype != val(x).dtype:
        return None
    members = ctx.ew[root]
    expr, inputs = ctx.part.elementwise_spec(root, members, ctx.names, acc=first)
    epi_inputs = []
    for i in inputs:
        v = val(i)
        if not isinstance(v, torch.Tensor):
            return None
        if v.numel() == 1:
            kind = "scalar"
        elif tuple(v.shape) == out_shape and v.is_contiguous():
            kind = "full"
        elif _channel_shape_ok(tuple(v.shape), channel_dims, len(out_shape), channel_axis):
            kind = "channel"
        else:
            return None
        epi_inputs.append(EpilogueInput(ctx.names[i], kind))
    return Epilogue(expr.replace("__ACC__", "acc"), tuple(epi_inputs)), [ctx.names[i] for i in inputs], members, root


def _group(ctx: Context, spec: NormSpec, first: Node, x: Node, nodes: list[Node], args: list[str],
           channel_dims: tuple[int, ...], channel_axis: int) -> Group | None:
    """The norm's group, with the consumer chain fused when chosen and expressible."""
    fused = _epilogue(ctx, nodes[0].name, first, x, channel_dims, channel_axis)
    out = first
    if fused is not None:
        epi, names, members, root = fused
        with_epi = dataclasses.replace(spec, epilogue=epi)
        if valid_space(GROUPED_NORM, with_epi):
            spec, args, out = with_epi, args + names, root
            nodes = nodes + [m for m in members if m not in nodes]
        else:
            fused = None
    if not valid_space(GROUPED_NORM, spec):
        return None
    return Group("norm", out, nodes, args, spec, fused_epilogue=fused is not None)


def _tensor_ok(x) -> bool:
    return isinstance(x, Node) and isinstance(val(x), torch.Tensor) and val(x).dtype in DTYPE


def _param_ok(p, numel: int) -> bool:
    return p is None or (_tensor_ok(p) and val(p).numel() == numel)


def layer_norm(ctx: Context, node: Node) -> Group | None:
    if node.target != aten.native_layer_norm.default:
        return None
    b = schema_args(node)
    x, shape = b["input"], [int(s) for s in b["normalized_shape"]]
    if not _tensor_ok(x) or len(shape) < 2 or list(val(x).shape[-len(shape):]) != shape:
        return None
    w, bias = b.get("weight"), b.get("bias")
    inner = math.prod(shape)
    if not (_param_ok(w, inner) and _param_ok(bias, inner)):
        return None
    first = _only_first_output(node, 3)
    if first is None:
        return None
    spec = NormSpec("moments", val(x).numel() // inner, 1, inner, DTYPE[val(x).dtype], cpg=inner,
                    eps=float(b["eps"]), has_weight=w is not None, has_bias=bias is not None)
    args = [ctx.names[x]] + [ctx.names[p] for p in (w, bias) if p is not None]
    rank = val(x).dim()
    return _group(ctx, spec, first, x, [node, *node.users], args, tuple(shape), rank - len(shape))


def group_norm(ctx: Context, node: Node) -> Group | None:
    if node.target != aten.native_group_norm.default:
        return None
    b = schema_args(node)
    x, w, bias = b["input"], b.get("weight"), b.get("bias")
    n, c, hw, groups = int(b["N"]), int(b["C"]), int(b["HxW"]), int(b["group"])
    if not _tensor_ok(x) or val(x).dim() < 2 or val(x).numel() != n * c * hw or val(x).shape[1] != c or c % groups:
        return None
    if not (_param_ok(w, c) and _param_ok(bias, c)):
        return None
    first = _only_first_output(node, 3)
    if first is None:
        return None
    spec = NormSpec("moments", n, groups, c // groups * hw, DTYPE[val(x).dtype], cpg=c // groups,
                    eps=float(b["eps"]), has_weight=w is not None, has_bias=bias is not None)
    args = [ctx.names[x]] + [ctx.names[p] for p in (w, bias) if p is not None]
    return _group(ctx, spec, first, x, [node, *node.users], args, (c,), 1)


def batch_norm(ctx: Context, node: Node) -> Group | None:
    b = schema_args(node) if isinstance(node.target, torch._ops.OpOverload) else {}
    if node.target in BATCH_NORM_OPS:
        training = bool(b["training"])
    elif node.target == aten._native_batch_norm_legit_no_training.default:
        training = False
    else:
        return None
    x, w, bias = b["input"], b.get("weight"), b.get("bias")
    rm, rv = b.get("running_mean"), b.get("running_var")
    if not _tensor_ok(x) or val(x).dim() < 2:
        return None
    n, c = val(x).shape[0], val(x).shape[1]
    if not all(_param_ok(p, c) for p in (w, bias, rm, rv)) or (rm is None) != (rv is None):
        return None
    first = _only_first_output(node, 3)
    if first is None:
        return None
    momentum = float(b["momentum"])
    if training:
        stat, running = "moments", rm is not None
    elif rm is None:
        return None  # eval mode without running statistics: torch itself refuses
    else:
        stat, running = "given", True
    spec = NormSpec(stat, n, c, val(x).numel() // (n * c) if n * c else 0, DTYPE[val(x).dtype], span_outer=True,
                    eps=float(b["eps"]), has_weight=w is not None, has_bias=bias is not None,
                    momentum=momentum if training and running else None)
    args = [ctx.names[x]] + [ctx.names[p] for p in (w, bias) if p is not None]
    args += [ctx.names[rm], ctx.names[rv]] if running else []
    return _group(ctx, spec, first, x, [node, *node.users], args, (c,), 1)


# ------------------------------------------------------------------------------------------- x / ||x|| written out

def _single_user(n: Node) -> bool:
    return len(n.users) == 1


def _reduced_dims(dims, rank: int) -> list[int] | None:
    """The reduced dims as a sorted list when they are all dims or a trailing set, else None."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = sorted({int(d) % rank for d in ([dims] if isinstance(dims, int) else dims)})
    return dims if dims == list(range(rank - len(dims), rank)) else None


def lnorm(ctx: Context, node: Node) -> Group | None:
    if node.target != aten.div.Tensor or len(node.args) != 2:
        return None
    x, d = node.args
    if not _tensor_ok(x) or not isinstance(d, Node) or not _single_user(d) or val(node).shape != val(x).shape:
        return None
    chain = [node]
    if d.target == aten.expand.default:
        chain.append(d)
        d = d.args[0]
        if not isinstance(d, Node) or not _single_user(d):
            return None
    eps, clamp = 0.0, False
    if d.target == aten.clamp_min.default and isinstance(d.args[1], (int, float)):
        eps, clamp = float(d.args[1]), True
        chain.append(d)
        d = d.args[0]
        if not isinstance(d, Node) or not _single_user(d):
            return None
    rank = val(x).dim()
    if d.target == aten.linalg_vector_norm.default:
        b = schema_args(d)
        if b["self"] is not x or b.get("dtype") is not None or float(b.get("ord", 2)) not in (1.0, 2.0):
            return None
        stat, scale, dims, keep = ("sumsq" if float(b.get("ord", 2)) == 2.0 else "sumabs"), "sum", b.get("dim"), \
            bool(b.get("keepdim"))
        chain.append(d)
    elif d.target in (aten.mean.dim, aten.sum.dim_IntList):
        b = schema_args(d)
        a = b["self"]
        if not isinstance(a, Node) or a.target != aten.abs.default or a.args[0] is not x or not _single_user(a) or \
                b.get("dtype") is not None:
            return None
        stat, scale, dims, keep = "sumabs", ("mean" if d.target == aten.mean.dim else "sum"), b.get("dim"), \
            bool(b.get("keepdim"))
        chain += [d, a]
    else:
        return None
    reduced = _reduced_dims(dims, rank)
    if reduced is None or (not keep and len(reduced) != rank) or val(d).dtype != val(x).dtype:
        return None
    inner = math.prod(val(x).shape[rank - len(reduced):])
    if inner == 0 or val(x).numel() == 0:
        return None
    spec = NormSpec(stat, val(x).numel() // inner, 1, inner, DTYPE[val(x).dtype], eps=eps, clamp=clamp,
                    denom_scale=1.0 / inner if scale == "mean" else 1.0)
    nodes = [n for n in ctx.part.nodes if n in chain]
    return _group(ctx, spec, node, x, nodes, [ctx.names[x]], (), rank)


register(whole=(lnorm,), single=(layer_norm, group_norm, batch_norm))
