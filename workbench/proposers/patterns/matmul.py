"""Matmul variants beyond the built-in gemm group: triu / tril of a matrix product (KernelBench's triangular
matmuls) as the gemm family with a masking epilogue. The epilogue reads each output element's row and column from
two index vectors the launcher call builds (kind "row" and "col"), so no [M, N]
mask is read from memory; the spec's `band` lets a tile wholly outside the kept triangle skip its product."""
from __future__ import annotations

import dataclasses

import torch
from torch.fx import Node

from ...kernels.base import Epilogue, EpilogueInput
from ..group import Group, val
from ..lowering import literal, schema_args
from . import Context, register

aten = torch.ops.aten


def triangular_matmul(ctx: Context, node: Node) -> Group | None:
    if node.op != "call_function" or node.target not in (aten.triu.default, aten.tril.default):
        return None
    b = schema_args(node)
    mm = b["self"]
    if not (isinstance(mm, Node) and mm.target == aten.mm.default and len(mm.users) == 1) or mm in ctx.taken:
        return None
    g = ctx.part.gemm_group(mm, ctx.names, {}, {}, False)  # no elementwise chain: the mask is the epilogue
    if g is None or g.spec.epilogue is not None or g.spec.batched:
        return None
    m, n = val(mm).shape
    if max(m, n) >= 1 << 24:
        return None  # indices travel as fp32 epilogue values: exact below 2**24
    diag = int(b.get("diagonal", 0))
    row, col = "tri_row", "tri_col"
    if {row, col} & set(ctx.names.values()):
        return None
    keep = f"({col} - {row}) >= {literal(diag)}" if node.target == aten.triu.default else \
        f"({col} - {row}) <= {literal(diag)}"
    ep = Epilogue(f"tl.where({keep}, acc, 0.0)", (EpilogueInput(row, "row"), EpilogueInput(col, "col")))
    dev = g.args[0]
    args = g.args + [f"torch.arange({m}, device={dev}.device, dtype=torch.float32)",
                     f"torch.arange({n}, device={dev}.device, dtype=torch.float32)"]
    band = ("upper" if node.target == aten.triu.default else "lower", diag)
    spec = dataclasses.replace(g.spec, epilogue=ep, band=band)
    return Group("gemm", node, [mm, node], args, spec, fused_epilogue=False)


register(whole=(triangular_matmul,))
