"""Partition a captured graph into fusible groups, each lowered to one kernel family (`workbench.kernels.FAMILIES`).

Groups, by family:
- `attention`: softmax(mask?(scale * Q @ K^T)) @ V written out with matmuls, as one flash-attention kernel;
- `row`: a reduction or normalisation over the last dimension (softmax, log-softmax, layer norm, sum, mean, max,
  argmax, var, var_mean, logsumexp), and two patterns recognised as a whole: rmsnorm written out, and
  log-softmax + nll_loss (cross-entropy);
- `scan`: cumsum over the last dimension; `col`: sum / mean / max over dim 0 of a 2-D tensor;
- `gemm`: mm / addmm / bmm, optionally with the elementwise chain that consumes its output fused as an epilogue
  (a fusion choice: fused or split);
- `permute`: a permute/transpose made contiguous; `gather`: an embedding lookup;
- `elementwise`: a maximal chain (a DAG) of pointwise nodes producing one output, inputs broadcast into it;
- everything else (views, convolutions, ops outside the tables) stays a torch call.

`partition(captured, precision, fuse)` is cheap and deterministic; `fuse` maps a GEMM's node name to whether its
epilogue is fused, so the proposer can offer both as moves.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Node

from ..kernels import attention as attn
from ..kernels import reduce as red
from ..kernels.base import Epilogue, EpilogueInput, valid_space
from ..kernels.elementwise import ElementwiseInput, ElementwiseSpec
from ..kernels.gemm import GemmSpec, split_k_for
from ..kernels.memory import GatherSpec, PermuteSpec
from . import patterns
from .graph import Captured
from .group import DTYPE, Group, val
from .lowering import lower, lowerable, schema_args

aten = torch.ops.aten

GEMM_OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default}
ROW_OPS = {aten._softmax.default: "softmax", aten._log_softmax.default: "log_softmax",
           aten.sum.dim_IntList: "sum", aten.mean.dim: "mean", aten.amax.default: "max",
           aten.argmax.default: "argmax", aten.var.correction: "var", aten.var_mean.correction: "var_mean",
           aten.logsumexp.default: "logsumexp",
           aten.native_layer_norm.default: "layernorm", aten.cumsum.default: "cumsum"}


def expanded_strides(v: torch.Tensor, out_shape: tuple[int, ...]) -> list[int]:
    """The strides of `v` broadcast to `out_shape` (0 along broadcast dims)."""
    lead = len(out_shape) - v.dim()
    strides = [0] * lead
    for d in range(v.dim()):
        strides.append(0 if v.shape[d] == 1 and out_shape[lead + d] != 1 else v.stride(d))
    return strides


def merged_index_shape(out_shape: tuple[int, ...], tensors: list[torch.Tensor],
                       max_rank: int = 4) -> tuple[int, ...] | None:
    """The output's dims with size-1 dims dropped and neighbours merged where the contiguous output and every input
    (broadcast) step through them as one dim; None if more than `max_rank` dims remain or an input does not
    broadcast."""
    if any(v.dim() > len(out_shape) for v in tensors):
        return None
    out_strides, acc = [0] * len(out_shape), 1
    for d in reversed(range(len(out_shape))):
        out_strides[d], acc = acc, acc * out_shape[d]
    all_strides = [out_strides] + [expanded_strides(v, out_shape) for v in tensors if v.numel() != 1]
    keep = [d for d in range(len(out_shape)) if out_shape[d] != 1]
    dims: list[list[int]] = []  # merged dims: [size, stride per tensor...]
    for d in keep:
        st = [s[d] for s in all_strides]
        if dims and all(prev == cur * out_shape[d] for prev, cur in zip(dims[-1][1:], st)):
            dims[-1] = [dims[-1][0] * out_shape[d]] + st
        else:
            dims.append([out_shape[d]] + st)
    shape = tuple(m[0] for m in dims) or (1,)
    return shape if len(shape) <= max_rank else None


def _last_dim(dims: Any, rank: int) -> bool:
    if isinstance(dims, int):
        dims = [dims]
    return dims is not None and len(dims) == 1 and dims[0] % rank == rank - 1


class Partitioner:
    def __init__(self, captured: Captured, precision: str):
        # the problem's effective precision: "tf32" lets fp32 GEMMs use plain tf32, "cudnn_tf32" only convolutions
        self.precision = precision
        self.nodes = [n for n in captured.gm.graph.nodes]
        self.position = {n: i for i, n in enumerate(self.nodes)}

    # ---- elementwise groups ----
    def elementwise_groups(self) -> dict[Node, list[Node]]:
        """root -> member nodes (topological order), grown backwards from each root over single-consumer producers."""
        assigned: dict[Node, Node] = {}
        groups: dict[Node, list[Node]] = {}
        for node in reversed(self.nodes):
            if node in assigned or not lowerable(node):
                continue
            shape = tuple(val(node).shape)
            members = {node}
            frontier = [node]
            while frontier:
                cur = frontier.pop()
                for a in cur.all_input_nodes:
                    if a in members or a in assigned or not lowerable(a) or tuple(val(a).shape) != shape:
                        continue
                    if all(u in members for u in a.users):
                        members.add(a)
                        frontier.append(a)
            for m in members:
                assigned[m] = node
            groups[node] = sorted(members, key=self.position.__getitem__)  # not a scan of the graph per group
        return groups

    def elementwise_spec(self, root: Node, members: list[Node], names: dict[Node, str],
                         acc: Node | None = None) -> tuple[str, list[Node]]:
        """The expression of a group and its external tensor inputs (in first-use order)."""
        inputs: list[Node] = []
        memo: dict[Node, str] = {}

        def expr_of(n: Node) -> str:
            if n is acc:
                return "__ACC__"
            if n in memo:
                return memo[n]
            if n in members:
                memo[n] = lower(n, expr_of)
                return memo[n]
            if n not in inputs:
                inputs.append(n)
            return names[n]

        return expr_of(root), inputs

    @staticmethod
    def input_kind(inp: Node, out_shape: tuple[int, ...]) -> str | None:
        v = val(inp)
        if v.numel() == 1:
            return "scalar"
        shape = tuple(v.shape)
        if shape == out_shape:
            return "flat" if v.is_contiguous() else "strided"
        if v.dim() <= len(out_shape) and shape[-1:] == out_shape[-1:] and all(d == 1 for d in shape[:-1]) \
                and v.is_contiguous():
            return "lastdim"
        return "strided" if len(out_shape) <= 4 else None

    # ---- the partition ----
    def run(self, fuse: dict[str, bool]) -> list[Group]:
        names = {n: n.name for n in self.nodes}
        ew = self.elementwise_groups()
        ew_of = {m: root for root, members in ew.items() for m in members}
        taken: set[Node] = set()
        found: list[Group] = []
        ctx = patterns.Context(self, names, ew, ew_of, fuse, taken)
        # whole patterns first (rmsnorm written out, cross-entropy, the pattern modules' own), so their pieces are
        # not claimed one by one
        # in registration order, each over the whole graph: a pattern registered earlier (a norm written out) wins
        # over a later, more general one (an elementwise chain feeding a reduction) wherever both match
        for recogniser in patterns.WHOLE:
            for node in self.nodes:
                if node.op == "call_function" and node not in taken:
                    g = patterns.recognise_first([recogniser], ctx, node)
                    if g is not None:
                        found.append(g)
                        taken.update(g.nodes)
        for node in self.nodes:
            if (node.target in ROW_OPS or node.target == aten._safe_softmax.default) and node not in taken:
                g = (self.attention_group(node, names) or self.rmsnorm_group(node, names)
                     or self.cross_entropy_group(node, names))
                if g is not None and not any(n in taken for n in g.nodes):
                    found.append(g)
                    taken.update(g.nodes)
        for node in self.nodes:
            if node.op != "call_function" or node in taken:
                continue
            group = patterns.recognise_first(patterns.SINGLE, ctx, node)
            if group is not None:
                pass
            elif node.target in GEMM_OPS:
                group = self.gemm_group(node, names, ew, ew_of, fuse.get(node.name, True))
            elif node.target == aten.embedding.default:
                group = self.gather_group(node, names)
            elif node.target == aten.clone.default and self.permute_source(node) is not None:
                group = self.permute_group(node, names)
            elif node.target in ROW_OPS:
                group = self.col_group(node, names) or self.row_group(node, names)
            elif node in ew and not any(m in taken for m in ew[node]):
                group = self.ew_group(node, ew[node], names)
            if group is not None and not any(n in taken for n in group.nodes):
                found.append(group)
                taken.update(group.nodes)
        found.sort(key=lambda g: self.position[g.out])
        for i, g in enumerate(found):
            g.gid = f"g{i}"
        return found

    def ew_group(self, root: Node, members: list[Node], names) -> Group | None:
        out_shape = tuple(val(root).shape)
        expr, inputs = self.elementwise_spec(root, members, names)
        index_shape = None
        if len(out_shape) > 4:  # a 5-D (conv3d) chain: index strided inputs in merged dims
            index_shape = merged_index_shape(out_shape, [val(i) for i in inputs])
            if index_shape is None:
                return None
        kinds = [self.input_kind(i, out_shape) or ("strided" if index_shape is not None else None) for i in inputs]
        if not inputs or None in kinds or val(root).dtype not in DTYPE:
            return None
        if index_shape is not None and "strided" not in kinds:
            index_shape = None  # flat, bias-like and scalar inputs need no index arithmetic at any rank
        spec = ElementwiseSpec(expr, tuple(ElementwiseInput(names[i], k, val(i).dtype == torch.bool)
                                           for i, k in zip(inputs, kinds)),
                               DTYPE[val(root).dtype], val(root).numel(), len(out_shape), index_shape)
        args = [names[i] for i in inputs] + [repr(out_shape)]
        return Group("elementwise", root, members, args, spec)

    def gemm_group(self, node, names, ew, ew_of, fuse: bool) -> Group | None:
        b = schema_args(node)
        if node.target == aten.addmm.default:
            a_, b_, bias = b["mat1"], b["mat2"], b["self"]
        else:
            a_, b_, bias = b["self"], b["mat2"], None
        out = val(node)
        va, vb = val(a_), val(b_)
        if va.dtype not in DTYPE or vb.dtype != va.dtype or out.dtype not in DTYPE:
            return None
        batched = node.target == aten.bmm.default
        # strict fp32: three tf32 products per multiply (about 2e-7 relative error, well inside the 1e-4 bound) run on
        # tensor cores; "ieee" (FMA units) is several times slower
        precision = "tf32x3" if (va.dtype == torch.float32 and self.precision != "tf32") else "tf32"
        epi_inputs: list[EpilogueInput] = []
        args = [names[a_], names[b_]]
        expr = "acc"
        if bias is not None:
            if b.get("beta", 1) != 1 or b.get("alpha", 1) != 1:
                return None
            kind = self.input_kind(bias, tuple(out.shape))
            kind = {"lastdim": "col", "flat": "full"}.get(kind)
            if kind is None:
                return None
            epi_inputs.append(EpilogueInput(names[bias], kind))
            args.append(names[bias])
            expr = f"(acc + {names[bias]})"
        nodes = [node]
        result = node
        fused = False
        # the elementwise chain that consumes only this output (one group, however often it reads it): fused as an
        # epilogue when chosen and expressible
        root = patterns.consumer_root(ew_of, node)
        if fuse and root is not None and not batched:
            members = ew[root]
            e2, inputs = self.elementwise_spec(root, members, names, acc=node)
            extra = []
            ok = True
            for i in inputs:
                kind = {"lastdim": "col", "flat": "full"}.get(self.input_kind(i, tuple(out.shape)) or "", None)
                if kind is None:
                    ok = False
                    break
                extra.append(EpilogueInput(names[i], kind))
            if ok and tuple(val(root).shape) == tuple(out.shape):
                expr = e2.replace("__ACC__", expr)
                epi_inputs += extra
                args += [names[i] for i in inputs]
                nodes += members
                result = root
                fused = True
        out_dtype = val(result).dtype
        if out_dtype not in DTYPE:
            return None
        epilogue = None if expr == "acc" else Epilogue(expr, tuple(epi_inputs))
        spec = GemmSpec(DTYPE[va.dtype], DTYPE[out_dtype], batched, precision, epilogue,
                        single_output=val(result).numel() == 1)
        hint = split_k_for(spec, out.shape[0] if batched else 1, out.shape[-2], out.shape[-1], va.shape[-1])
        if hint > 1:
            spec = dataclasses.replace(spec, split_k_hint=hint)
        return Group("gemm", result, nodes, args, spec, fused_epilogue=fused)

    # ---- memory movement ----
    def permute_source(self, node: Node):
        b = schema_args(node)
        if b.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
            return None
        found = _permute_of(node.args[0])
        if found is None or not (2 <= len(found[1]) <= 4) or val(found[0]).dtype not in DTYPE:
            return None
        return found

    def permute_group(self, node, names) -> Group | None:
        src, perm = self.permute_source(node)
        spec = PermuteSpec(tuple(val(src).shape), perm, DTYPE[val(src).dtype])
        return Group("permute", node, [node], [names[src]], spec)

    def gather_group(self, node, names) -> Group | None:
        b = schema_args(node)
        w, idx = b["weight"], b["indices"]
        if val(w).dim() != 2 or val(w).dtype not in DTYPE or val(idx).dtype not in (torch.int64, torch.int32):
            return None
        spec = GatherSpec(val(w).shape[0], val(w).shape[1], DTYPE[val(w).dtype], str(val(idx).dtype)[6:])
        return Group("gather", node, [node], [names[idx], names[w]], spec)

    # ---- reductions recognised as a whole ----
    def col_group(self, node, names) -> Group | None:
        op = {aten.sum.dim_IntList: "sum", aten.mean.dim: "mean", aten.amax.default: "max"}.get(node.target)
        b = schema_args(node)
        x = b.get("self")
        if op is None or not isinstance(x, Node) or val(x).dim() != 2 or b.get("keepdim") or \
                val(x).dtype not in DTYPE or list(b.get("dim") or []) not in ([0], [-2]) or \
                b.get("dtype") not in (None, val(x).dtype):
            return None
        n_rows, n_cols = val(x).shape
        return Group("col", node, [node], [names[x]], red.ColSpec(op, n_rows, n_cols, DTYPE[val(x).dtype]))

    def cross_entropy_group(self, node, names) -> Group | None:
        """log_softmax over classes followed by nll_loss (what F.cross_entropy traces to) as one row kernel."""
        if node.target != aten._log_softmax.default or len(node.users) != 1:
            return None
        nll = next(iter(node.users))
        if nll.target != aten.nll_loss_forward.default:
            return None
        b = schema_args(nll)
        x = node.args[0]
        if val(x).dim() != 2 or b.get("weight") is not None or b["reduction"] not in (0, 1) or \
                not _last_dim(node.args[1], 2) or val(x).dtype not in DTYPE:
            return None
        outs = [u for u in nll.users if u.users]
        if len(outs) != 1 or outs[0].target is not operator.getitem or outs[0].args[1] != 0:
            return None
        spec = red.RowSpec("cross_entropy", val(x).shape[1], DTYPE[val(x).dtype],
                       reduction="mean" if b["reduction"] == 1 else "none", ignore_index=int(b["ignore_index"]))
        return Group("row", outs[0], [node, nll, *nll.users], [names[x], names[b["target"]]], spec)

    def attention_group(self, node, names) -> Group | None:
        """softmax(mask?(scale * Q @ K^T)) @ V written out with 4-D matmuls (as make_fx traces them: expand, view,
        bmm, view) or 3-D bmm over (batch x heads) (nn.MultiheadAttention, the scale on Q) as one flash-attention
        kernel; the mask may be a causal triu(ones, 1)."""
        if node.target == aten._safe_softmax.default:  # SDPA's math path: softmax, with rows of -inf giving 0
            if node.kwargs.get("dtype") is not None or len(node.args) > 2 or \
                    not _last_dim(node.args[1], val(node).dim()):
                return None
        elif node.target != aten._softmax.default or not _last_dim(node.args[1], val(node).dim()) or node.args[2]:
            return None

        def scalar_factor(n):  # n = x * c or x / c with a Python number c, read once: the factor
            if not (isinstance(n, Node) and len(n.users) == 1 and len(n.args) == 2 and
                    isinstance(n.args[1], (int, float)) and not isinstance(n.args[1], bool)):
                return None
            if n.target in (aten.mul.Tensor, aten.mul.Scalar):
                return float(n.args[1])
            if n.target in (aten.div.Tensor, aten.div.Scalar) and n.args[1] != 0:
                return 1.0 / float(n.args[1])
            return None

        def single_user(n):
            return len(n.users) == 1 and next(iter(n.users))

        def through_views(n, ops):  # follow view-like producers back while each has one user
            chain = []
            while isinstance(n, Node) and n.target in ops and len(n.users) == 1:
                chain.append(n)
                n = n.args[0]
            return n, chain

        view_ops = {aten.view.default, aten._unsafe_view.default, aten.expand.default, aten.reshape.default}
        chain = [node]
        x, causal, scale = node.args[0], False, 1.0
        mask_nodes: list[Node] = []
        if isinstance(x, Node) and x.target == aten.masked_fill.Scalar and len(x.users) == 1:
            mask = x.args[1]
            if not (isinstance(mask, Node) and mask.target == aten.triu.default and mask.args[1:2] == (1,)
                    and x.args[2] == float("-inf") and len(mask.users) == 1):
                return None
            ones = mask.args[0]
            if not (isinstance(ones, Node) and ones.target == aten.ones.default and len(ones.users) == 1):
                return None
            causal = True
            mask_nodes = [mask, ones]
            chain.append(x)
            x = x.args[0]
        if scalar_factor(x) is not None:
            scale = scalar_factor(x)
            chain.append(x)
            x = x.args[0]
        bmm1, views = through_views(x, view_ops)
        chain += views
        if not (isinstance(bmm1, Node) and bmm1.target == aten.bmm.default and len(bmm1.users) == 1):
            return None
        chain.append(bmm1)
        # operand side: contiguous copies the eager matmul needed are not needed by the kernel (it takes strides)
        operand_ops = view_ops | {aten.clone.default}
        q4, qv = through_views(bmm1.args[0], operand_ops)
        if scalar_factor(q4) is not None:  # the scale applied to Q first (or sqrt of it to Q and to K^T: SDPA)
            scale *= scalar_factor(q4)
            chain += qv + [q4]
            q4, qv = through_views(q4.args[0], operand_ops)
        kt, kv = through_views(bmm1.args[1], operand_ops)
        if scalar_factor(kt) is not None:
            scale *= scalar_factor(kt)
            chain += kv + [kt]
            kt, kv = through_views(kt.args[0], operand_ops)
        if not (isinstance(kt, Node) and kt.target == aten.transpose.int and len(kt.users) == 1):
            return None
        k4 = kt.args[0]
        chain += kv + [kt]
        # consumer side: softmax -> expand/view -> bmm(., V) -> view back to 4-D
        cur, out_views = node, []
        user = single_user(cur)
        while user and user.target in view_ops:
            out_views.append(user)
            cur, user = user, single_user(user)
        if not (user and user.target == aten.bmm.default and user.args[0] is cur):
            return None
        bmm2 = user
        v4, vv = through_views(bmm2.args[1], operand_ops)
        final, fv = bmm2, []
        user = single_user(final)
        while user and user.target in (aten._unsafe_view.default, aten.view.default):
            fv.append(user)
            final, user = user, single_user(user)
        chain += out_views + [bmm2] + fv + mask_nodes
        # (B, H, S, D), or (B*H, S, D) as nn.MultiheadAttention's bmm traces it (one leading dim of size 1 added)
        rank = val(final).dim() if isinstance(val(final), torch.Tensor) else 0

        def at_rank(end, walked):  # stop walking back where the operand still has the output's rank (SDPA's Q, V)
            while walked and not (isinstance(val(end), torch.Tensor) and val(end).dim() == rank):
                end = walked.pop()
            return end, walked

        q4, qv = at_rank(q4, qv)
        v4, vv = at_rank(v4, vv)
        chain += qv + vv
        tensors = [val(t) if isinstance(t, Node) else None for t in (q4, k4, v4)]
        if rank not in (3, 4) or any(t is None or t.dim() != rank or t.dtype not in DTYPE for t in tensors) or \
                len({t.dtype for t in tensors}) != 1:
            return None
        if tuple(val(final).shape) != tuple(tensors[0].shape[:-1]) + (tensors[2].shape[-1],) or \
                tensors[0].shape[-1] != tensors[1].shape[-1] or tensors[2].shape[-1] != tensors[0].shape[-1] or \
                tensors[1].shape[:-2] != tensors[0].shape[:-2] or tensors[2].shape[:-1] != tensors[1].shape[:-1]:
            return None
        if causal and tuple(val(mask_nodes[1]).shape) != (tensors[0].shape[-2], tensors[1].shape[-2]):
            return None
        spec = attn.AttentionSpec(tensors[0].shape[-1], DTYPE[tensors[0].dtype], causal, scale)
        if not valid_space(attn, spec):
            return None  # no configuration fits (e.g. fp32 with a wide head): the matmuls and softmax stay apart
        lift, post = (".unsqueeze(0)", ".squeeze(0)") if rank == 3 else ("", "")
        return Group("attention", final, chain, [names[q4] + lift, names[k4] + lift, names[v4] + lift], spec,
                     post=post)

    def rmsnorm_group(self, node, names) -> Group | None:
        """x * rsqrt(mean(x*x, -1, keepdim) + eps) [* weight], written out, as one row kernel."""
        if node.target != aten.mean.dim or not node.args[2:3] or not node.args[2]:
            return None
        sq = node.args[0]
        if not isinstance(sq, Node) or len(sq.users) != 1:
            return None
        if sq.target == aten.pow.Tensor_Scalar and sq.args[1] == 2:
            x = sq.args[0]
        elif sq.target == aten.mul.Tensor and sq.args[0] is sq.args[1]:
            x = sq.args[0]
        else:
            return None
        if not isinstance(x, Node) or not _last_dim(node.args[1], val(x).dim()) or val(x).dtype not in DTYPE:
            return None
        chain = [sq, node]
        cur = node
        add = next(iter(cur.users)) if len(cur.users) == 1 else None
        if add is None or add.target not in (aten.add.Tensor, aten.add.Scalar) or not isinstance(add.args[1],
                                                                                               (int, float)):
            return None
        eps = float(add.args[1])
        rs = next(iter(add.users)) if len(add.users) == 1 else None
        if rs is None or rs.target != aten.rsqrt.default:
            return None
        mul = next(iter(rs.users)) if len(rs.users) == 1 else None
        if mul is None or mul.target != aten.mul.Tensor or set(mul.args) != {x, rs}:
            return None
        chain += [add, rs, mul]
        out, args, has_w = mul, [names[x]], False
        if len(mul.users) == 1:
            wmul = next(iter(mul.users))
            other = [a for a in wmul.args if a is not mul]
            if wmul.target == aten.mul.Tensor and len(other) == 1 and isinstance(other[0], Node) and \
                    tuple(val(other[0]).shape) == (val(x).shape[-1],) and val(wmul).dtype == val(x).dtype:
                out, has_w = wmul, True
                chain.append(wmul)
                args.append(names[other[0]])
        if any(u is not out and any(v not in chain for v in u.users) for u in chain):
            return None  # an intermediate escapes: not a pure rmsnorm
        spec = red.RowSpec("rmsnorm", val(x).shape[-1], DTYPE[val(x).dtype], eps=eps, has_weight=has_w)
        return Group("row", out, chain, args, spec)

    def row_group(self, node, names) -> Group | None:
        op = ROW_OPS[node.target]
        b = schema_args(node)
        x = b.get("self", b.get("input"))
        vx = val(x)
        if not isinstance(x, Node) or vx.dtype not in DTYPE or vx.dim() < 1:
            return None
        rank = vx.dim()
        n_cols = vx.shape[-1]
        args = [names[x]]
        if op == "layernorm":
            if list(b["normalized_shape"]) != [n_cols]:
                return None
            w, bias = b.get("weight"), b.get("bias")
            spec = red.RowSpec("layernorm", n_cols, DTYPE[vx.dtype], eps=float(b["eps"]), has_weight=w is not None,
                               has_bias=bias is not None)
            args += [names[v] for v in (w, bias) if v is not None]
            # native_layer_norm returns (out, mean, rstd): only the first may be used
            users = [u for u in node.users if u.users]  # mean and rstd outputs, when unused, are dead getitems
            if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
                return None
            return Group("row", users[0], [node, *node.users], args, spec)
        if op in ("softmax", "log_softmax"):
            if not _last_dim(b["dim"], rank) or b.get("half_to_float"):
                return None
            spec = red.RowSpec(op, n_cols, DTYPE[vx.dtype])
        elif op == "cumsum":
            if not _last_dim(b["dim"], rank) or b.get("dtype") not in (None, vx.dtype):
                return None
            return Group("scan", node, [node], args, red.ScanSpec("cumsum", n_cols, DTYPE[vx.dtype]))
        else:
            dims = b.get("dim")
            if not _last_dim(dims, rank):
                return None
            if op in ("sum", "mean") and b.get("dtype") not in (None, vx.dtype):
                return None
            if op in ("var", "var_mean"):
                corr = b.get("correction")
                corr = 1 if corr is None else corr
                if float(corr) != int(corr):
                    return None
                # var_mean's two outputs come back as one tuple (the getitems after it index it); keepdim is the
                # launcher's, since a tuple cannot take the group's .unsqueeze(-1)
                keep = op == "var_mean" and bool(b.get("keepdim"))
                spec = red.RowSpec(op, n_cols, DTYPE[vx.dtype], correction=int(corr), keepdim=keep)
                if keep:
                    return Group("row", node, [node], args, spec)
            else:
                spec = red.RowSpec(op, n_cols, DTYPE[vx.dtype])
            if b.get("keepdim"):
                return Group("row", node, [node], args, spec, post=".unsqueeze(-1)")
        return Group("row", node, [node], args, spec)


def _permute_of(node: Node) -> tuple[Node, tuple[int, ...]] | None:
    """(source, permutation) when node is a permute/transpose view of a contiguous tensor."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    src = node.args[0] if node.args else None
    if not isinstance(src, Node) or not val(src).is_contiguous():
        return None
    rank = val(src).dim()
    if node.target == aten.permute.default:
        return src, tuple(d % rank for d in node.args[1])
    if node.target == aten.transpose.int:
        perm = list(range(rank))
        a, b = node.args[1] % rank, node.args[2] % rank
        perm[a], perm[b] = perm[b], perm[a]
        return src, tuple(perm)
    if node.target == aten.t.default and rank == 2:
        return src, (1, 0)
    return None


def partition(captured: Captured, precision: str, fuse: dict[str, bool] | None = None) -> list[Group]:
    return Partitioner(captured, precision).run(fuse or {})


def fusion_points(captured: Captured, precision: str) -> list[str]:
    """Names of the nodes (a GEMM's, a convolution's) whose consumer chain can be fused as an epilogue or split (the
    proposer's fusion moves)."""
    fused = [g for g in partition(captured, precision, {}) if g.fused_epilogue]
    return [g.nodes[0].name for g in fused]
