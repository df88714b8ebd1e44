"""The ladder's static stage: read a candidate's source with `ast`, never import or run it, and flag what a fair kernel
has no need for.

`check_static(source, problem_source, precision)` returns a StageRecord named "static" whose `flags` are dicts
{"check", "severity" ("error"|"warning"), "line", "reason"}. Any error fails the stage; warnings only inform. Each
check is a small function `check_<id>(src) -> list[flag]` over a parsed `Source`, testable on its own. Pass the
problem's effective source and precision (`Problem.source`, `Problem.effective_precision`) so the precision check
knows the problem.

Names are resolved through the module's imports (`import triton.language as tl` makes `tl.dot` read
"triton.language.dot") and through simple aliases (`ev = torch.cuda.Event`). The analysis is syntactic: it catches
the plain forms of each trick and says why; a determined obfuscator is left to the correctness and timing stages.
"""
from __future__ import annotations

import ast
import functools
import re
import time
from typing import Any, Callable

from ..core.records import FAIL, PASS, Stage, StageRecord
from ..core.safe_ast import PARSE_LOCK
from .launch_mode import EAGER, LAUNCH_ATTR, LAUNCH_MODES

ERROR, WARNING = "error", "warning"
FuncDef = (ast.FunctionDef, ast.AsyncFunctionDef)
NN_MODULE = {"torch.nn.Module", "torch.nn.modules.module.Module"}
TRITON_WRAPPERS = {"triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit", "triton.runtime.jit.jit",
                   "triton.runtime.autotune", "triton.runtime.autotuner.autotune", "triton.runtime.heuristics",
                   "triton.runtime.autotuner.heuristics"}


def _flag(check: str, severity: str, node: Any, reason: str) -> dict[str, Any]:
    return {"check": check, "severity": severity, "line": getattr(node, "lineno", 1) or 1, "reason": reason}


def _matches(name: str | None, prefixes: tuple[str, ...] | set[str]) -> bool:
    """`name` is one of `prefixes` or lies under one (`torch.cuda.Stream` matches `torch.cuda.Stream.wait_event`)."""
    return bool(name) and any(name == p or name.startswith(p + ".") for p in prefixes)


