"""Small sizes for a KernelBench-format file, so its reference and candidates run on the CPU (Triton interpreter).

The rule works on the file's module-level constants assigned an int (a literal or an expression of literals such as
`16384 * 2`) or a tuple of ints (batch, channels, spatial dims, features, sequence length, shapes, ...); constants
computed from others (`out = dim * 4`) follow their inputs unchanged. Each int above a cap is shrunk to a small value;
one at or below the cap (kernel sizes, strides, padding, dims, groups, heads) is kept. Divisibility between constants
is kept: a shrunk value is a multiple of the new value of every smaller constant that divided it (groups | channels,
heads | embed_dim), and one whose multiple would not be smaller keeps its value; constants equal in the file stay
equal. Batch-like names (`batch...`) shrink further, to 2, keeping only equalities. Names bound by unpacking a literal
tuple (`H, W = 32, 32`) are constants like any other; names bound by other unpacking keep their values.

Sizes written inline are shrunk by the same policy, in the same pool (so `height = 224` and a literal 224 stay
equal): the int literals of module-level tuples and lists that mix names and literals (`input_shape = (batch_size, 3,
224, 224)`) and those of get_inputs / get_init_inputs that are sizes (the size arguments of torch's tensor factories,
tuple and list items: `torch.rand(batch_size, 3, 224, 224)`); never a literal of the model's code. The loader's
overrides reach only module-level constants, so these are rewritten in a temporary copy of the file (same file name,
every other byte as written), which the problem is loaded from; the row's sizes say each rewrite
(`get_inputs literal 224->32 x2 (line 20)`).

`shrink(path)` tries caps from small to large and keeps the first whose model constructs and traces on meta
tensors (the proposer's capture): a network whose spatial dims are halved five times needs more than 8. The
constants and the literals shrink together first; then the constants alone (a classifier tied to an inline image
size: `Linear(512 * 7 * 7, ...)`); then only what get_inputs alone reads (a model whose channel counts have a
divisibility the rule cannot see); then the batch alone; then the file's own sizes.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Collection

from ..problems import Problem
from ..proposers.offline import OfflineProposer

CAPS = (8, 16, 32, 64)
BATCH_CAP = 2


def _int_value(node: ast.expr) -> int | None:
    """The int an expression of int literals folds to (`16384 * 2`, `2 ** 10`, `-1`), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _int_value(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        a, b = _int_value(node.left), _int_value(node.right)
        if a is None or b is None or (isinstance(node.op, ast.Pow) and not 0 <= b <= 64):
            return None
        if isinstance(node.op, ast.FloorDiv):
            return a // b if b else None
        if isinstance(node.op, ast.Pow):
            return a ** b
        return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
    return None


def int_literals(source: str) -> dict[str, int | tuple[int, ...]]:
    """Module-level names assigned an int (a literal or an expression of literals; not a bool) or a tuple of ints,
    by a plain assignment or by unpacking a literal tuple (`H, W = 32, 32`); the last binding wins. A name ever bound
    by any other unpacking (`a, b = shape`) is left out: the loader cannot override it."""
    found: dict[str, int | tuple[int, ...]] = {}
    unpacked: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Tuple) and isinstance(value, ast.Tuple) and len(t.elts) == len(value.elts) and \
                    all(isinstance(e, ast.Name) for e in t.elts):
                # `D, H, W = 16, 32, 32`: each name its own constant (the loader splits such an assignment to
                # override one of them)
                for name, item in zip(t.elts, value.elts):
                    v = _int_value(item)
                    if v is None:
                        found.pop(name.id, None)
                    else:
                        found[name.id] = v
                continue
            if not isinstance(t, ast.Name):
                unpacked |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
                continue
            v = _int_value(value)
            if v is None and isinstance(value, ast.Tuple) and value.elts:
                items = [_int_value(e) for e in value.elts]
                v = tuple(items) if all(i is not None for i in items) else None  # type: ignore[arg-type]
            if v is None:
                found.pop(t.id, None)  # rebound to something else: no longer a value we may rewrite
            else:
                found[t.id] = v
    return {k: v for k, v in found.items() if k not in unpacked}


