"""Render a partitioned graph as a complete candidate module defining `ModelNew`.

- The module header imports torch and triton, then holds each group's kernel and launcher, rendered by its family.
- `ModelNew.__init__` is the reference's own `__init__` (same arguments, same parameter creation order, so the same
  seed gives the same weights), with the module-level names it uses copied along; `super(Model, self)` becomes
  `super()`. The class `Model` itself is never referenced.
- `forward` replays the captured graph: parameters by state-dict name, a launcher call where a group produces a value,
  `torch.ops.aten` calls for every node left to torch (views, unsupported ops).
"""
from __future__ import annotations

import ast
import builtins
import math
import operator
from typing import Any

import torch
from torch.fx import Node

from ..problems.problem import Problem
from .graph import Captured
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


def init_source(problem: Problem) -> tuple[str, str]:
    """The reference's __init__ as ModelNew's, plus the module-level definitions it reads."""
    tree = ast.parse(problem.source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None)
    if init is None:
        return "    def __init__(self, *args, **kwargs):\n        super().__init__()\n", ""

    class SuperFix(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id == "super":
                node.args = []
            return node

    init = SuperFix().visit(ast.fix_missing_locations(init))
    used = {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    params = {a.arg for a in init.args.args + init.args.kwonlyargs}
    for extra in (init.args.vararg, init.args.kwarg):
        if extra:
            params.add(extra.arg)
    known = params | set(dir(builtins)) | {"self", "torch", "nn", "F", "math", "triton", "tl"}
    needed = used - known
    prelude = []
    for node in tree.body:  # module-level definitions the __init__ reads (sizes, helper modules)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            if names & needed:
                prelude.append(ast.unparse(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if names & needed:
                prelude.append(ast.unparse(node))
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in needed and node.name != "Model":
            prelude.append(ast.unparse(node))
    body = "\n".join("    " + line for line in ast.unparse(init).splitlines())
    return body + "\n", "\n".join(prelude) + ("\n" if prelude else "")


def render_module(captured: Captured, groups: list[Group], codes: dict[str, tuple[str, str, str]],
                  comment: str) -> str:
    """codes: gid -> (kernel_src, launcher_src, launcher name)."""
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
            if captured.output_kind == "tensor":
                lines.append(f"        return {names[0]}")
            elif captured.output_kind == "list":
                lines.append(f"        return [{', '.join(names)}]")
            else:
                lines.append(f"        return ({', '.join(names)}{',' if len(names) == 1 else ''})")
            continue
        if node.op != "call_function":
            raise RenderError(f"unsupported graph node {node.op} {node.target}")
        g = owner.get(node)
        if g is not None:
            if node is g.out:
                fn = codes[g.gid][2]
                lines.append(f"        {node.name} = {fn}({', '.join(g.args)}){g.post}")
            continue
        target = node.target
        if target is operator.getitem:
            lines.append(f"        {node.name} = {node.args[0].name}[{node.args[1]!r}]")
            continue
        if not isinstance(target, torch._ops.OpOverload):
            raise RenderError(f"cannot render a call to {target}")
        ns, op = target.namespace, target._schema.name.split("::")[-1]
        overload = target._overloadname
        args = ", ".join(py_literal(a) for a in node.args)
        kwargs = ", ".join(f"{k}={py_literal(v)}" for k, v in node.kwargs.items())
        call = f"torch.ops.{ns}.{op}.{overload}({args}{', ' if args and kwargs else ''}{kwargs})"
        lines.append(f"        {node.name} = {call}")
    kernels = "\n\n".join(codes[g.gid][0] + "\n" + codes[g.gid][1] for g in groups)
    doc = '"""' + comment.replace('"""', "'''") + '"""\n'
    return (doc + HEADER + ("\n" + prelude if prelude else "") + "\n\n" + kernels + "\n\n"
            "class ModelNew(torch.nn.Module):\n" + init + "\n" + "\n".join(lines) + "\n")