def _targets(n: ast.AST) -> list[ast.expr]:
    """What an assignment, augmented assignment or `del` writes to (tuple targets unpacked)."""
    ts = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else \
        [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
    return [x for t in ts for x in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]


def _const_getattr(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
        and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)


def _base(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class Source:
    """A parsed candidate: the tree, parent links, import aliases, classes, functions and Triton kernels."""

    def __init__(self, text: str):
        self.tree = ast.parse(text)
        self.nodes = list(ast.walk(self.tree))
        self.parent = {c: n for n in self.nodes for c in ast.iter_child_nodes(n)}
        self.alias: dict[str, str] = {}
        for n in self.nodes:
            if isinstance(n, ast.Import):
                self.alias.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                                   for a in n.names})
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                self.alias.update({a.asname or a.name: f"{n.module}.{a.name}" for a in n.names})
        roots = {v.split(".")[0] for v in self.alias.values()}
        for n in self.nodes:  # `ev = torch.cuda.Event` makes `ev.elapsed_time` read as torch.cuda.Event.elapsed_time
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                d = self.dotted(n.value)
                if d and "." in d and d.split(".")[0] in roots:
                    self.alias.setdefault(n.targets[0].id, d)
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.funcs = {n.name: n for n in self.tree.body if isinstance(n, FuncDef)}
        self.model_new = self.classes.get("ModelNew")
        self.kernels: dict[str, ast.AST] = {}
        for n in self.nodes:
            if isinstance(n, FuncDef) and any(self._is_wrapper(d) for d in n.decorator_list):
                self.kernels[n.name] = n
            elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and self._is_wrapper(n.value):
                self.kernels.update({t.id: n for t in n.targets if isinstance(t, ast.Name)})
        self.reachable = self._reachable()

    def dotted(self, node: ast.AST | None) -> str | None:
        """`tl.dot` -> 'triton.language.dot'; None for anything that is not a (dotted) name."""
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if _const_getattr(node):  # getattr(torch.cuda, "Stream") reads as torch.cuda.Stream
            base = self.dotted(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def root(self, node: ast.AST) -> str | None:
        """The imported module a target hangs off: `torch.cuda.Event.x` -> 'torch', `getattr(time, 'f')` -> 'time'."""
        while True:
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                node = node.value
            elif isinstance(node, ast.Call) and self.dotted(node.func) == "getattr" and node.args:
                node = node.args[0]
            elif isinstance(node, ast.Name):  # a local variable that happens to be called `gc` is not the module
                return self.alias[node.id].split(".")[0] if node.id in self.alias else \
                    "__builtins__" if node.id == "__builtins__" else None
            else:
                return None

    @functools.cached_property
    def calls(self) -> list[tuple[ast.Call, str | None]]:
        return [(n, self.dotted(n.func)) for n in self.nodes if isinstance(n, ast.Call)]

    @functools.cached_property
    def names(self) -> list[tuple[ast.AST, str]]:
        """Every dotted name hanging off an imported name (each Attribute/Name of a chain), plus the imports."""
        out: list[tuple[ast.AST, str]] = []
        for n in self.nodes:
            if isinstance(n, (ast.Name, ast.Attribute)) and _base(n) in self.alias or _const_getattr(n) \
                    and _base(n.args[0]) in self.alias:
                out.append((n, self.dotted(n)))
            elif isinstance(n, ast.Import):
                out += [(n, a.name) for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                out += [(n, n.module)] + [(n, f"{n.module}.{a.name}") for a in n.names]
        return out

    def _is_wrapper(self, node: ast.AST) -> bool:
        while isinstance(node, ast.Call):  # @triton.jit, @triton.jit(...), triton.autotune(...)(triton.jit(f))
            node = node.func
        return self.dotted(node) in TRITON_WRAPPERS

    def _reachable(self) -> set[ast.AST]:
        """Functions ModelNew.forward could call: module functions and methods of module classes, by name."""
        methods: dict[str, list[ast.AST]] = {}
        for c in self.classes.values():
            for f in c.body:
                if isinstance(f, FuncDef):
                    methods.setdefault(f.name, []).append(f)
        todo = [f for f in (self.model_new.body if self.model_new else [])
                if isinstance(f, FuncDef) and f.name in ("forward", "__call__")]
        seen: set[ast.AST] = set()
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                for n in ast.walk(f):
                    if isinstance(n, ast.Name) and n.id in self.funcs:
                        todo.append(self.funcs[n.id])
                    elif isinstance(n, ast.Name) and n.id in self.classes:
                        todo += [m for m in self.classes[n.id].body if isinstance(m, FuncDef)]
                    elif isinstance(n, ast.Attribute) and n.attr in methods:
                        todo += methods[n.attr]
        return seen

    def enclosing(self, node: ast.AST) -> list[ast.AST]:
        out = []
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (*FuncDef, ast.ClassDef)):
                out.append(node)
        return out

    def in_forward(self, node: ast.AST) -> bool:
        return any(f in self.reachable for f in self.enclosing(node))

    def in_kernel(self, node: ast.AST) -> bool:
        return any(f in self.kernels.values() for f in self.enclosing(node))

    def is_launch(self, call: ast.Call) -> bool:
        f = call.func
        if isinstance(f, ast.Subscript) or isinstance(f, ast.Attribute) and f.attr in ("run", "warmup"):
            f = f.value
        return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) in self.kernels

    def uses_load_inline(self) -> bool:
        return any(d.endswith(("cpp_extension.load_inline", "cpp_extension.load")) for _, d in self.names)


# ---------------------------------------------------------------- the checks

def check_model(src: Source) -> list[dict]:
    flags = []
    if src.model_new is None:
        flags.append(_flag("no_model_new", ERROR, None, "no class ModelNew: a candidate must define "
                                                        "class ModelNew(torch.nn.Module)"))
    if not src.kernels and not src.uses_load_inline():
        flags.append(_flag("no_kernel", WARNING, src.model_new, "no custom kernel: the candidate only calls torch"))
    return flags


def check_kernel_stores(src: Source) -> list[dict]:
    """Warning: a kernel that stores nothing (and returns nothing, so it is no device helper) does no visible work."""
    flags = []
    for name, k in src.kernels.items():
        called = {src.dotted(c.func) or "" for c in ast.walk(k) if isinstance(c, ast.Call)}
        if isinstance(k, FuncDef) and not any(
                d.startswith("triton.language.atomic") or d.endswith((".store", "_store")) or d in src.kernels
                for d in called) and not any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(k)):
            flags.append(_flag("no_store", WARNING, k, f"kernel {name} stores nothing: launching it does no "
                                                       "visible work"))
    return flags


