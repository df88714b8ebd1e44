"""Render a partitioned graph as a complete candidate module defining `ModelNew`.

- The module header imports torch and triton, then holds each group's kernel and launcher, rendered by its family.
- `ModelNew`'s class body is the reference's less `forward`: its `__init__` (same arguments, same parameter creation
  order, so the same seed gives the same weights), class attributes and other methods, with the module-level
  definitions they read copied along, transitively; `super(Model, self)` becomes `super()` and `Model` `ModelNew`.
  The class `Model` itself is never referenced.
- tensor constants of the graph (`get_attr`) are the model's plain tensor attributes (`self.hidden`) or literals.
- `forward` replays the captured graph: parameters by state-dict name, a launcher call where a group produces a value,
  `torch.ops.aten` calls for every node left to torch (views, unsupported ops), and a call of the submodule itself
  for each submodule kept as a library call (`library_modules.py`: recurrent layers).
"""
from __future__ import annotations

import ast
import math
import operator
import symtable
from typing import Any

import torch
from torch.fx import Node

from ..harness.launch_mode import EAGER, LAUNCH_ATTR
from ..problems.problem import Problem
from .graph import Captured
from .library_modules import call_source, is_module_call, module_expression
from .partition import Group

HEADER = "import math\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport triton\n" \
         "import triton.language as tl\n"


class RenderError(ValueError):
    pass


