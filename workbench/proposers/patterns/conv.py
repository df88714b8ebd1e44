"""Forward convolutions (`aten.convolution.default`, not transposed) as the conv family, with the elementwise chain
that consumes only the convolution's output (one elementwise group, however often it reads it) fused as its epilogue
(a fusion choice, as for GEMMs).

make_fx gives one `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)`
node for nn.Conv1d/2d/3d. padding='same' arrives as explicit symmetric padding, or (even kernels, asymmetric) as a
`constant_pad_nd` before the convolution; padding modes other than 'zeros' arrive as a separate pad op
(`reflection_pad2d`, ...) before a convolution with padding 0: the pad stays a torch call, the convolution is ours.
A bias is an epilogue input per output channel. The fused chain's external inputs must each be a scalar, a
per-channel tensor (broadcasting as [C_out, 1, ...] or [1, C_out, 1, ...]) or a tensor of the output's shape;
otherwise nothing is fused.
"""
from __future__ import annotations

import torch
from torch.fx import Node

from ...kernels import conv
from ...kernels.base import Epilogue, EpilogueInput, valid_space
from ..group import DTYPE, Group, val
from ..lowering import schema_args
from . import Context, register

aten = torch.ops.aten


def _three(v, rank: int, fill: int) -> tuple[int, int, int] | None:
    """A per-dim parameter (int or list over `rank` spatial dims) as a 3-tuple with unit leading dims."""
    vals = [int(v)] * rank if isinstance(v, int) else [int(x) for x in v]
    if len(vals) == 1 and rank > 1:
        vals = vals * rank
    if len(vals) != rank:
        return None
    return (fill,) * (3 - rank) + tuple(vals)


def epilogue_kind(inp: Node, out_shape: tuple[int, ...]) -> str | None:
    """How an external input of the chain lines up with the convolution's output, or None."""
    v = val(inp)
    if not isinstance(v, torch.Tensor) or v.dtype not in DTYPE:
        return None
    if v.numel() == 1:
        return "scalar"
    shape = tuple(v.shape)
    if shape == out_shape:
        return "full"
    if v.dim() > len(out_shape):
        return None
    padded = (1,) * (len(out_shape) - v.dim()) + shape
    c_out = out_shape[1]
    if padded[1] == c_out and v.numel() == c_out:  # [C_out, 1, 1] against [N, C_out, H, W], [1, C_out, 1, 1]
        return "col"
    return None


def conv_group(ctx: Context, node: Node) -> Group | None:
    if node.target != aten.convolution.default:
        return None
    b = schema_args(node)
    x, w, bias = b["input"], b["weight"], b.get("bias")
    if b["transposed"] or not isinstance(x, Node) or not isinstance(w, Node):
        return None  # transposed convolutions belong to another family
    vx, vw, out = val(x), val(w), val(node)
    if vx.dtype not in DTYPE or vw.dtype != vx.dtype or out.dtype not in DTYPE or not 3 <= vx.dim() <= 5 or \
            vw.dim() != vx.dim():
        return None
    rank = vx.dim() - 2
    groups = int(b["groups"])
    stride, padding = _three(b["stride"], rank, 1), _three(b["padding"], rank, 0)
    dilation = _three(b["dilation"], rank, 1)
    if None in (stride, padding, dilation):
        return None
    c_in, c_out = vx.shape[1], vw.shape[0]
    if groups < 1 or c_in % groups or c_out % groups or vw.shape[1] != c_in // groups:
        return None
    names = ctx.names
    out_shape = tuple(out.shape)
    inputs: list[EpilogueInput] = []
    args = [names[x], names[w]]
    expr = "acc"
    if isinstance(bias, Node):
        if tuple(val(bias).shape) != (c_out,) or val(bias).dtype not in DTYPE:
            return None
        inputs.append(EpilogueInput(names[bias], "col"))
        args.append(names[bias])
        expr = f"(acc + {names[bias]})"
    elif bias is not None:
        return None
    nodes, result, fused = [node], node, False
    root = ctx.consumer_root(node)
    if ctx.fuse.get(node.name, True) and root is not None and tuple(val(root).shape) == out_shape and \
            val(root).dtype in DTYPE and not any(m in ctx.taken for m in ctx.ew[root]):
        members = ctx.ew[root]
        chain, ext = ctx.part.elementwise_spec(root, members, names, acc=node)
        kinds = [epilogue_kind(i, out_shape) for i in ext]
        if None not in kinds:
            known = {i.name for i in inputs}
            for i, k in zip(ext, kinds):
                if names[i] not in known:
                    inputs.append(EpilogueInput(names[i], k))
                    args.append(names[i])
            expr = chain.replace("__ACC__", expr)
            nodes += members
            result, fused = root, True
    # tf32 where the reference's own convolution is (cuDNN's under PyTorch's defaults), else fp32-accurate tf32x3
    precision = "tf32x3" if (vx.dtype == torch.float32 and ctx.part.precision == "strict") else "tf32"
    spec = conv.ConvSpec(DTYPE[vx.dtype], DTYPE[val(result).dtype], rank, c_in, c_out,
                         (1,) * (3 - rank) + tuple(vw.shape[2:]),
                         stride, padding, dilation, groups, precision,
                         None if expr == "acc" else Epilogue(expr, tuple(inputs)))
    if conv.check(spec, conv.default(spec)) is not None or not valid_space(conv, spec):
        return None
    return Group("conv", result, nodes, args, spec, fused_epilogue=fused)


register(single=(conv_group,))
