"""Capture a problem's reference as an aten-level graph on meta tensors, with per-node FLOPs and bytes.

`make_fx` over `functional_call(model, state, inputs)` gives one placeholder per parameter/buffer (in
`named_parameters()` then `named_buffers()` order) followed by one per input, and nodes whose `meta["val"]` holds the
meta tensor each produces (shape, dtype, strides), at any problem size and with no device.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from ..problems.loader import ProblemError
from ..problems.problem import Problem


@dataclasses.dataclass
class Captured:
    problem: Problem
    gm: GraphModule
    state_names: list[str]  # placeholders [0, len) are these parameters/buffers
    input_kinds: list[str]  # per input: "tensor" or "value" (a non-tensor get_inputs() entry, passed through)
    output_kind: str  # "tensor", "tuple" or "list"
    node_flops: dict[str, int]
    node_bytes: dict[str, int]

    @property
    def nodes(self) -> list[Node]:
        return list(self.gm.graph.nodes)

    @property
    def placeholders(self) -> list[Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    @property
    def total_flops(self) -> int:
        return sum(self.node_flops.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.node_bytes.values())


def _nbytes(x: Any) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def capture(problem: Problem) -> Captured:
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.device("meta"):
        init = problem.init_inputs()
        model = problem.make_reference(init)
        inputs = problem.inputs()
    inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}

    def run(state, *args):
        return torch.func.functional_call(model, state, args)

    try:
        with torch.no_grad():
            out = model(*inputs)
            gm = make_fx(run)(state, *inputs)
    except Exception as e:
        raise ProblemError(f"{problem.path}: the reference could not be captured as a graph on meta tensors "
                           f"({type(e).__name__}: {e})") from e
    if isinstance(out, torch.Tensor):
        output_kind = "tensor"
    elif isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        output_kind = "tuple" if isinstance(out, tuple) else "list"
    else:
        raise ProblemError(f"{problem.path}: the offline proposer handles outputs that are a tensor or a tuple/list "
                           f"of tensors, not {type(out).__name__}")
    flops, nbytes = _node_costs(gm)
    return Captured(problem, gm, list(state), ["tensor" if isinstance(x, torch.Tensor) else "value" for x in inputs],
                    output_kind, flops, nbytes)


def _meta_arg(a: Any) -> Any:
    if isinstance(a, Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(_meta_arg(x) for x in a)
    return a


def _node_costs(gm: GraphModule) -> tuple[dict[str, int], dict[str, int]]:
    """FLOPs (torch's counter) and bytes in + out of every call_function node, re-run on its meta values."""
    flops, nbytes = {}, {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        args = _meta_arg(list(node.args))
        kwargs = {k: _meta_arg(v) for k, v in node.kwargs.items()}
        f = 0
        try:
            with FlopCounterMode(display=False) as fc:
                node.target(*args, **kwargs)
            f = int(fc.get_total_flops())
        except Exception:
            pass
        flops[node.name] = f
        view = bool(getattr(node.target, "is_view", False))  # views move no bytes
        ins = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        outs = [x for x in tree_flatten(node.meta.get("val"))[0] if isinstance(x, torch.Tensor)]
        nbytes[node.name] = 0 if view else sum(_nbytes(x) for x in ins + outs)
    return flops, nbytes
