"""Aten ops rewritten into the forms the partitioner lowers, with the same values.

- `mv(A, v)` (a matrix-vector product; `torch.matmul` with a 1-D right operand) -> `sum(A * v, -1)`: a row reduction
  of a fused product, one program per row, where a GEMM tile would waste all but one of its columns.
- `baddbmm(C, A, B, beta, alpha)` and `addmm(C, A, B)` with a beta or alpha other than 1 ->
  `beta * C + alpha * (A @ B)`: a plain product whose scale and add become the GEMM's epilogue (with beta = 0, C
  is not read, as torch ignores it).
"""
from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten


def _meta(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    return v


def _call(gm: GraphModule, target, args: tuple) -> Node:
    """A new node computing target(*args), its meta value computed on meta tensors."""
    node = gm.graph.call_function(target, args)
    node.meta["val"] = target(*[_meta(a.meta["val"]) if isinstance(a, Node) else a for a in args])
    return node


def _scaled_product(gm: GraphModule, node: Node, product, c: Node, a: Node, b: Node, beta: Any, alpha: Any) -> Node:
    with gm.graph.inserting_before(node):
        out = _call(gm, product, (a, b))
        if alpha != 1:
            out = _call(gm, aten.mul.Tensor, (out, alpha))
        if beta != 0:
            out = _call(gm, aten.add.Tensor, (_call(gm, aten.mul.Tensor, (c, beta)) if beta != 1 else c, out))
    return out


def canonical_forms(gm: GraphModule) -> int:
    """Rewrite the ops above in place; returns how many were rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        new = None
        if node.target is aten.mv.default and not node.kwargs and all(isinstance(a, Node) for a in node.args):
            a, v = node.args
            va = a.meta.get("val")
            if isinstance(va, torch.Tensor) and va.is_floating_point():
                with gm.graph.inserting_before(node):
                    new = _call(gm, aten.sum.dim_IntList, (_call(gm, aten.mul.Tensor, (a, v)), [-1]))
        elif node.target in (aten.baddbmm.default, aten.addmm.default) and len(node.args) == 3 and \
                all(isinstance(a, Node) for a in node.args):
            beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
            if set(node.kwargs) <= {"beta", "alpha"} and (node.target is aten.baddbmm.default or beta != 1 or
                                                          alpha != 1):
                product = aten.bmm.default if node.target is aten.baddbmm.default else aten.mm.default
                new = _scaled_product(gm, node, product, *node.args, beta, alpha)
        if new is None:
            continue
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count