def _computes(stmts: list[ast.stmt], src: Source) -> bool:
    """Does an exception handler compute something (a fallback), rather than log, pass or set a constant?"""
    for n in (x for s in stmts for x in ast.walk(s)):
        if isinstance(n, ast.Call) and not _matches(src.dotted(n.func), ("print", "warnings.warn", "logging",
                                                                         "logger", "log")) \
                or isinstance(n, ast.Return) and n.value is not None and not isinstance(n.value, ast.Constant) \
                or isinstance(n, (ast.Assign, ast.AugAssign)) and not isinstance(n.value, ast.Constant):
            return True
    return False


def check_fallback(src: Source) -> list[dict]:
    """try/except around a launch, in code forward can reach, or whose handler computes; contextlib.suppress."""
    flags = []
    for n in src.nodes:
        if isinstance(n, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            reraises = all(h.body and isinstance(h.body[-1], ast.Raise) for h in n.handlers) and not any(
                isinstance(x, ast.Return) for part in (n.handlers, n.finalbody) for s in part for x in ast.walk(s))
            if reraises:
                continue  # try/finally, or handlers that always re-raise: nothing is hidden
            launches = any(isinstance(x, ast.Call) and src.is_launch(x) for s in n.body for x in ast.walk(s))
            if launches or src.in_forward(n) or any(_computes(h.body, src) for h in n.handlers):
                flags.append(_flag("fallback", ERROR, n, "try/except fallback around kernel code: a failing "
                                                         "kernel would silently fall back"))
        elif isinstance(n, (ast.With, ast.AsyncWith)) and any(
                isinstance(i.context_expr, ast.Call) and _matches(src.dotted(i.context_expr.func),
                                                                  ("contextlib.suppress", "suppress"))
                for i in n.items):
            flags.append(_flag("fallback", ERROR, n, "contextlib.suppress fallback around kernel code: a failing "
                                                     "kernel would be silently skipped"))
    return flags


STREAM_NAMES = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.streams", "torch.cuda.ExternalStream",
                "torch.cuda.set_stream", "torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graphs",
                "torch.cuda.make_graphed_callables", "torch.Stream", "torch.accelerator.set_stream")


def check_streams(src: Source) -> list[dict]:
    return [_flag("stream", ERROR, n, f"uses {d}: work on a side stream or in a CUDA graph can escape the timed "
                                      "window") for n, d in src.names if _matches(d, STREAM_NAMES)]


CONCURRENCY = ("threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "signal", "sched",
               "torch.multiprocessing", "torch.jit.fork", "torch.jit._fork", "os.fork", "os.forkpty", "os.system",
               "os.popen", "os.posix_spawn", "os.posix_spawnp", "os.kill", "os.killpg")


def launch_declaration(src: Source) -> tuple[str, list[dict]]:
    """The launch mode the module declares (`LAUNCH_MODE = "cuda_graph"` at module level asks the harness to replay
    the forward as one CUDA graph) and flags for a declaration the harness cannot trust: a value it does not know,
    or one assigned anywhere but once at module level (a forward that flips it would change what is timed)."""
    flags, mode = [], EAGER
    top = [n for n in src.tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
           and any(isinstance(t, ast.Name) and t.id == LAUNCH_ATTR for t in _targets(n))]
    for n in src.nodes:
        if isinstance(n, (ast.Global, ast.Nonlocal)) and LAUNCH_ATTR in n.names:
            flags.append(_flag("launch", ERROR, n, f"rebinds {LAUNCH_ATTR} inside a function: declare it once at "
                                                   "module level"))
        elif (isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n not in top
              and any(isinstance(t, (ast.Name, ast.Attribute)) and getattr(t, "id", getattr(t, "attr", None))
                      == LAUNCH_ATTR for t in _targets(n))):
            flags.append(_flag("launch", ERROR, n, f"assigns {LAUNCH_ATTR} outside the module's top level"))
    for n in top:
        value = getattr(n, "value", None)
        if not (isinstance(value, ast.Constant) and value.value in LAUNCH_MODES):
            flags.append(_flag("launch", ERROR, n, f"{LAUNCH_ATTR} must be one of {LAUNCH_MODES} as a literal"))
        else:
            mode = value.value
    if len(top) > 1:
        flags.append(_flag("launch", ERROR, top[1], f"{LAUNCH_ATTR} is assigned {len(top)} times"))
    return mode, flags


def check_launch(src: Source) -> list[dict]:
    return launch_declaration(src)[1]


def check_concurrency(src: Source) -> list[dict]:
    return [_flag("thread", ERROR, n, f"uses {d}: threads, processes or async work can run outside the timed window")
            for n, d in src.names if _matches(d, CONCURRENCY) or re.match(r"os\.(spawn|exec)\w*$", d)]


