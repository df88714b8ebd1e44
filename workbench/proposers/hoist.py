"""Hoist a per-step linear layer out of a time loop: one GEMM over every step instead of one small GEMM per step.

A recurrent layer traced step by step (`nn.LSTM`, `nn.GRU`, `nn.RNN` decompose so on meta tensors, as does a
hand-written loop over `x.unbind(0)`) applies the same input projection to each slice of its input:
`addmm(b, unbind(S)[t], t(W))` for t = 0..T-1. Only the hidden-state product depends on the previous step, so the input
products can all be computed at once from S, as cuDNN does: `addmm(b, S.reshape(T*B, I), t(W)).view(T, B, N)`, the
step reading slice t. The values are the same dot products (each output element still reduces over I); the graph
loses T-1 GEMM launches per layer and the remaining one is large enough to tile the GPU.
"""
from __future__ import annotations

import operator
from collections import defaultdict
from typing import Any

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten
MIN_STEPS = 2  # slices of one unbind projected by one weight from which the projection is hoisted


def _meta(v: Any) -> torch.Tensor:
    return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")


def _unbound_slice(node: Any) -> tuple[Node, int] | None:
    """(the unbind node, the index) when `node` is `unbind(S, 0)[i]` of a 3-D S, else None."""
    if not (isinstance(node, Node) and node.op == "call_function" and node.target is operator.getitem):
        return None
    u = node.args[0]
    if not (isinstance(u, Node) and u.op == "call_function" and u.target is aten.unbind.int):
        return None
    dim = u.args[1] if len(u.args) > 1 else u.kwargs.get("dim", 0)
    src = u.args[0].meta.get("val") if isinstance(u.args[0], Node) else None
    if dim != 0 or not isinstance(src, torch.Tensor) or src.dim() != 3:
        return None
    return u, int(node.args[1])


def _weight_source(node: Any) -> Node | None:
    """The (I, N) right operand as the tensor it is the transpose of (`t(W)`), or itself when it is a plain value."""
    if not isinstance(node, Node):
        return None
    if node.op == "call_function" and node.target is aten.t.default:
        return node.args[0] if isinstance(node.args[0], Node) else None
    return node


def _projection(node: Node) -> tuple[tuple, int] | None:
    """(group key, step index) of a per-step projection `addmm(b, slice, w)` / `mm(slice, w)`, else None."""
    if node.op != "call_function" or node.kwargs:
        return None
    if node.target is aten.addmm.default and len(node.args) == 3:
        bias, x, w = node.args
    elif node.target is aten.mm.default and len(node.args) == 2:
        (x, w), bias = node.args, None
    else:
        return None
    found, src = _unbound_slice(x), _weight_source(w)
    if found is None or src is None or (bias is not None and not isinstance(bias, Node)):
        return None
    u, i = found
    return (u, node.target, src, w.target if isinstance(w, Node) and w.op == "call_function" else None, bias), i


def step_projections(gm: GraphModule) -> dict[tuple, list[tuple[int, Node]]]:
    """Per-step projections sharing an unbind, a weight and a bias, at least MIN_STEPS slices of them: group key ->
    [(step, node)]. (A lone one, e.g. a layer's initial state `unbind(h0)[l]`, is left as it is.)"""
    groups: dict[tuple, list[tuple[int, Node]]] = defaultdict(list)
    for node in gm.graph.nodes:
        found = _projection(node)
        if found is not None:
            key, i = found
            groups[key].append((i, node))
    return {k: v for k, v in groups.items() if len({i for i, _ in v}) >= MIN_STEPS}


def hoist_step_projections(gm: GraphModule) -> int:
    """Rewrite every group of `step_projections` as one projection of the whole sequence; returns how many."""
    groups = step_projections(gm)
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    hoisted = 0
    for (u, target, w_src, w_op, bias), members in groups.items():
        seq = u.args[0]
        sv = seq.meta["val"]
        steps, rows, width = sv.shape
        wv = members[0][1].args[-1].meta.get("val")
        if not isinstance(wv, torch.Tensor) or wv.dim() != 2 or wv.shape[0] != width:
            continue
        out_width = int(wv.shape[1])
        # after the sequence and the weight and bias it is projected by (a weight computed in forward may come later)
        start = max((n for n in (u, w_src, bias) if n is not None), key=order.__getitem__)
        graph = gm.graph
        with graph.inserting_after(start):
            flat = graph.call_function(aten.reshape.default, (seq, [steps * rows, width]))
        flat.meta["val"] = aten.reshape.default(_meta(sv), [steps * rows, width])
        with graph.inserting_after(flat):
            w = graph.call_function(w_op, (w_src,)) if w_op is not None else w_src
        if w_op is not None:
            w.meta["val"] = w_op(_meta(w_src.meta["val"]))
        with graph.inserting_after(w if w_op is not None else flat):
            args = (bias, flat, w) if target is aten.addmm.default else (flat, w)
            proj = graph.call_function(target, args)
        proj.meta["val"] = target(*[_meta(a.meta["val"]) for a in args])
        with graph.inserting_after(proj):
            cube = graph.call_function(aten.view.default, (proj, [steps, rows, out_width]))
        cube.meta["val"] = aten.view.default(proj.meta["val"], [steps, rows, out_width])
        with graph.inserting_after(cube):
            parts = graph.call_function(aten.unbind.int, (cube,))
        parts.meta["val"] = list(aten.unbind.int(cube.meta["val"]))
        anchor = parts
        for i, node in sorted(members, key=lambda m: m[0]):
            with graph.inserting_after(anchor):
                item = graph.call_function(operator.getitem, (parts, i))
            item.meta["val"] = parts.meta["val"][i]
            anchor = item
            node.replace_all_uses_with(item)
            old_w = node.args[-1]
            graph.erase_node(node)
            if old_w is not w and isinstance(old_w, Node) and old_w.op == "call_function" and not old_w.users:
                graph.erase_node(old_w)
        hoisted += 1
    if hoisted:
        _drop_unused_slices(gm)
        gm.graph.lint()
        gm.recompile()
    return hoisted


def _drop_unused_slices(gm: GraphModule) -> None:
    """The slices (getitem of an unbind) only the hoisted projections read, and unbinds left with no slice."""
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and not node.users and (
                (node.target is operator.getitem and isinstance(node.args[0], Node)
                 and node.args[0].target is aten.unbind.int) or node.target is aten.unbind.int):
            gm.graph.erase_node(node)

