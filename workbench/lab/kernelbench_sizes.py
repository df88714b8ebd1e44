"""Small sizes for a KernelBench-format file, so its reference and candidates run on the CPU (Triton interpreter).

The rule works on the file's module-level constants assigned an int (a literal or an expression of literals such as
`16384 * 2`) or a tuple of ints (batch, channels, spatial dims, features, sequence length, shapes, ...); constants
computed from others (`out = dim * 4`) follow their inputs unchanged. Each int above a cap is shrunk to a small value;
one at or below the cap (kernel sizes, strides, padding, dims, groups, heads) is kept. Divisibility between constants
is kept: a shrunk value is a multiple of the new value of every smaller constant that divided it (groups | channels,
heads | embed_dim), and one whose multiple would not be smaller keeps its value; constants equal in the file stay
equal. Batch-like names (`batch...`) shrink further, to 2, keeping only equalities. Names bound by unpacking a literal
tuple (`H, W = 32, 32`) are constants like any other; names bound by other unpacking keep their values.

`shrink(path)` tries caps from small to large and keeps the first whose model constructs and traces on meta
tensors (the proposer's capture): a network whose spatial dims are halved five times needs more than 8; then the batch
alone is shrunk (a model whose layer sizes are tied to an input dim the rule cannot see); then the file's own sizes.
"""
from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

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


def shrunk_values(constants: dict[str, int | tuple[int, ...]], cap: int,
                  batch_cap: int = BATCH_CAP) -> dict[str, int | tuple[int, ...]]:
    """The new value of every constant the rule changes (unchanged ones are left out); a tuple's ints shrink like
    constants of their own."""
    scalars = [((name, i), v) for name, val in constants.items()
               for i, v in (enumerate(val) if isinstance(val, tuple) else [(None, val)])]
    new: dict[tuple[str, int | None], int] = {}
    by_value: dict[int, int] = {}  # original -> new: equal constants stay equal (batch_size == input_shape[0])
    done: list[tuple[int, int]] = []  # (original, new) of the non-batch constants decided, smallest first
    # non-batch constants first, smallest first, so each sees the new values of the smaller ones that divide it
    for key, v in sorted(scalars, key=lambda kv: (_is_batch(kv[0][0]), kv[1], kv[0][0], kv[0][1] or 0)):
        if _is_batch(key[0]):  # a batch shares no divisibility worth keeping; only equalities
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


@dataclasses.dataclass
class Sizes:
    """What `shrink` chose: the overrides (name -> Python literal), the cap, and why larger caps were tried."""
    overrides: dict[str, str]
    cap: int | None  # None: the batch only, or (no overrides) the file's own sizes
    tried: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        if not self.overrides:
            return "own sizes" + (f" ({'; '.join(self.tried)})" if self.tried else "")
        head = f"cap {self.cap}: " if self.cap else "batch only: "
        return head + ", ".join(f"{k}={v}" for k, v in sorted(self.overrides.items()))


def shrink(path: str | Path, caps: tuple[int, ...] = CAPS, precision: str | None = None):
    """(Sizes, problem, proposer): the smallest cap under which the file loads and its reference traces. The last
    attempt is the file's own sizes; its error (a file that is not KernelBench-format, a model that cannot be built
    or traced) propagates."""
    source = Path(path).read_text()
    try:
        constants = int_literals(source)
    except SyntaxError:
        constants = {}  # Problem.load below says what is wrong with the file
    tried: list[str] = []
    seen: list[dict[str, int]] = []
    for cap in (*caps, None):  # None: only the batch shrinks (a model tied to its channel or feature sizes)
        values = shrunk_values(constants, cap) if cap is not None else \
            {k: v for k, v in shrunk_values(constants, 1 << 62).items() if _is_batch(k)}
        if not values or values in seen:
            continue
        seen.append(values)
        overrides = {k: repr(v) for k, v in values.items()}
        try:
            problem = Problem.load(str(path), overrides, precision=precision)
            return Sizes(overrides, cap, tried), problem, OfflineProposer(problem)
        except Exception as e:  # too small for this model: try a larger cap
            first = str(e).splitlines()[0][-160:] if str(e) else ""  # the end says what failed, the start is the path
            tried.append(f"{'cap ' + str(cap) if cap else 'batch only'}: {type(e).__name__}: {first}")
    problem = Problem.load(str(path), precision=precision)
    return Sizes({}, None, tried), problem, OfflineProposer(problem)
