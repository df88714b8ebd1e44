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


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _pow(a, kw):
    e = kw["exponent"]
    if isinstance(e, (int, float)) and float(e).is_integer() and -8 <= e <= 8:  # exact for negative bases too
        if e == 0:
            return "1.0"
        prod = "(" + " * ".join([f"({a[0]})"] * abs(int(e))) + ")"
        return prod if e > 0 else f"(1.0 / {prod})"
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


def _clamp_tensor(a, kw):
    """clamp.Tensor: bounds are expressions (None where absent), min applied first as torch does."""
    x = a[0]
    if a[1] is not None:
        x = f"tl.maximum({x}, {a[1]})"
    if a[2] is not None:
        x = f"tl.minimum({x}, {a[2]})"
    return x


def _elu(a, kw):
    x, alpha = a[0], literal(kw.get("alpha", 1.0))
    scale, input_scale = literal(kw.get("scale", 1.0)), literal(kw.get("input_scale", 1.0))
    return f"({scale} * tl.where(({x}) > 0, {x}, {alpha} * (tl.exp(({x}) * {input_scale}) - 1.0)))"


def _pow_scalar_base(a, kw):
    """base ** tensor for a positive literal base: exp2(exponent * log2(base))."""
    return f"tl.exp2(({a[1]}) * {literal(math.log2(kw['_base']))})"


def _cmp(op):
    return lambda a, kw: f"(({a[0]}) {op} ({a[1]}))"


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
    aten.elu.default: (("self",), _elu),  # selu is elu with scale and alpha
    aten.celu.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > 0, {a[0]}, {literal(kw.get('alpha', 1.0))} * "
                                                 f"(tl.exp(({a[0]}) / {literal(kw.get('alpha', 1.0))}) - 1.0))"),
    aten.selu.default: (("self",), lambda a, kw: _elu(a, {"alpha": SELU_ALPHA, "scale": SELU_SCALE})),
    aten.threshold.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > {literal(kw['threshold'])}, {a[0]}, "
                                                      f"{literal(kw['value'])})"),
    aten.hardshrink.default: (("self",), lambda a, kw: f"tl.where(tl.abs({a[0]}) > {literal(kw.get('lambd', 0.5))}, "
                                                       f"{a[0]}, 0.0)"),
    aten.softshrink.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > {literal(kw.get('lambd', 0.5))}, "
                                                       f"({a[0]}) - {literal(kw.get('lambd', 0.5))}, "
                                                       f"tl.where(({a[0]}) < -{literal(kw.get('lambd', 0.5))}, "
                                                       f"({a[0]}) + {literal(kw.get('lambd', 0.5))}, 0.0))"),
    aten.log_sigmoid.default: (("self",), lambda a, kw: f"(tl.minimum({a[0]}, 0.0) - "
                                                        f"tl.log(1.0 + tl.exp(-tl.abs({a[0]}))))"),
    aten.erf.default: (("self",), lambda a, kw: f"tl.math.erf({a[0]})"),
    aten.sign.default: (("self",), lambda a, kw: f"tl.where(({a[0]}) > 0, 1.0, tl.where(({a[0]}) < 0, -1.0, "
                                                 f"({a[0]}) * 0.0))"),
    aten.exp2.default: (("self",), lambda a, kw: f"tl.exp2({a[0]})"),
    aten.log2.default: (("self",), lambda a, kw: f"tl.log2({a[0]})"),
    aten.floor.default: (("self",), lambda a, kw: f"tl.floor({a[0]})"),
    aten.ceil.default: (("self",), lambda a, kw: f"tl.ceil({a[0]})"),
    aten.pow.Scalar: (("self", "exponent"), _pow_scalar_base),
    aten.clamp.Tensor: (("self", "min", "max"), _clamp_tensor),
    aten.clamp_min.default: (("self",), lambda a, kw: _clamp(a, {"min": kw["min"]})),
    aten.clamp_max.default: (("self",), lambda a, kw: _clamp(a, {"max": kw["max"]})),
    aten.clamp_min.Tensor: (("self", "min"), lambda a, kw: f"tl.maximum({a[0]}, {a[1]})"),
    aten.clamp_max.Tensor: (("self", "max"), lambda a, kw: f"tl.minimum({a[0]}, {a[1]})"),
    aten.gt.Scalar: (("self", "other"), _cmp(">")),
    aten.gt.Tensor: (("self", "other"), _cmp(">")),
    aten.lt.Scalar: (("self", "other"), _cmp("<")),
    aten.lt.Tensor: (("self", "other"), _cmp("<")),
    aten.ge.Scalar: (("self", "other"), _cmp(">=")),
    aten.ge.Tensor: (("self", "other"), _cmp(">=")),
    aten.le.Scalar: (("self", "other"), _cmp("<=")),
    aten.le.Tensor: (("self", "other"), _cmp("<=")),
    aten.eq.Scalar: (("self", "other"), _cmp("==")),
    aten.eq.Tensor: (("self", "other"), _cmp("==")),
    aten.ne.Scalar: (("self", "other"), _cmp("!=")),
    aten.ne.Tensor: (("self", "other"), _cmp("!=")),
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
    if node.target == aten.pow.Scalar:
        base = schema_args(node).get("self")
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 0:
            return False  # a negative or zero base has no exp2/log2 form
    return True


def lower(node: Node, expr_of: Callable[[Node], str]) -> str:
    """The expression of a lowerable node; tensor arguments through `expr_of`, scalars inlined."""
    names, build = TABLE[node.target]
    bound = schema_args(node)
    exprs = []
    for name in names:
        v = bound.get(name)
        exprs.append(expr_of(v) if isinstance(v, Node) else None if v is None else literal(v))
    kw = {k: v for k, v in bound.items() if k not in names}
    if node.target == aten.pow.Tensor_Scalar:
        kw["_exponent"] = bound["exponent"]
    if node.target == aten.pow.Scalar:
        kw["_base"] = bound["self"]
    return build(exprs, kw)
