"""Aten pointwise operators as Triton expressions over fp32 values.

`lower(node, arg_exprs)` returns the Triton expression for one pointwise node, given the expressions of its tensor
arguments (scalars are inlined as literals), or None when the operator is not in the table (the node then stays a
torch call). Every expression computes in fp32; a `_to_copy` to a narrower float type rounds through that type so the
chain sees the same values eager does at that point.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.fx import Node

aten = torch.ops.aten

SQRT1_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654


def literal(v: Any) -> str:
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    if isinstance(v, (int, float)):
        f = float(v)
        if math.isinf(f):
            return "float('inf')" if f > 0 else "float('-inf')"
        if math.isnan(f):
            return "float('nan')"
        return repr(f)
    raise TypeError(f"not a scalar literal: {v!r}")


def _tanh(x: str) -> str:
    return f"(2.0 * tl.sigmoid(2.0 * ({x})) - 1.0)"


def _gelu(a: list[str], kw: dict[str, Any]) -> str:
    x = a[0]
    if kw.get("approximate", "none") == "tanh":
        return f"(0.5 * ({x}) * (1.0 + {_tanh(f'{SQRT_2_OVER_PI} * (({x}) + 0.044715 * ({x}) * ({x}) * ({x}))')}))"
    return f"(0.5 * ({x}) * (1.0 + tl.math.erf(({x}) * {SQRT1_2})))"


def _add(a, kw, sign="+"):
    alpha = kw.get("alpha", 1)
    b = a[1] if alpha == 1 else f"({literal(alpha)} * ({a[1]}))"
    return f"(({a[0]}) {sign} ({b}))"


def _pow(a, kw):
    e = kw["exponent"]
    if isinstance(e, (int, float)) and float(e).is_integer() and 0 <= e <= 4:
        return "(" + " * ".join([f"({a[0]})"] * int(e)) + ")" if e else "1.0"
    if e == 0.5:
        return f"tl.sqrt({a[0]})"
    if e == -0.5:
        return f"tl.math.rsqrt({a[0]})"
    if e == -1:
        return f"(1.0 / ({a[0]}))"
    return f"tl.exp2({literal(e)} * tl.log2({a[0]}))"  # defined for positive bases, as pow is for fractional exponents


def _clamp(a, kw):
    x = a[0]
    lo, hi = kw.get("min"), kw.get("max")
    if lo is not None:
        x = f"tl.maximum({x}, {literal(lo)})"
    if hi is not None:
        x = f"tl.minimum({x}, {literal(hi)})"
    return x


def _to_copy(a, kw):
    dt = kw.get("dtype")
    if dt in (torch.bfloat16, torch.float16):
        t = "tl.bfloat16" if dt == torch.bfloat16 else "tl.float16"
        return f"({a[0]}).to({t}).to(tl.float32)"
    return a[0]


# op -> (positional tensor-or-scalar parameter names, builder(arg_exprs, kwargs) -> str)
TABLE: dict[Any, tuple[tuple[str, ...], Callable[[list[str], dict[str, Any]], str]]] = {
    aten.add.Tensor: (("self", "other"), _add),
    aten.add.Scalar: (("self", "other"), _add),
    aten.sub.Tensor: (("self", "other"), lambda a, kw: _add(a, kw, "-")),
    aten.sub.Scalar: (("self", "other"), lambda a, kw: _add(a, kw, "-")),
    aten.rsub.Scalar: (("self", "other"), lambda a, kw: f"(({a[1]}) - ({a[0]}))"),
    aten.rsub.Tensor: (("self", "other"), lambda a, kw: f"(({a[1]}) - ({a[0]}))"),
    aten.mul.Tensor: (("self", "other"), lambda a, kw: f"(({a[0]}) * ({a[1]}))"),
    aten.mul.Scalar: (("self", "other"), lambda a, kw: f"(({a[0]}) * ({a[1]}))"),
    aten.div.Tensor: (("self", "other"), lambda a, kw: f"(({a[0]}) / ({a[1]}))"),
    aten.div.Scalar: (("self", "other"), lambda a, kw: f"(({a[0]}) / ({a[1]}))"),
    aten.neg.default: (("self",), lambda a, kw: f"(-({a[0]}))"),
    aten.relu.default: (("self",), lambda a, kw: f"tl.maximum({a[0]}, 0.0)"),
    aten.sigmoid.default: (("self",), lambda a, kw: f"tl.sigmoid({a[0]})"),
    aten.silu.default: (("self",), lambda a, kw: f"(({a[0]}) * tl.sigmoid({a[0]}))"),
    aten.tanh.default: (("self",), lambda a, kw: _tanh(a[0])),
    aten.gelu.default: (("self",), _gelu),
    aten.exp.default: (("self",), lambda a, kw: f"tl.exp({a[0]})"),
    aten.log.default: (("self",), lambda a, kw: f"tl.log({a[0]})"),
    aten.sqrt.default: (("self",), lambda a, kw: f"tl.sqrt({a[0]})"),
    aten.rsqrt.default: (("self",), lambda a, kw: f"tl.math.rsqrt({a[0]})"),
    aten.abs.default: (("self",), lambda a, kw: f"tl.abs({a[0]})"),
    aten.reciprocal.default: (("self",), lambda a, kw: f"(1.0 / ({a[0]}))"),
    aten.sin.default: (("self",), lambda a, kw: f"tl.sin({a[0]})"),
    aten.cos.default: (("self",), lambda a, kw: f"tl.cos({a[0]})"),
    aten.pow.Tensor_Scalar: (("self", "exponent"), lambda a, kw: _pow(a, {**kw, "exponent": kw["_exponent"]})),
    aten.maximum.default: (("self", "other"), lambda a, kw: f"tl.maximum({a[0]}, {a[1]})"),
    aten.minimum.default: (("self", "other"), lambda a, kw: f"tl.minimum({a[0]}, {a[1]})"),
    aten.clamp.default: (("self",), _clamp),
    aten.hardtanh.default: (("self",), lambda a, kw: _clamp(a, {"min": kw.get("min_val", -1.0),
                                                               "max": kw.get("max_val", 1.0)})),
    aten.leaky_relu.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > 0, {a[0]}, "
                                                       f"({a[0]}) * {literal(kw.get('negative_slope', 0.01))})"),
    aten.elu.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > 0, {a[0]}, "
                                                f"{literal(kw.get('alpha', 1.0))} * (tl.exp({a[0]}) - 1.0))"),
    aten.softplus.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) * {literal(kw.get('beta', 1.0))} > "
                                                     f"{literal(kw.get('threshold', 20.0))}, {a[0]}, "
                                                     f"tl.log(1.0 + tl.exp(({a[0]}) * {literal(kw.get('beta', 1.0))}))"
                                                     f" / {literal(kw.get('beta', 1.0))})"),
    aten.hardswish.default: (("self",), lambda a, kw: f"(({a[0]}) * tl.minimum(tl.maximum(({a[0]}) + 3.0, 0.0), 6.0)"
                                                      f" / 6.0)"),
    aten.hardsigmoid.default: (("self",), lambda a, kw: f"(tl.minimum(tl.maximum(({a[0]}) + 3.0, 0.0), 6.0) / 6.0)"),
    aten.mish.default: (("self",), lambda a, kw: f"(({a[0]}) * {_tanh(f'tl.log(1.0 + tl.exp({a[0]}))')})"),
    aten.where.self: (("condition", "self", "other"), lambda a, kw: f"tl.where({a[0]}, {a[1]}, {a[2]})"),
    aten.masked_fill.Scalar: (("self", "mask", "value"), lambda a, kw: f"tl.where({a[1]}, {a[2]}, {a[0]})"),
    aten._to_copy.default: (("self",), _to_copy),
    aten.clone.default: (("self",), lambda a, kw: a[0]),
}


def schema_args(node: Node) -> dict[str, Any]:
    """Bind a node's args and kwargs to its schema's argument names."""
    schema = node.target._schema
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def lowerable(node: Node) -> bool:
    if node.op != "call_function" or node.target not in TABLE:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not (val.is_floating_point() or val.dtype == torch.bool):
        return False
    if node.target == aten._to_copy.default:
        kw = schema_args(node)
        if kw.get("dtype") not in (None, torch.float32, torch.bfloat16, torch.float16) or \
                kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
            return False
    if node.target == aten.clone.default and schema_args(node).get("memory_format") not in (
            None, torch.preserve_format, torch.contiguous_format):
        return False
    return True


def lower(node: Node, expr_of: Callable[[Node], str]) -> str:
    """The expression of a lowerable node; tensor arguments through `expr_of`, scalars inlined."""
    names, build = TABLE[node.target]
    bound = schema_args(node)
    exprs = []
    for name in names:
        v = bound.get(name)
        exprs.append(expr_of(v) if isinstance(v, Node) else literal(v))
    kw = {k: v for k, v in bound.items() if k not in names}
    if node.target == aten.pow.Tensor_Scalar:
        kw["_exponent"] = bound["exponent"]
    return build(exprs, kw)
