"""Loss operators that reach the aten graph as one node (smooth_l1_loss, huber_loss, mse_loss, l1_loss) with
reduction "mean" or "sum": the pointwise term and the full reduction as one reduce_nd kernel. reduction "none" is a
pointwise op and stays a torch call here."""
from __future__ import annotations

import torch
from torch.fx import Node

from ...kernels.base import EpilogueInput
from ...kernels.reduce_nd import ReduceNDSpec
from ..group import DTYPE, Group, val
from ..lowering import literal, schema_args
from . import Context, register

aten = torch.ops.aten
REDUCTION = {1: "mean", 2: "sum"}  # torch's Reduction enum: 0 none, 1 mean, 2 sum


def _term(target, d: str, b: dict) -> str | None:
    """The pointwise loss of the difference d = input - target."""
    if target == aten.mse_loss.default:
        return f"(({d}) * ({d}))"
    if target == aten.l1_loss.default:
        return f"tl.abs({d})"
    if target == aten.smooth_l1_loss.default:
        beta = float(b.get("beta", 1.0))
        if beta == 0.0:
            return f"tl.abs({d})"
        return f"tl.where(tl.abs({d}) < {literal(beta)}, 0.5 * ({d}) * ({d}) / {literal(beta)}, " \
               f"tl.abs({d}) - {literal(0.5 * beta)})"
    if target == aten.huber_loss.default:
        delta = float(b.get("delta", 1.0))
        return f"tl.where(tl.abs({d}) < {literal(delta)}, 0.5 * ({d}) * ({d}), " \
               f"{literal(delta)} * (tl.abs({d}) - {literal(0.5 * delta)}))"
    return None


def pointwise_loss(ctx: Context, node: Node) -> Group | None:
    if node.op != "call_function" or node.target not in (aten.mse_loss.default, aten.l1_loss.default,
                                                         aten.smooth_l1_loss.default, aten.huber_loss.default):
        return None
    b = schema_args(node)
    x, t = b.get("self"), b.get("target")
    reduction = REDUCTION.get(b.get("reduction", 1))
    if reduction is None or not isinstance(x, Node) or not isinstance(t, Node):
        return None
    vx, vt, vout = val(x), val(t), val(node)
    if vx.dtype not in DTYPE or vt.dtype != vx.dtype or vx.numel() == 0 or vout.dtype not in DTYPE:
        return None
    shape = tuple(torch.broadcast_shapes(tuple(vx.shape), tuple(vt.shape)))
    names = [ctx.names[x], ctx.names[t]]
    if names[0] == names[1] or not all(n.isidentifier() for n in names):
        return None
    term = _term(node.target, f"{names[0]} - {names[1]}", b)
    numel = 1
    for d in shape:
        numel *= d
    inputs = tuple(EpilogueInput(n, "scalar" if val(v).numel() == 1 else "full") for n, v in zip(names, (x, t)))
    spec = ReduceNDSpec(reduction, 1, numel, 1, shape, tuple(vout.shape), DTYPE[vout.dtype], term, inputs)
    return Group("reduce_nd", node, [node], names, spec)


register(single=(pointwise_loss,))