def _is_batch(name: str) -> bool:
    return name.lower().startswith("batch")


def shrunk_values(constants: dict[str, int | tuple[int, ...]], cap: int, batch_cap: int = BATCH_CAP,
                  keep: Collection[str] = ()) -> dict[str, int | tuple[int, ...]]:
    """The new value of every constant the rule changes (unchanged ones are left out); a tuple's ints shrink like
    constants of their own. Names in `keep` keep their values, which still count for the others' equalities and
    divisibility."""
    scalars = [((name, i), v) for name, val in constants.items()
               for i, v in (enumerate(val) if isinstance(val, tuple) else [(None, val)])]
    new: dict[tuple[str, int | None], int] = {}
    by_value: dict[int, int] = {}  # original -> new: equal constants stay equal (batch_size == input_shape[0])
    done: list[tuple[int, int]] = []  # (original, new) of the non-batch constants decided, smallest first
    # non-batch constants first, smallest first, so each sees the new values of the smaller ones that divide it
    # (a kept constant before an equal one that may shrink, so that one stays equal to it)
    for key, v in sorted(scalars, key=lambda kv: (_is_batch(kv[0][0]), kv[1], kv[0][0] not in keep, kv[0][0],
                                                  kv[0][1] or 0)):
        if key[0] in keep:
            value = v
        elif _is_batch(key[0]):  # a batch shares no divisibility worth keeping; only equalities
            # equal to a constant that shrank: the same value; else its own small one
            value = by_value[v] if by_value.get(v, v) != v else min(v, batch_cap)
        elif v <= max(cap, 1):
            value = v
        elif v in by_value:
            value = by_value[v]
        else:
            step = 1
            for orig, val in done:  # keep every divisibility the file had with a smaller constant
                if orig > 1 and v % orig == 0:
                    step = math.lcm(step, val)
            value = step * max(1, math.ceil(cap / step))
            value = value if value < v else v
        if not _is_batch(key[0]):
            done.append((v, value))
            by_value.setdefault(v, value)
        if value != v:
            new[key] = value
    out: dict[str, int | tuple[int, ...]] = {}
    for name, val in constants.items():
        if isinstance(val, tuple):
            items = tuple(new.get((name, i), x) for i, x in enumerate(val))
            if items != val:
                out[name] = items
        elif (name, None) in new:
            out[name] = new[(name, None)]
    return out


# ---- int literals outside the constants: a copy of the file with them rewritten ----
# torch's tensor factories whose positional arguments are sizes (`torch.rand(batch_size, 3, 224, 224)`); `full`'s
# size is its first argument, `randint`'s the tuple after its bounds (the bounds are values, never rewritten)
FACTORIES = frozenset({"rand", "randn", "zeros", "ones", "empty", "full", "randint"})
FUNCTIONS = ("get_inputs", "get_init_inputs")


@dataclasses.dataclass(frozen=True)
class Literal:
    """An int literal (or an expression of literals) that `shrink` may rewrite in a copy of the file: where it is
    (`get_inputs`, `get_init_inputs`, or the module-level names whose tuple/list holds it), its span, its value."""
    where: str
    line: int
    col: int  # UTF-8 byte offsets, as `ast` gives them
    end_line: int
    end_col: int
    value: int
    names: tuple[str, ...] = ()  # the module-level names it is assigned to (none inside a function)

    @property
    def key(self) -> str:
        """Its name among the constants: no identifier, so never a batch and never an override."""
        return f"<{self.where} {self.line}:{self.col}>"