def py_literal(v: Any) -> str:
    """Python source for a node argument that is not a graph value."""
    if isinstance(v, Node):
        return v.name
    if isinstance(v, (list, tuple)):
        inner = ", ".join(py_literal(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, float):
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        if math.isnan(v):
            return "float('nan')"
        return repr(v)
    if isinstance(v, (bool, int, str)) or v is None:
        return repr(v)
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return "_device"  # the device of the inputs at run time, never the trace's meta device
    if isinstance(v, torch.memory_format) or isinstance(v, torch.layout):
        return str(v)
    raise RenderError(f"cannot render argument {v!r} of type {type(v).__name__}")


PROVIDED = {"self", "torch", "nn", "F", "math", "triton", "tl"}  # names the header binds


def _loads(node: ast.AST) -> set[str]:
    """The global names a statement reads: a scope-aware walk (symtable), so a parameter or local of a method that
    shares a module constant's name (`def __init__(self, dim)` beside `dim = 16384`) does not pull the constant in."""
    out: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        top = table.get_type() == "module"  # a str in 3.11, a StrEnum from 3.13
        for sym in table.get_symbols():
            if sym.is_referenced() and (top or sym.is_global()):
                out.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(symtable.symtable(ast.unparse(node), "<model>", "exec"))
    return out


def _binds(node: ast.stmt) -> set[str]:
    """Module-level names a top-level statement binds (empty for statements that bind nothing we can copy)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return {node.name}
    return set()


class _SuperFix(ast.NodeTransformer):
    """`super(Model, self)` becomes `super()`, and `Model` (its class attributes, its static methods) `ModelNew`."""

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args = []
        return node

    def visit_Name(self, node):
        if node.id == "Model":
            node.id = "ModelNew"
        return node


def init_source(problem: Problem) -> tuple[str, str]:
    """ModelNew's class body (the reference's, less `forward`: class attributes, `__init__` and every other method,
    which `__init__` may call) plus the module-level definitions it reads, transitively (helper functions, helper
    modules and the constants and imports they read, in file order)."""
    tree = ast.parse(problem.source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    members = [n for n in (model.body if model else [])
               if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward")]
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in members):
        members.append(ast.parse("def __init__(self, *args, **kwargs):\n    super().__init__()\n").body[0])
    members = [_SuperFix().visit(ast.fix_missing_locations(m)) for m in members]

    needed = set().union(*(_loads(m) for m in members)) - PROVIDED
    chosen: set[int] = set()
    changed = True
    while changed:  # a definition's own reads are needed too
        changed = False
        for i, node in enumerate(tree.body):
            if i in chosen or node is model:
                continue
            names = _binds(node)
            if names & needed and not (isinstance(node, (ast.Import, ast.ImportFrom)) and names <= PROVIDED):
                chosen.add(i)
                needed |= _loads(node) - names - PROVIDED
                changed = True
    prelude = [ast.unparse(tree.body[i]) for i in sorted(chosen)]
    body = "\n".join("    " + line for m in members for line in (ast.unparse(m) + "\n").splitlines())
    return body + "\n", "\n\n".join(prelude) + ("\n" if prelude else "")


def _view_needs_copy(view: Node, owner: dict[Node, Group]) -> bool:
    """Whether `view` (aten.view of a generated kernel's output, directly or through other views) cannot be taken on
    the layout the kernel writes (contiguous), where eager's output kept its inputs' layout and could: the chain of
    views is replayed on a contiguous meta tensor of the kernel output's shape."""
    chain, node = [], view.args[0]
    while isinstance(node, Node):
        g = owner.get(node)
        if g is not None:
            if node is not g.out:
                return False
            break
        if node.op != "call_function" or not (node.target is operator.getitem or
                                              getattr(node.target, "is_view", False)):
            return False
        chain.append(node)
        node = node.args[0]
    else:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    try:
        t = torch.empty(tuple(val.shape), dtype=val.dtype, device="meta")
        for n in reversed(chain):
            t = t[n.args[1]] if n.target is operator.getitem else n.target(t, *n.args[1:], **n.kwargs)
        torch.ops.aten.view.default(t, *view.args[1:])
    except Exception:  # the view does not exist there (or the chain cannot be replayed: reshape is always right)
        return True
    return False


def render_module(captured: Captured, groups: list[Group], codes: dict[str, tuple[str, str, str]],
                  comment: str, launch: str = EAGER) -> str:
    """codes: gid -> (kernel_src, launcher_src, launcher name); groups mapped to one launcher name share its kernel,
    which is written once. A launch other than eager is declared as the module's `LAUNCH_MODE` (the harness replays
    the forward as one CUDA graph)."""
    problem = captured.problem
    owner: dict[Node, Group] = {}
    for g in groups:
        for n in g.nodes:
            owner[n] = g
    init, prelude = init_source(problem)
    placeholders = captured.placeholders
    n_state = len(captured.state_names)
    inputs = placeholders[n_state:]
    lines = ["    def forward(self, *args):",
             "        _state = dict(self.named_parameters())",
             "        _state.update(self.named_buffers())"]
    for i, name in enumerate(captured.state_names):
        lines.append(f"        {placeholders[i].name} = _state[{name!r}]")
    for i, ph in enumerate(inputs):
        lines.append(f"        {ph.name} = args[{i}]")
    first_tensor = next((ph.name for ph, k in zip(inputs, captured.input_kinds) if k == "tensor"), None)
    lines.append(f"        _device = {first_tensor}.device" if first_tensor
                 else "        _device = torch.device('cpu')")
    for node in captured.gm.graph.nodes:
        if node.op in ("placeholder",):
            continue
        if node.op == "output":
            outs = node.args[0]
            flat = outs if isinstance(outs, (list, tuple)) else [outs]
            names = [py_literal(o) for o in flat]
            if captured.state_writes:  # the last outputs are the tensor attributes forward reassigns
                n_out = len(names) - len(captured.state_writes)
                for path, value in zip(captured.state_writes, names[n_out:]):
                    lines.append(f"        self.{path} = {value}")
                names = names[:n_out]
            if captured.output_kind == "tensor":
                lines.append(f"        return {names[0]}")
            elif captured.output_kind == "list":
                lines.append(f"        return [{', '.join(names)}]")
            else:
                lines.append(f"        return ({', '.join(names)}{',' if len(names) == 1 else ''})")
            continue
        if node.op == "get_attr":
            src = captured.constants.get(node.target)
            if src is None:
                raise RenderError(f"tensor constant {node.target} of the graph is neither a tensor attribute of the "
                                  f"model nor a small tensor made from data in forward: it cannot be written out")
            lines.append(f"        {node.name} = {src}.to(_device)")
            continue
        if node.op != "call_function":
            raise RenderError(f"unsupported graph node {node.op} {node.target}")
        g = owner.get(node)
        if g is not None:
            if node is g.out:
                fn = codes[g.gid][2]
                lines.append(f"        {node.name} = {fn}({', '.join(g.args)}){g.post}")
            continue
        if is_module_call(node):  # a submodule kept as a library call: the candidate calls its own copy
            path, call, tensors = node.args
            expr = call_source(module_expression(path), call, [t.name for t in tensors])
            # flattened as the graph's getitems read it; contiguous, the layout the graph was traced with
            lines.append(f"        {node.name} = [_t.contiguous() for _t in torch.utils._pytree.tree_leaves({expr})]")
            continue
        target = node.target
        if target is operator.getitem:
            lines.append(f"        {node.name} = {node.args[0].name}[{node.args[1]!r}]")
            continue
        if not isinstance(target, torch._ops.OpOverload):
            raise RenderError(f"cannot render a call to {target}")
        if target is torch.ops.aten.view.default and _view_needs_copy(node, owner):
            # a generated kernel writes its output contiguous where eager may have kept its inputs' layout, so a
            # view the reference could take may not exist: reshape is the same view where it does, a copy otherwise
            target = torch.ops.aten.reshape.default
        ns, op = target.namespace, target._schema.name.split("::")[-1]
        overload = target._overloadname
        args = ", ".join(py_literal(a) for a in node.args)
        kwargs = ", ".join(f"{k}={py_literal(v)}" for k, v in node.kwargs.items())
        call = f"torch.ops.{ns}.{op}.{overload}({args}{', ' if args and kwargs else ''}{kwargs})"
        lines.append(f"        {node.name} = {call}")
    unique = {codes[g.gid][2]: codes[g.gid] for g in groups}  # groups may share one kernel (same name, same source)
    kernels = "\n\n".join(k + "\n" + launcher for k, launcher, _ in unique.values())
    doc = '"""' + comment.replace('"""', "'''") + '"""\n'
    declared = f"\n{LAUNCH_ATTR} = {launch!r}\n" if launch != EAGER else ""
    return (doc + HEADER + declared + ("\n" + prelude if prelude else "") + "\n\n" + kernels + "\n\n"
            "class ModelNew(torch.nn.Module):\n" + init + "\n" + "\n".join(lines) + "\n")