PATCH_ROOTS = {"torch", "triton", "time", "timeit", "numpy", "builtins", "__builtins__", "sys", "gc", "inspect",
               "workbench"}
STATE_CALLS = ("torch.set_float32_matmul_precision", "torch.use_deterministic_algorithms", "torch.manual_seed",
               "torch.seed", "torch.random", "torch.set_rng_state", "torch.cuda.manual_seed", "torch.cuda.seed",
               "torch.cuda.manual_seed_all", "torch.cuda.seed_all", "torch.cuda.set_rng_state",
               "torch.cuda.set_rng_state_all", "torch.set_default_dtype", "torch.set_default_tensor_type",
               "torch.set_default_device", "torch.set_flush_denormal", "numpy.random.seed", "numpy.random.set_state",
               "torch.overrides.TorchFunctionMode", "torch.utils._python_dispatch", "unittest.mock", "mock")


def check_patching(src: Source) -> list[dict]:
    """Writes to torch/triton/timer/interpreter internals, global numeric or RNG state, mocking, aten overrides."""
    def bad(n: ast.AST, what: str) -> dict:
        return _flag("patch", ERROR, n, f"patches {what}: timers, torch/triton internals and global numeric or "
                                        "random state belong to the harness")
    flags = [bad(n, ast.unparse(x)) for n in src.nodes for x in _targets(n)
             if isinstance(x, (ast.Attribute, ast.Subscript)) and src.root(x) in PATCH_ROOTS]
    for call, d in src.calls:
        f = call.func
        if d in ("setattr", "delattr") and call.args and src.root(call.args[0]) in PATCH_ROOTS:
            flags.append(bad(call, f"{d}({ast.unparse(call.args[0])}, ...)"))
        elif isinstance(f, ast.Attribute) and f.attr in ("__setattr__", "__delattr__") and (
                src.root(f.value) in PATCH_ROOTS or call.args and src.root(call.args[0]) in PATCH_ROOTS):
            flags.append(bad(call, ast.unparse(f)))
        elif d in ("torch.library.Library", "torch.library.impl") and any(
                isinstance(a, ast.Constant) and "aten" in str(a.value) for a in call.args):
            flags.append(bad(call, f"{d} of an aten operator (the reference would run it too)"))
        elif _matches(d, STATE_CALLS) or _matches(d, ("torch.backends",)) and not d.split(".")[-1].startswith("is_") \
                or (d or "").startswith("torch._C._set"):
            flags.append(bad(call, d))
    return flags + [bad(n, d) for n, d in src.names if isinstance(n, (ast.Import, ast.ImportFrom))
                    and _matches(d, ("unittest.mock", "mock"))]


IDENTITY_ATTRS = {"data_ptr", "_cdata"}
KEY_METHODS = {"get", "setdefault", "pop", "add", "__getitem__", "__setitem__", "__contains__", "discard", "remove"}
CONTAINER_TYPES = ("dict", "set", "list", "OrderedDict", "defaultdict", "WeakKeyDictionary", "WeakValueDictionary")
TENSOR_ATTRS = {"data_ptr", "shape", "numel", "stride", "contiguous", "is_contiguous", "device", "dtype", "is_cuda",
                "view", "reshape", "size", "element_size", "clone", "storage", "untyped_storage", "dim", "ndim"}