def _site(node: ast.expr, where: str, names: tuple[str, ...] = ()) -> Literal:
    return Literal(where, node.lineno, node.col_offset, node.end_lineno or node.lineno,
                   node.end_col_offset or node.col_offset, _int_value(node), names)  # type: ignore[arg-type]


def _items(node: ast.expr) -> list[ast.expr]:
    """The int expressions of a tuple/list value, nested ones too (`(batch_size, 3, 224, 224)` -> 3, 224, 224)."""
    if _int_value(node) is not None:
        return [node]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [i for e in node.elts for i in _items(e)]
    if isinstance(node, ast.Starred):
        return _items(node.value)
    return []


def _all_ints(node: ast.expr) -> bool:
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_all_ints(e) for e in node.elts)
    return _int_value(node) is not None


def _factory(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute) and func.attr in FACTORIES and isinstance(func.value, ast.Name) \
            and func.value.id == "torch":
        return func.attr
    return None


def _size_argument(factory: str, index: int, arg: ast.expr) -> bool:
    if factory == "full":
        return index == 0
    if factory == "randint":  # randint(high, size) / randint(low, high, size): only the size tuple
        return isinstance(arg, (ast.Tuple, ast.List))
    return True


def _function_sites(fn: ast.FunctionDef) -> list[Literal]:
    """The int literals of get_inputs / get_init_inputs that are sizes: the size arguments of torch's factories, the
    items of tuples and lists, and ints assigned to local names (`shape = (batch_size, 3, 224, 224)`, `n = 4096`),
    each outside the arguments of any other call and outside subscripts (`x.view(16, -1)`, `x[0, 1000]`)."""
    found: list[Literal] = []

    def expr(node: ast.expr | None, sizes: bool) -> None:
        if node is None:
            return
        if sizes and _int_value(node) is not None:
            found.append(_site(node, fn.name))
            return
        if isinstance(node, ast.Call):
            factory = _factory(node.func)
            expr(node.func, False)
            for i, a in enumerate(node.args):
                expr(a, factory is not None and _size_argument(factory, i, a))
            for k in node.keywords:
                expr(k.value, factory is not None and k.arg == "size")
            return
        keep = sizes and isinstance(node, (ast.Tuple, ast.List, ast.Starred))
        for child in ast.iter_child_nodes(node):
            visit(child, keep)

    def visit(node: ast.AST, sizes: bool = False) -> None:
        if isinstance(node, (ast.Return, ast.Assign, ast.AnnAssign)):
            expr(node.value, True)
        elif isinstance(node, ast.expr):
            expr(node, sizes)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    for stmt in fn.body:
        visit(stmt)
    return found


def literal_sites(source: str) -> list[Literal]:
    """The int literals `shrink` may rewrite beyond the constants `int_literals` finds: those of module-level tuples
    and lists that mix names and literals (`input_shape = (batch_size, 3, 224, 224)`), and the sizes written inline
    in get_inputs / get_init_inputs (`torch.rand(batch_size, 3, 224, 224)`). Never one in the model's code."""
    found: list[Literal] = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in FUNCTIONS:
            found += _function_sites(node)  # type: ignore[arg-type]
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        # a tuple of ints alone is a constant (`int_literals`); unpacking binds its items as constants of their own.
        # A list of ints alone (`hidden_layer_sizes = [32768, 32768]`) is no constant the loader rewrites as a list,
        # so its items are sites here (rewritten in the copy, the list kept a list)
        if not isinstance(value, (ast.Tuple, ast.List)) or (isinstance(value, ast.Tuple) and _all_ints(value)) or \
                not all(isinstance(t, ast.Name) for t in targets):
            continue
        names = tuple(t.id for t in targets)  # type: ignore[attr-defined]
        found += [_site(i, " = ".join(names), names) for i in _items(value)]
    return found


def _scope_stores(body: list[ast.AST]) -> set[str]:
    """Names a function's body binds (its locals), not looking into the functions and classes it defines."""
    out: set[str] = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        todo += ast.iter_child_nodes(node)
    return out


