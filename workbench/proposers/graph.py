"""Capture a problem's reference as an aten-level graph on meta tensors, with per-node FLOPs and bytes.

`make_fx` over `functional_call(model, state, inputs)` gives one placeholder per parameter/buffer (in
`named_parameters()` then `named_buffers()` order) followed by one per input, and nodes whose `meta["val"]` holds the
meta tensor each produces (shape, dtype, strides), at any problem size and with no device.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from ..problems.loader import ProblemError
from ..problems.problem import Problem
from .hoist import hoist_step_projections
from .library_modules import LIBRARY_MODULES, is_module_call, kept_as_library_calls, node_flops
from .rewrite import canonical_forms


@dataclasses.dataclass
class Captured:
    problem: Problem
    gm: GraphModule
    state_names: list[str]  # placeholders [0, len) are these parameters/buffers
    input_kinds: list[str]  # per input: "tensor" or "value" (a non-tensor get_inputs() entry, passed through)
    output_kind: str  # "tensor", "tuple" or "list"
    node_flops: dict[str, int]
    node_bytes: dict[str, int]
    constants: dict[str, str] = dataclasses.field(default_factory=dict)  # get_attr target -> source in forward
    # A forward that reassigns plain tensor attributes (an RNN keeping `self.hidden` across calls): the attribute
    # paths, in order, of the graph's last outputs, which ModelNew assigns back instead of returning.
    state_writes: list[str] = dataclasses.field(default_factory=list)

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


def _build_on_meta(problem: Problem) -> tuple[torch.nn.Module, list[Any]]:
    """The reference and its inputs on the meta device: built there directly (no memory, any size), or, for a
    constructor that needs real values (`.item()`, tensors made from data), built on the CPU and moved over."""
    try:
        with torch.device("meta"):
            init = problem.init_inputs()
            model = problem.make_reference(init)
            inputs = problem.inputs()
    except Exception as meta_error:
        try:
            init = problem.init_inputs()
            model = problem.make_reference(init).to("meta")
            inputs = problem.inputs()
        except Exception as cpu_error:
            raise ProblemError(
                f"{problem.path}: the reference could not be built on the meta device ({type(meta_error).__name__}: "
                f"{meta_error}) nor on the CPU ({type(cpu_error).__name__}: {cpu_error})") from cpu_error
        _move_tensor_attributes(model)
    return model, [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]


def _tensor_attributes(model: torch.nn.Module) -> dict[str, tuple[torch.nn.Module, str, torch.Tensor]]:
    """Plain tensor attributes (not parameters or buffers) by dotted path: (module, name, value)."""
    out = {}
    for mod_name, mod in model.named_modules():
        for name, v in vars(mod).items():
            if isinstance(v, torch.Tensor):
                out[".".join(p for p in (mod_name, name) if p)] = (mod, name, v)
    return out


def _restore(snapshot: dict[str, tuple[torch.nn.Module, str, torch.Tensor]]) -> None:
    for mod, name, v in snapshot.values():
        setattr(mod, name, v)


def _move_tensor_attributes(model: torch.nn.Module) -> None:
    """Plain tensor attributes (not parameters or buffers) follow the model to meta, as `.to` does not move them."""
    for mod in model.modules():
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) and v.device.type != "meta":
                setattr(mod, name, v.to("meta"))


class _ScalarsKeepValues(torch.overrides.TorchFunctionMode):
    """`torch.tensor(0.5, device=x.device)` in forward, with x on meta, would make a constant with no value to write
    out; a 0-d tensor made from data is made on the CPU instead (it combines with tensors of any device, as a scalar),
    so the graph keeps its value."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.tensor and args and isinstance(args[0], (int, float, bool)) and \
                torch.device(kwargs.get("device") or "cpu").type == "meta":
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