def _identity(node: ast.AST, tainted: set[str]) -> bool:
    """Is this expression a tensor's address/identity (or a tuple/str/sum built from one)? `% 16` checks are not."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "id" or isinstance(f, ast.Attribute) and f.attr in IDENTITY_ATTRS:
            return True
        return isinstance(f, ast.Name) and f.id in ("hash", "str", "tuple", "int", "frozenset") and any(
            _identity(a, tainted) for a in node.args)
    if isinstance(node, ast.Attribute):
        return node.attr in IDENTITY_ATTRS
    if isinstance(node, ast.Name):
        return node.id in tainted
    if isinstance(node, ast.BinOp):
        return not isinstance(node.op, (ast.Mod, ast.BitAnd)) and (
            _identity(node.left, tainted) or _identity(node.right, tainted))
    if isinstance(node, ast.JoinedStr):
        return any(_identity(v.value, tainted) for v in node.values if isinstance(v, ast.FormattedValue))
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_identity(e, tainted) for e in node.elts)


def _containers(src: Source) -> set[str]:
    """Names and `self.attr`s bound to an empty dict/set/list: the places a cache would live."""
    out = set()
    for n in src.nodes:
        v = n.value if isinstance(n, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(v, ast.Dict) and not v.keys or isinstance(v, (ast.List, ast.Set)) and not v.elts \
                or isinstance(v, ast.Call) and (src.dotted(v.func) or "").split(".")[-1] in CONTAINER_TYPES:
            out.update(ast.unparse(t) for t in _targets(n))
    return out


def _takes_tensors(src: Source, f: Any) -> bool:
    """Could this function receive tensors? forward; a Tensor annotation; an unannotated parameter used as one."""
    params = f.args.posonlyargs + f.args.args + f.args.kwonlyargs + [a for a in (f.args.vararg, f.args.kwarg) if a]
    params = [a for a in params if a.arg not in ("self", "cls")]
    if f.name == "forward" and params or any(a.annotation is not None and "Tensor" in ast.unparse(a.annotation)
                                             for a in params):
        return True
    loose = {a.arg for a in params if a.annotation is None}
    for n in ast.walk(f):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in loose \
                and n.attr in TENSOR_ATTRS:
            return True  # x.shape, x.data_ptr(), ...
        if isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and a.id in loose for a in n.args) and (
                src.is_launch(n) or src.root(n.func) == "torch" and not _matches(src.dotted(n.func), ("torch.cuda",))):
            return True  # kernel[grid](x, ...), torch.relu(x); not torch.cuda.get_device_properties(i)
    return False


def check_identity_cache(src: Source) -> list[dict]:
    """data_ptr()/id() as a key, in a comparison or stored; forward's tensors as container keys; functools caches."""
    reason = "output cache keyed on tensor address (data_ptr/id): a repeated input address returns a stale result"
    tainted = {t.id for n in src.nodes if isinstance(n, ast.Assign) and _identity(n.value, set())
               for t in n.targets if isinstance(t, ast.Name)}  # `key = x.data_ptr()`
    containers = _containers(src)
    keys = tainted | {a.arg for f in src.reachable if f.name == "forward" for a in f.args.args[1:]}
    flags = []
    for n in src.nodes:
        if isinstance(n, ast.Subscript):
            hit = _identity(n.slice, tainted) or ast.unparse(n.value) in containers and _identity(n.slice, keys)
        elif isinstance(n, ast.Compare):
            hit = any(_identity(x, tainted) for x in [n.left, *n.comparators]) or any(
                isinstance(op, (ast.In, ast.NotIn)) and ast.unparse(c) in containers and _identity(n.left, keys)
                for op, c in zip(n.ops, n.comparators))
        elif isinstance(n, (ast.Dict, ast.Set)):
            hit = any(k is not None and _identity(k, tainted) for k in (n.keys if isinstance(n, ast.Dict) else n.elts))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in KEY_METHODS and n.args:
            hit = _identity(n.args[0], tainted) or ast.unparse(n.func.value) in containers \
                and _identity(n.args[0], keys)
        elif isinstance(n, ast.Assign):  # `self._last_ptr = x.data_ptr()`
            hit = _identity(n.value, tainted) and any(isinstance(t, ast.Attribute) for t in n.targets)
        else:
            hit = isinstance(n, ast.Attribute) and n.attr in ("WeakKeyDictionary", "WeakValueDictionary")
        if hit:
            flags.append(_flag("address", ERROR, n, reason))
    for f in (n for n in src.nodes if isinstance(n, FuncDef)):
        for d in f.decorator_list:
            if src.dotted(d.func if isinstance(d, ast.Call) else d) in ("functools.lru_cache", "functools.cache") \
                    and _takes_tensors(src, f):
                flags.append(_flag("address", ERROR, d, "output cache keyed on tensor address: functools cache on "
                                                        f"{f.name}, which handles tensors (tensors hash by identity)"))
    return flags


def check_state_cache(src: Source) -> list[dict]:
    """Warnings: module-level containers filled at call time, and instance state written while computing."""
    module_names = {ast.unparse(t) for n in src.tree.body for t in _targets(n) if isinstance(t, ast.Name)} \
        & _containers(src)
    flags = []
    for n in src.nodes:
        if not src.enclosing(n) or src.in_kernel(n) or src.enclosing(n)[0].name == "__init__":
            continue
        live = src.in_forward(n)
        bases = [ast.unparse(t.value if isinstance(t, ast.Subscript) else t) for t in _targets(n)]
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in (
                "append", "update", "setdefault", "__setitem__", "add", "extend", "insert"):
            bases = [ast.unparse(n.func.value)]
        hit = [b for b in bases if b in module_names and (isinstance(n, ast.Call) or any(
            isinstance(t, ast.Subscript) for t in _targets(n))) or live and b.startswith("self.")]
        if hit:
            flags.append(_flag("state_cache", WARNING, n, f"state kept across calls in {hit[0]}: an output cached "
                                                          "there would be returned stale"))
    return flags