def _global_reads(node: ast.AST) -> set[str]:
    """Names `node` reads that are not a function's own (parameters, locals): the module-level ones it can see."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
        body = node.body if isinstance(node.body, list) else [node.body]
        declared = {n for s in body for g in ast.walk(s) if isinstance(g, (ast.Global, ast.Nonlocal)) for n in g.names}
        local = (params | _scope_stores(body)) - declared
        inner = {n for s in body for n in _global_reads(s)} - local
        # defaults, annotations and decorators are read where the function is defined
        outer = [*a.defaults, *(d for d in a.kw_defaults if d is not None),
                 *(getattr(node, "decorator_list", [])), *(x.annotation for x in (*a.posonlyargs, *a.args,
                                                                                *a.kwonlyargs) if x.annotation)]
        return inner | {n for e in outer for n in _global_reads(e)}
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    return {n for child in ast.iter_child_nodes(node) for n in _global_reads(child)}


def model_names(source: str) -> set[str]:
    """Module-level names the model's side reads: those read anywhere but in get_inputs (the Model class,
    get_init_inputs, other functions and statements; a function's own locals are not these), and in turn those
    their module-level values read."""
    deps: dict[str, set[str]] = {}
    used: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "get_inputs":
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            reads = _global_reads(node.value)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        deps.setdefault(n.id, set()).update(reads)
            continue
        used |= _global_reads(node)
    todo = list(used)
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in used:
                used.add(d)
                todo.append(d)
    return used


def rewrite(source: str, new: dict[Literal, int]) -> str:
    """The source with each literal's span replaced by its new value; every other byte as it was."""
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = sorted(((starts[s.line - 1] + s.col, starts[s.end_line - 1] + s.end_col, v) for s, v in new.items()),
                   reverse=True)
    for a, b, v in spans:
        data = data[:a] + str(v).encode() + data[b:]
    return data.decode()


