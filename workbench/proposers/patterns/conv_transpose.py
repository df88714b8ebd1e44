"""A transposed convolution (`aten.convolution` with transposed = True: nn.ConvTranspose1d/2d/3d and
F.conv_transpose*) as one `conv_transpose` kernel, its bias and the elementwise chain that consumes only its output
fused as the epilogue (a fusion choice, as for a GEMM), when every tensor the chain reads is a scalar, one value per
output channel, or broadcasts to the output's shape."""
from __future__ import annotations

import torch
from torch.fx import Node

from ...kernels import conv_transpose as ct
from ...kernels.base import Epilogue, EpilogueInput, valid_space
from ..group import DTYPE, Group, val
from ..lowering import schema_args
from . import Context, register

aten = torch.ops.aten


def epilogue_kind(inp: Node, out_shape: tuple[int, ...]) -> str | None:
    """"scalar", "col" (one value per output channel, laid out so it broadcasts over N and the spatial dims),
    "full" (anything else that broadcasts to the output) or None."""
    v = val(inp)
    if not isinstance(v, torch.Tensor) or not v.is_floating_point():
        return None
    if v.numel() == 1:
        return "scalar"
    shape = tuple(v.shape)
    if len(shape) > len(out_shape) or any(d not in (1, o) for d, o in zip(shape[::-1], out_shape[::-1])):
        return None
    aligned = (1,) * (len(out_shape) - len(shape)) + shape
    if aligned[1] == out_shape[1] and all(d == 1 for i, d in enumerate(aligned) if i != 1):
        return "col"
    return "full"


def recognise(ctx: Context, node: Node) -> Group | None:
    if node.target != aten.convolution.default:
        return None
    b = schema_args(node)
    if not b.get("transposed"):
        return None
    x, w, bias = b["input"], b["weight"], b.get("bias")
    vx, vw, out = val(x), val(w), val(node)
    if not all(isinstance(t, torch.Tensor) for t in (vx, vw, out)) or vx.dim() not in (3, 4, 5) or \
            vw.dim() != vx.dim() or vx.dtype not in DTYPE or vw.dtype != vx.dtype or out.dtype != vx.dtype:
        return None
    rank = vx.dim() - 2
    groups = int(b["groups"])
    stride, padding, dilation, output_padding = (tuple(int(s) for s in b[k]) for k in
                                                 ("stride", "padding", "dilation", "output_padding"))
    if any(len(t) != rank for t in (stride, padding, dilation, output_padding)):
        return None
    out_shape = tuple(out.shape)
    c_in, c_out = vx.shape[1], out_shape[1]
    if vw.shape[0] != c_in or vw.shape[1] * groups != c_out:
        return None
    # tf32 where the reference's own convolution is (cuDNN's under PyTorch's defaults), else fp32-accurate tf32x3
    precision = "tf32x3" if (vx.dtype == torch.float32 and ctx.part.precision == "strict") else "tf32"
    names = ctx.names
    args = [names[x], names[w]]
    epi: list[EpilogueInput] = []
    expr = "acc"
    if isinstance(bias, Node):
        if tuple(val(bias).shape) != (c_out,) or val(bias).dtype != vx.dtype:
            return None
        epi.append(EpilogueInput(names[bias], "col"))
        args.append(names[bias])
        expr = f"(acc + {names[bias]})"
    elif bias is not None:
        return None

    def make(expr, epi, args, nodes, result, fused) -> Group | None:
        if val(result).dtype not in DTYPE:
            return None
        epilogue = None if expr == "acc" else Epilogue(expr, tuple(epi))
        spec = ct.ConvTransposeSpec(rank, stride, padding, output_padding, dilation, groups, c_in, c_out,
                                    DTYPE[vx.dtype], DTYPE[val(result).dtype], precision, epilogue)
        if not valid_space(ct, spec):
            return None
        return Group("conv_transpose", result, nodes, args, spec, fused_epilogue=fused)

    root = ctx.consumer_root(node)
    if ctx.fuse.get(node.name, True) and root is not None and tuple(val(root).shape) == out_shape:
        members = ctx.ew[root]
        chain, inputs = ctx.part.elementwise_spec(root, members, names, acc=node)
        kinds = [epilogue_kind(i, out_shape) for i in inputs]
        if None not in kinds and not any(m in ctx.taken for m in members):
            fused = make(chain.replace("__ACC__", expr), epi + [EpilogueInput(names[i], k)
                                                               for i, k in zip(inputs, kinds)],
                         args + [names[i] for i in inputs], [node, *members], root, True)
            if fused is not None:
                return fused
    return make(expr, epi, args, [node], node, False)


register(single=(recognise,))