REF_NAMES = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "inspect.stack", "inspect.currentframe",
             "inspect.getouterframes", "inspect.getinnerframes", "inspect.trace", "sys._getframe",
             "sys._current_frames", "sys.modules", "traceback.extract_stack", "traceback.walk_stack")
REF_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame", "__globals__", "__subclasses__"}
REF_MODULES = ("workbench", "__main__", "kernelbench", "KernelBench", "reference")


def check_reference(src: Source) -> list[dict]:
    """The reference Model, the harness, the caller's frames, other modules' globals, the object graph."""
    def bad(n: ast.AST, what: str) -> dict:
        return _flag("reference", ERROR, n, f"reads the reference / caller state ({what})")
    defined = set(src.classes) | set(src.funcs) | {t.id for n in src.nodes for t in _targets(n)
                                                    if isinstance(t, ast.Name)}
    modules = set(src.alias.values())
    flags = [bad(n, d) for n, d in src.names if _matches(d, REF_NAMES)]
    for n in src.nodes:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            if any(m.split(".")[0] in REF_MODULES or m.startswith("_wb_") for m in mods):
                flags.append(bad(n, f"imports {', '.join(mods)}"))
            elif isinstance(n, ast.ImportFrom) and any(a.name == "Model" for a in n.names):
                flags.append(bad(n, f"imports Model from {n.module}"))
        elif isinstance(n, ast.Name) and n.id == "Model" and "Model" not in defined and isinstance(n.ctx, ast.Load):
            flags.append(bad(n, "uses the reference class Model"))
        elif isinstance(n, ast.Attribute) and (n.attr in REF_ATTRS or n.attr == "__dict__" and
                                               src.dotted(n.value) in modules):
            flags.append(bad(n, f"reads {ast.unparse(n)}"))
        elif isinstance(n, ast.Call) and n.args and (
                src.dotted(n.func) == "vars" and src.dotted(n.args[0]) in modules
                or src.dotted(n.func) in ("__import__", "builtins.__import__")
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == "__main__"):
            flags.append(bad(n, ast.unparse(n)))
    bases = [src.dotted(b) for b in (src.model_new.bases if src.model_new else [])]
    if any(b not in NN_MODULE and b not in src.classes for b in bases):  # super().forward runs someone else's code
        flags += [bad(n, f"super().{n.attr} of a base that is not torch.nn.Module") for n in ast.walk(src.model_new)
                  if isinstance(n, ast.Attribute) and n.attr in ("forward", "__call__")
                  and isinstance(n.value, ast.Call) and src.dotted(n.value.func) == "super"]
    return flags


NETWORK = ("socket", "requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib",
           "paramiko", "websocket", "websockets", "ssl", "torch.hub", "torch.utils.model_zoo", "huggingface_hub",
           "xmlrpc", "asyncssh", "pycurl")
FILE_WRITES = ("os.open", "os.remove", "os.unlink", "os.rename", "os.replace", "os.makedirs", "os.mkdir", "os.rmdir",
               "os.removedirs", "os.truncate", "os.ftruncate", "os.chmod", "os.chown", "os.link", "os.symlink",
               "os.write", "os.writev", "os.pwrite", "os.fdopen", "os.mkfifo", "os.mknod", "os.utime", "shutil",
               "tempfile", "torch.save", "torch.from_file", "torch.UntypedStorage.from_file", "numpy.save",
               "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "numpy.memmap", "numpy.lib.format",
               "io.FileIO", "_io", "logging.FileHandler", "logging.handlers", "logging.basicConfig", "pickle.dump",
               "json.dump", "os.putenv", "os.unsetenv")
# Modules whose only purpose here would be to reach the disk (a database, a key-value file, an archive).
FILE_MODULES = ("sqlite3", "dbm", "shelve", "zipfile", "tarfile", "gzip", "bz2", "lzma", "mmap", "fcntl", "pty",
                "h5py", "pandas", "pyarrow")
# Methods that write a file whatever object they hang off (ndarray.tofile, DataFrame.to_csv, Storage.from_file).
WRITE_METHODS = ("write_text", "write_bytes", "touch", "unlink", "tofile", "to_csv", "to_parquet", "to_pickle",
                 "to_hdf", "to_feather", "savefig", "from_file", "symlink_to", "hardlink_to", "mkdir",
                 "rmdir", "chmod")