def _describe_literals(changes: list[tuple[Literal, int]]) -> list[str]:
    """`get_inputs literal 224->32 x2 (line 20)`: one entry per place and change."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for s, v in changes:
        groups.setdefault((s.where, s.value, v), []).append(s.line)
    out = []
    for (where, old, v), lines in groups.items():
        at = sorted(set(lines))
        out.append(f"{where} literal {old}->{v}" + (f" x{len(lines)}" if len(lines) > 1 else "")
                   + f" (line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})")
    return out


@dataclasses.dataclass
class Sizes:
    """What `shrink` chose: the overrides (name -> Python literal), the literals rewritten in a copy of the file
    (`path`, loaded instead of the file), the cap, and why earlier attempts failed."""
    overrides: dict[str, str]
    cap: int | None  # None: the batch only, or (no overrides) the file's own sizes
    tried: list[str] = dataclasses.field(default_factory=list)
    literals: list[tuple[Literal, int]] = dataclasses.field(default_factory=list)  # (literal, its new value)
    inputs_only: bool = False  # only what get_inputs alone reads shrank (the model's sizes are the file's)
    path: str | None = None  # the rewritten copy the problem was loaded from (None: the file itself)

    def describe(self) -> str:
        if not self.overrides and not self.literals:
            if not self.tried:
                return "own sizes"
            why: dict[str, list[str]] = {}  # attempts that failed the same way, said once
            for t in self.tried:
                label, _, err = t.partition(": ")
                why.setdefault(err, []).append(label)
            return f"own sizes ({'; '.join(', '.join(labels) + ': ' + err for err, labels in why.items())})"
        head = ("inputs only, " if self.inputs_only else "") + (f"cap {self.cap}: " if self.cap else "batch only: ")
        return head + ", ".join([f"{k}={v}" for k, v in sorted(self.overrides.items())]
                                + _describe_literals(self.literals))


def _load(path: Path, source: str, overrides: dict[str, str], changes: dict[Literal, int], precision: str | None):
    """(problem, proposer, the copy's path or None): the file, or a copy of it with `changes` rewritten (in a
    directory of its own, under the same file name, so the problem's name is the file's; removed with the
    problem), loaded with the overrides, and its reference traced."""
    if not changes:
        problem = Problem.load(str(path), overrides, precision=precision)
        return problem, OfflineProposer(problem), None
    tmp = tempfile.mkdtemp(prefix="workbench_sizes_")
    try:
        copy = Path(tmp) / Path(path).name
        copy.write_text(rewrite(source, changes), encoding="utf-8")
        problem = Problem.load(str(copy), overrides, precision=precision)
        proposer = OfflineProposer(problem)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # workers rebuild the problem from its path: the copy lives as long as the problem does
    weakref.finalize(problem, shutil.rmtree, tmp, ignore_errors=True)
    return problem, proposer, str(copy)


def shrink(path: str | Path, caps: tuple[int, ...] = CAPS, precision: str | None = None):
    """(Sizes, problem, proposer): the first attempt under which the file loads and its reference traces, in order:
    - each cap, small to large, on the constants and the literals (`literal_sites`) together;
    - each cap on the constants alone, the literals as written (a classifier tied to an inline image size);
    - each cap on what get_inputs alone reads (constants and literals; the model's as written: channel counts whose
      divisibility the rule cannot see);
    - the batch alone;
    then the file's own sizes, whose error (a file that is not KernelBench-format, a model that cannot be built or
    traced) propagates. Literals are rewritten in a temporary copy of the file (`Sizes.path`), which the problem is
    loaded from; its name is the file's."""
    path = Path(path)
    source = path.read_text()
    try:
        constants = int_literals(source)
        sites = literal_sites(source)
        model = model_names(source)
    except SyntaxError:
        constants, sites, model = {}, [], set()  # Problem.load below says what is wrong with the file
    by_key = {s.key: s for s in sites}
    pool: dict[str, int | tuple[int, ...]] = {**constants, **{s.key: s.value for s in sites}}
    tied = {k for k in constants if k in model} | \
        {s.key for s in sites if s.where == "get_init_inputs" or any(n in model for n in s.names)}

    def attempts():
        for cap in caps:  # (one that changes no literal is the constants' attempt below)
            values = shrunk_values(pool, cap)
            if any(k in by_key for k in values):
                yield f"cap {cap}", cap, False, values
        for cap in caps:
            yield f"{'constants ' if by_key else ''}cap {cap}", cap, False, shrunk_values(constants, cap)
        for cap in caps:
            yield f"inputs only cap {cap}", cap, True, shrunk_values(pool, cap, keep=tied)
        yield "batch only", None, False, {k: v for k, v in shrunk_values(constants, 1 << 62).items() if _is_batch(k)}

    tried: list[str] = []
    seen: list[dict] = []
    for label, cap, inputs_only, values in attempts():
        if not values or values in seen or (inputs_only and all(_is_batch(k) for k in values)):
            continue  # (the batch alone is the last attempt's)
        seen.append(values)
        overrides = {k: repr(v) for k, v in values.items() if k in constants}
        changes = {by_key[k]: v for k, v in values.items() if k in by_key}
        try:
            problem, proposer, copy = _load(path, source, overrides, changes, precision)  # type: ignore[arg-type]
        except Exception as e:  # too small for this model: try the next attempt
            first = str(e).splitlines()[0][-160:] if str(e) else ""  # the end says what failed, the start is the path
            tried.append(f"{label}: {type(e).__name__}: {first}")
            continue
        literals = sorted(changes.items(), key=lambda kv: (kv[0].line, kv[0].col))
        return Sizes(overrides, cap, tried, literals, inputs_only, copy), problem, proposer  # type: ignore[arg-type]
    problem = Problem.load(str(path), precision=precision)
    return Sizes({}, None, tried), problem, OfflineProposer(problem)
