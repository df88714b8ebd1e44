"""`--set` values: Python literals and constant arithmetic, evaluated here, never executed.

A value is a number, string, bool, None, a list or tuple of these, arithmetic on numbers (`2**20`, `4*1024`, `1 << 20`,
`-5`) or a torch dtype (`torch.float16`). Calls, names and every other expression are refused, so `--set` can run no
code. Numbers are bounded (`MAX_MAGNITUDE`): a size like 10**12 is a typo, not a problem, and would allocate before
anything could say so. Whether a value in range suits the problem (0, a negative size) is the problem check's job
(`workbench.problems.check`), which runs the file with it.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Any

MAX_MAGNITUDE = 2**32
MAX_ITEMS = 4096  # elements of a list or tuple value, nested ones counted
MAX_STR = 1024
# the dtypes a problem may be set to (`--set dtype=torch.bfloat16`): a fixed list, not an attribute lookup
DTYPES = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int16",
                    "int32", "int", "int64", "long", "uint8", "bool", "complex64", "float8_e4m3fn", "float8_e5m2"})
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class LiteralError(ValueError):
    """Why a value is not an accepted literal (the caller adds which option and name)."""


class Dtype(str):
    """`torch.NAME` kept as text: its repr is the source the override writes."""

    def __repr__(self) -> str:
        return f"torch.{str(self)}"


def literal(text: str) -> Any:
    """The value `text` denotes; raises `LiteralError` saying what is refused."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise LiteralError(f"not a Python literal ({e.msg})") from None
    count = [0]
    return _value(tree.body, count)


def _number(v: Any) -> Any:
    if isinstance(v, complex):
        raise LiteralError("the arithmetic gives a complex number")
    if isinstance(v, float) and not math.isfinite(v):
        raise LiteralError(f"{v} is not a finite number")
    if isinstance(v, (int, float)) and abs(v) > MAX_MAGNITUDE:
        raise LiteralError(f"{v:.4g} is out of range (|value| <= 2**32): no problem size is that large")
    return v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, Dtype)


def _value(node: ast.AST, count: list[int]) -> Any:
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, str):
            if len(v) > MAX_STR:
                raise LiteralError(f"a string of {len(v)} characters is too long")
            return v
        if v is None or isinstance(v, (bool, int, float)):
            return _number(v)
        raise LiteralError(f"a {type(v).__name__} constant is not accepted")
    if isinstance(node, (ast.List, ast.Tuple)):
        count[0] += len(node.elts)
        if count[0] > MAX_ITEMS:
            raise LiteralError(f"more than {MAX_ITEMS} elements")
        items = [_value(e, count) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        v = _value(node.operand, count)
        if not _is_number(v):
            raise LiteralError("a sign applies to numbers only")
        return _number(_UNARY[type(node.op)](v))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _value(node.left, count), _value(node.right, count)
        if not (_is_number(a) and _is_number(b)):
            raise LiteralError("arithmetic applies to numbers only")
        # a huge power or shift would take the time and memory the bound is there to save
        if isinstance(node.op, (ast.Pow, ast.LShift)) and abs(b) > 64 and abs(a) > 1:
            raise LiteralError("out of range (|value| <= 2**32): no problem size is that large")
        try:
            return _number(_BINOPS[type(node.op)](a, b))
        except (ArithmeticError, ValueError) as e:
            raise LiteralError(str(e)) from None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" \
            and node.attr in DTYPES:
        return Dtype(node.attr)
    what = {ast.Call: "a call", ast.Name: "a name", ast.Attribute: "an attribute"}.get(type(node), "an expression")
    raise LiteralError(f"{what} is not a literal: --set takes literals and constant arithmetic (2**20, 4*1024, "
                       "[64, 64], 'x', torch.float16), never calls or names")


def literal_source(text: str) -> str:
    """The canonical source of the value (`4*1024` -> `4096`), so equal values give the same problem."""
    return repr(literal(text))


__all__ = ["DTYPES", "Dtype", "LiteralError", "MAX_MAGNITUDE", "literal", "literal_source"]