FILE_READS = ("torch.load", "numpy.load", "numpy.fromfile", "pickle.load")
ENV_WRITES = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__")
# Substrings of a computed getattr name that point at the routes above (`getattr(p, "write_" + "bytes")`).
RISKY_ATTR_PARTS = ("write", "open", "save", "file", "unlink", "remove", "system", "exec", "popen", "spawn", "socket",
                    "connect", "touch", "rename", "dump", "environ", "putenv", "import", "hub")


def _computed_name_parts(node: ast.AST) -> list[str]:
    """The literal pieces of a name built at run time ('write_' + 'bytes', f'write_{x}', ''.join([...]))."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def check_side_effects(src: Source) -> list[dict]:
    """Writing files or the environment, and the network: errors. Reading files: a warning. The OS sandbox of the
    workers (`harness.child.isolation`) is the barrier; this stage names the plain forms early and says why."""
    def bad(n: ast.AST, what: str, severity: str = ERROR) -> dict:
        tail = "a candidate computes, it does not touch the machine" if severity == ERROR else "check what it reads"
        return _flag("side_effect", severity, n, f"file, network or environment side effect ({what}): {tail}")
    flags = [bad(n, d) for n, d in src.names if _matches(d, NETWORK) or _matches(d, FILE_MODULES)
             or _matches(d, FILE_WRITES) and isinstance(n, (ast.Import, ast.ImportFrom))]
    called = {id(c.func) for c, _ in src.calls}
    for n in src.nodes:  # `o = open; o(path, "w")`, `f(open)`: open used as a value escapes the mode check below
        if isinstance(n, ast.Name) and n.id == "open" and isinstance(n.ctx, ast.Load) and id(n) not in called \
                and "open" not in src.funcs:
            flags.append(bad(n, "open used as a value"))
    for call, d in src.calls:
        attr = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        kw = {k.arg: k.value for k in call.keywords}
        mode: Any = "none"
        if d in ("open", "io.open", "builtins.open", "codecs.open"):
            mode = call.args[1] if len(call.args) > 1 else kw.get("mode")
        elif attr == "open" and d != "os.open":  # Path(...).open(mode)
            mode = call.args[0] if call.args else kw.get("mode")
        if d == "getattr" and len(call.args) >= 2 and not isinstance(call.args[1], ast.Constant):
            parts = [p.lower() for p in _computed_name_parts(call.args[1])]
            if any(r in p for p in parts for r in RISKY_ATTR_PARTS):
                flags.append(bad(call, f"getattr with a computed name built from {parts}"))
        if mode != "none":
            writes = mode is not None and (not isinstance(mode, ast.Constant) or set(str(mode.value)) & set("wax+"))
            flags.append(bad(call, "opens a file for writing") if writes else bad(call, "reads a file", WARNING))
        elif _matches(d, FILE_WRITES) or attr in WRITE_METHODS:
            flags.append(bad(call, d or attr))
        elif _matches(d, FILE_READS) or attr in ("read_text", "read_bytes"):
            flags.append(bad(call, d or attr, WARNING))
        elif attr in ENV_WRITES and src.dotted(call.func.value) == "os.environ":
            flags.append(bad(call, f"os.environ.{attr}"))
    return flags + [bad(n, "writes os.environ") for n in src.nodes
                    if any(isinstance(t, ast.Subscript) and src.dotted(t.value) == "os.environ" for t in _targets(n))]


HALF_NAMES = ("torch.float16", "torch.half", "torch.bfloat16", "triton.language.float16", "triton.language.bfloat16")


def check_precision(src: Source, fp32_strict: bool = True, tf32_convs: bool = False) -> list[dict]:
    """Warnings only (the numeric check decides); applies to a strict fp32 problem, and to one whose reference runs
    cuDNN's convolutions in tf32 (`tf32_convs`: tf32 is the reference's own math there, a downgrade for its matmuls)."""
    if not (fp32_strict or tf32_convs):
        return []
    reason = "possible precision downgrade in an fp32 problem: correctness will judge"
    tf32_reason = (f"{reason} at tf32 bounds (tf32 requested: the reference's convolutions run tf32, its matmuls "
                   "fp32)") if tf32_convs else f"{reason} (tf32 requested)"
    flags = [_flag("precision", WARNING, n, f"{reason} ({d})") for n, d in src.names
             if _matches(d, HALF_NAMES) or re.match(r"(torch|triton\.language)\.float8", d)]
    for call, d in src.calls:
        kw = {k.arg: k.value for k in call.keywords}
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("half", "bfloat16") and not call.args:
            flags.append(_flag("precision", WARNING, call, f"{reason} (.{call.func.attr}())"))
        prec, tf32 = kw.get("input_precision"), kw.get("allow_tf32")
        if isinstance(prec, ast.Constant) and str(prec.value).lower().startswith("tf32") \
                or isinstance(tf32, ast.Constant) and tf32.value is True:
            flags.append(_flag("precision", WARNING, call, tf32_reason))
        elif d == "triton.language.dot" and prec is None and tf32 is None:
            flags.append(_flag("tf32_dot", WARNING, call, "tl.dot on fp32 inputs defaults to tf32: pass "
                                                          "input_precision=\"ieee\" for fp32 accuracy"))
    return flags + [_flag("tf32_dot", WARNING, n, "a @ b in a Triton kernel is tl.dot with tf32 inputs")
                    for n in src.nodes if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
                    and src.in_kernel(n)]


DYNAMIC_CALLS = ("exec", "eval", "compile", "__import__", "builtins.exec", "builtins.eval", "builtins.compile",
                 "builtins.__import__")
DYNAMIC_MODULES = ("importlib", "ctypes", "cffi", "marshal", "types.CodeType", "types.FunctionType")


def check_dynamic(src: Source) -> list[dict]:
    flags = [_flag("dynamic", ERROR, c, f"dynamic code or raw memory access ({d})") for c, d in src.calls
             if d in DYNAMIC_CALLS and not (isinstance(c.func, ast.Name) and c.func.id in src.funcs)]
    return flags + [_flag("dynamic", ERROR, n, f"dynamic code or raw memory access ({d})") for n, d in src.names
                    if _matches(d, DYNAMIC_MODULES)]


CHECKS: tuple[Callable[[Source], list[dict]], ...] = (
    check_model, check_kernel_stores, check_fallback, check_streams, check_concurrency, check_patching,
    check_identity_cache, check_state_cache, check_reference, check_side_effects, check_dynamic, check_launch)


def is_strict_fp32(problem_source: str | None, precision: str = "strict") -> bool:
    """A strict-precision problem whose source names no half type."""
    return precision == "strict" and problem_source is not None and not re.search(
        r"float16|bfloat16|\bhalf\b", problem_source)


def _summary(fs: list[dict]) -> str:
    """One entry per distinct reason, with the lines it was found on."""
    lines: dict[str, list[str]] = {}
    for f in fs:
        lines.setdefault(f["reason"], []).append(str(f["line"]))
    return "; ".join(f"{r} (line{'s' if len(ls) > 1 else ''} {', '.join(ls)})" for r, ls in lines.items())


def check_static(source: str, problem_source: str | None = None, precision: str = "strict") -> StageRecord:
    """Run every check on the candidate's source; FAIL on any error flag."""
    with PARSE_LOCK:  # one parse at a time across threads (see workbench.core.safe_ast)
        return _check_static(source, problem_source, precision)