def capture(problem: Problem, library_modules: tuple[type[torch.nn.Module], ...] = LIBRARY_MODULES) -> Captured:
    """The graph of the reference in the mode the file constructs it (KernelBench never calls `.eval()`: training
    mode, so BatchNorm uses batch statistics and its running-stat updates are in the graph, in place on the buffer
    placeholders, as the harness runs it). Submodules of `library_modules` (recurrent layers) stay one
    `workbench::module_call` node each, which the candidate runs as the submodule itself (`library_modules.py`)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    model, inputs = _build_on_meta(problem)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    # Tensor attributes as constructed: a forward that reassigns one (state kept across calls) is traced from these
    # values, and what it assigns becomes extra graph outputs that ModelNew writes back the same way.
    snapshot = _tensor_attributes(model)
    writes: list[str] = []

    def run(state, *args):
        result = torch.func.functional_call(model, state, args)
        written = [(path, v) for path, (_, _, v) in _tensor_attributes(model).items()
                   if path not in snapshot or v is not snapshot[path][2]]
        _restore(snapshot)
        writes[:] = [path for path, _ in written]
        # make_fx flattens the outputs: the forward's leaves, then the attributes' new values
        return (result, tuple(v for _, v in written)) if written else result

    with kept_as_library_calls(model, library_modules):
        try:
            with torch.no_grad(), _ScalarsKeepValues():
                out = model(*inputs)
                _restore(snapshot)
                gm = make_fx(run)(state, *inputs)
        except Exception as e:
            raise ProblemError(f"{problem.path}: the reference could not be captured as a graph on meta tensors "
                               f"({type(e).__name__}: {e}); this is a limit of the offline proposer's capture, "
                               f"not necessarily of the model") from e
    if isinstance(out, torch.Tensor):
        output_kind = "tensor"
    elif isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        output_kind = "tuple" if isinstance(out, tuple) else "list"
    else:
        raise ProblemError(f"{problem.path}: the offline proposer handles outputs that are a tensor or a tuple/list "
                           f"of tensors, not {type(out).__name__}")
    functionalise_inplace(gm)
    drop_dead_values(gm)  # outputs forward discards (MultiheadAttention's averaged weights) cost nothing
    hoist_step_projections(gm)  # a recurrent layer's input products, one GEMM over all steps
    canonical_forms(gm)  # mv, baddbmm, scaled addmm as the forms the partitioner lowers
    _single_output_forms(gm)
    constants = _constant_sources(gm, model)
    with kept_as_library_calls(model, library_modules):  # a library call's FLOPs come from its module's settings
        flops, nbytes = _node_costs(gm)
    return Captured(problem, gm, list(state), ["tensor" if isinstance(x, torch.Tensor) else "value" for x in inputs],
                    output_kind, flops, nbytes, constants, list(writes))


CONSTANT_LITERAL_LIMIT = 4096  # elements: a larger tensor constant made in forward is not written into the source


def _constant_sources(gm: GraphModule, model: torch.nn.Module) -> dict[str, str]:
    """Python source (inside ModelNew.forward) for each tensor constant of the graph (`get_attr` nodes): a plain tensor
    attribute of the model as `self.<path>` (ModelNew's copied __init__ makes it), a tensor made from data in
    forward (`torch.tensor(0.5)`) as a literal. A constant that is neither has no entry (render refuses it)."""
    attrs: dict[int, str] = {}
    for mod_name, mod in model.named_modules():
        for name, v in vars(mod).items():
            if isinstance(v, torch.Tensor):
                attrs.setdefault(id(v), "self." + ".".join(p for p in (mod_name, name) if p))
    out: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        c = getattr(gm, node.target, None)
        if not isinstance(c, torch.Tensor):
            continue
        if id(c) in attrs:
            out[node.target] = attrs[id(c)]
        elif c.device.type != "meta" and c.numel() <= CONSTANT_LITERAL_LIMIT and not c.is_complex():
            values = c.detach().cpu().reshape(-1).tolist()
            out[node.target] = (f"torch.tensor({values!r}, dtype={c.dtype}).reshape({tuple(c.shape)!r})"
                                if c.dim() else f"torch.tensor({c.item()!r}, dtype={c.dtype})")
    return out


def _is_pure(node: Node) -> bool:
    """Whether dropping the node, unread, changes nothing: a value-returning op that writes no argument and draws
    no random numbers (an unread `rand` still advances the generator the next random op reads)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None or schema.is_mutable:
        return False
    return torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())