def _check_static(source: str, problem_source: str | None, precision: str) -> StageRecord:
    t0 = time.perf_counter()
    try:
        src = Source(source)
    except SyntaxError as e:
        reason = f"syntax error at line {e.lineno}: {e.msg}"
        return StageRecord(Stage.STATIC, FAIL, reason, cost_s=time.perf_counter() - t0,
                           flags=[_flag("syntax", ERROR, e, reason)], data={"parsed": False})
    fp32 = is_strict_fp32(problem_source, precision)
    flags, seen = [], set()
    tf32_convs = precision == "cudnn_tf32" and is_strict_fp32(problem_source, "strict")
    for f in sorted([f for check in CHECKS for f in check(src)] + check_precision(src, fp32, tf32_convs),
                    key=lambda f: (f["line"], f["check"])):
        if (f["check"], f["line"]) not in seen:  # one flag per check and line
            seen.add((f["check"], f["line"]))
            flags.append(f)
    errors = [f for f in flags if f["severity"] == ERROR]
    warnings = [f for f in flags if f["severity"] == WARNING]
    if errors:
        verdict, reason = FAIL, _summary(errors)
    else:
        verdict = PASS
        reason = f"no errors; {len(warnings)} warning(s): {_summary(warnings)}" if warnings else "no issues"
    data = {"parsed": True, "kernels": len(src.kernels), "kernel_names": sorted(src.kernels),
            "load_inline": src.uses_load_inline(), "has_model_new": src.model_new is not None,
            "strict_fp32": fp32, "errors": len(errors), "warnings": len(warnings),
            "launch": launch_declaration(src)[0]}
    return StageRecord(Stage.STATIC, verdict, reason, cost_s=time.perf_counter() - t0, data=data, flags=flags)