def drop_dead_values(gm: GraphModule) -> None:
    """Remove pure nodes nothing reads, last first (so a chain that only fed a discarded value goes too)."""
    for node in reversed(list(gm.graph.nodes)):
        if not node.users and _is_pure(node):
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


def _returns_alias(node: Node) -> bool:
    """Whether a node's value may share storage with another graph value (a view, an in-place op's result, a
    placeholder, an item of a list of views)."""
    if node.op != "call_function":
        return True
    if node.target is operator.getitem:
        return isinstance(node.args[0], Node) and _returns_alias(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _functional_twin(target: Any) -> Any:
    """aten.relu_.default -> aten.relu.default: the out-of-place op of an in-place one, or None."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments or schema.arguments[0].alias_info is None or \
            not schema.arguments[0].alias_info.is_write:
        return None
    name = schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_") or name in ("copy_", "set_", "resize_", "zero_", "fill_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _single_output_forms(gm: GraphModule) -> None:
    """`log_sigmoid_forward` (output and a buffer only backward reads) as `log_sigmoid` where only the output is read:
    one value per node is what a pointwise lowering can take."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.log_sigmoid_forward.default:
            continue
        items = list(node.users)
        if not all(u.target is operator.getitem for u in items) or \
                any(u.args[1] != 0 and u.users for u in items):
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(torch.ops.aten.log_sigmoid.default, (node.args[0],))
        for u in items:
            if u.args[1] == 0:
                new.meta = dict(u.meta)
                u.replace_all_uses_with(new)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


def functionalise_inplace(gm: GraphModule) -> None:
    """Rewrite in-place ops on values nothing else aliases (`relu_`, `add_`, `x += y` on an intermediate) as their
    out-of-place twins, later readers of the mutated value reading the new node, so fused kernels see value semantics.
    A mutation of a placeholder (an input, a parameter, a BatchNorm running stat) or of a value with views stays in
    place: it must be visible through the other names."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        twin = _functional_twin(node.target)
        if twin is None or not node.args or not isinstance(node.args[0], Node):
            continue
        x = node.args[0]
        vx = x.meta.get("val")
        if _returns_alias(x) or not isinstance(vx, torch.Tensor):
            continue
        others = [u for u in x.users if u is not node]
        if any(_returns_alias(u) and u.target is not operator.getitem for u in others):
            continue  # a view of x (or another in-place op on it) would see the mutation
        tensors_in = [a for a in tree_flatten((node.args[1:], node.kwargs))[0] if isinstance(a, Node)]
        if any(not isinstance(a.meta.get("val"), torch.Tensor) or a.meta["val"].dtype != vx.dtype for a in tensors_in):
            continue  # the out-of-place op could promote where the in-place one casts back
        with gm.graph.inserting_after(node):
            new = gm.graph.call_function(twin, node.args, node.kwargs)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        for u in others:
            if order[u] > order[node]:
                u.replace_input_with(x, new)
        gm.graph.erase_node(node)
        order[new] = order[node]
    gm.graph.lint()
    gm.recompile()


def _fresh(v: Any) -> Any:
    """A plain meta tensor shaped like a node's fake value: FLOPs are counted outside the capture's fake mode, and a
    fake tensor there fails ("mixing fake modes"), which left every node at 0 FLOPs."""
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_fresh(x) for x in v)
    return v


def _meta_arg(a: Any) -> Any:
    if isinstance(a, Node):
        return _fresh(a.meta.get("val"))
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
            if is_module_call(node):
                f = node_flops(*args)
            else:
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
