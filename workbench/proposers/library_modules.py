"""Submodules the offline proposer keeps as one call to the vendor library instead of tracing through them.

`nn.LSTM`, `nn.GRU` and `nn.RNN` run as one fused cuDNN kernel per layer in eager. Traced on meta tensors they
decompose into one small GEMM and one pointwise chain per layer, direction and step; the generated kernels of that
graph ran 13-20x slower than eager on the H200 and the H100 (results/kernelbench/h200_sample_session29,
h100_partial_session31: 36_LSTMHn 0.049x, 37_LSTMCn 0.061x, 39_GRU 0.073x), because a recurrence is a chain of
launches whatever each launch does. So during capture each such submodule's call becomes one graph node,
`workbench::module_call(path, call, tensors)`, and the candidate calls the submodule itself (ModelNew's copied
`__init__` creates it with the same weights); what surrounds it (the head's Linear, the slicing) still gets kernels.
`capture(problem, library_modules=())` keeps the step-by-step decomposition (the hoisted input projections of
`hoist.py`) for study.

`call` is JSON: the call's positional and keyword arguments with each tensor replaced by {"tensor": i}, i indexing
`tensors`; the op returns the flattened outputs (pytree leaves), which the candidate flattens the same way.
"""
from __future__ import annotations

import contextlib
import json
import keyword
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

LIBRARY_MODULES: tuple[type[nn.Module], ...] = (nn.LSTM, nn.GRU, nn.RNN)

# Submodules by path, for the capture in progress: the op's implementations look their module up here.
_ACTIVE: dict[str, nn.Module] = {}


def _encode(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, (tuple, list)):
        items = [_encode(v, tensors) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"an argument of type {type(value).__name__}")  # PackedSequence and the like: traced instead


def _decode(value: Any, tensors: list[Any]) -> Any:
    if isinstance(value, dict):
        return tensors[value["tensor"]] if "tensor" in value else tuple(_decode(v, tensors) for v in value["tuple"])
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    return value


def _source(value: Any, names: list[str]) -> str:
    """Python source of a decoded argument, tensors by their graph names."""
    if isinstance(value, dict):
        if "tensor" in value:
            return names[value["tensor"]]
        items = [_source(v, names) for v in value["tuple"]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_source(v, names) for v in value) + "]"
    return repr(value)


def call_source(module_expr: str, call: str, names: list[str]) -> str:
    """`self.lstm(x, (h0, c0))`: the submodule's call as the candidate writes it."""
    spec = json.loads(call)
    parts = [_source(a, names) for a in spec["args"]] + [f"{k}={_source(v, names)}" for k, v in spec["kwargs"].items()]
    return f"{module_expr}({', '.join(parts)})"


def module_expression(path: str) -> str:
    """`self.encoder.lstm`, or `self.get_submodule('layers.0')` where a part is not an identifier."""
    parts = path.split(".")
    if all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return "self." + path
    return f"self.get_submodule({path!r})"


@torch.library.custom_op("workbench::module_call", mutates_args=())
def module_call(path: str, call: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    spec = json.loads(call)
    module = _module(path)
    out = module(*_decode(spec["args"], tensors), **{k: _decode(v, tensors) for k, v in spec["kwargs"].items()})
    return [t.clone() for t in tree_leaves(out)]  # a custom op's outputs may not alias its inputs


@module_call.register_fake
def _module_call_shapes(path: str, call: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    spec = json.loads(call)
    x = _decode(spec["args"][0], tensors)
    return [x.new_empty(s) for s in recurrent_shapes(_module(path), tuple(x.shape))]


def _module(path: str) -> nn.Module:
    if path not in _ACTIVE:
        raise RuntimeError(f"workbench::module_call for submodule '{path}' outside the capture that recorded it: "
                           f"a captured graph is rendered, not run")
    return _ACTIVE[path]


def recurrent_shapes(m: nn.Module, x_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The shapes of output, h_n (and c_n for an LSTM), in that order, for an input of `x_shape` (batched or not)."""
    d = 2 if m.bidirectional else 1
    h_out = getattr(m, "proj_size", 0) or m.hidden_size
    layers = d * m.num_layers
    if len(x_shape) == 2:  # unbatched: (L, H_in)
        out, h, c = (x_shape[0], d * h_out), (layers, h_out), (layers, m.hidden_size)
    else:
        steps, batch = (x_shape[1], x_shape[0]) if m.batch_first else (x_shape[0], x_shape[1])
        out = (batch, steps, d * h_out) if m.batch_first else (steps, batch, d * h_out)
        h, c = (layers, batch, h_out), (layers, batch, m.hidden_size)
    return [out, h, c] if isinstance(m, nn.LSTM) else [out, h]


def recurrent_flops(m: nn.Module, x_shape: tuple[int, ...]) -> int:
    """Multiply-adds of the gate products, 2 FLOPs each: per layer, direction and step, (gates x hidden) x
    (input + hidden) per batch row, and the projection of an LSTM with proj_size."""
    gates = {nn.LSTM: 4, nn.GRU: 3}.get(type(m), 1)
    d = 2 if m.bidirectional else 1
    proj = getattr(m, "proj_size", 0)
    h_out = proj or m.hidden_size
    if len(x_shape) == 2:
        steps, batch = x_shape[0], 1
    else:
        steps, batch = (x_shape[1], x_shape[0]) if m.batch_first else (x_shape[0], x_shape[1])
    total = 0
    for layer in range(m.num_layers):
        width = m.input_size if layer == 0 else d * h_out
        per_step = gates * m.hidden_size * (width + h_out) + (m.hidden_size * proj if proj else 0)
        total += 2 * d * steps * batch * per_step
    return total


def node_flops(path: str, call: str, tensors: list[Any]) -> int:
    """FLOPs of a module_call node (torch's counter sees none: the op's meta kernel only makes shapes)."""
    m = _module(path)
    x = _decode(json.loads(call)["args"][0], tensors)
    return recurrent_flops(m, tuple(x.shape)) if isinstance(m, LIBRARY_MODULES) else 0


def _opaque_forward(path: str, module: nn.Module, original: Callable) -> Callable:
    def forward(*args, **kwargs):
        tensors: list[torch.Tensor] = []
        try:
            spec = {"args": _encode(list(args), tensors), "kwargs": {k: _encode(v, tensors) for k, v in kwargs.items()}}
        except TypeError:
            return original(*args, **kwargs)
        if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() not in (2, 3):
            return original(*args, **kwargs)
        out = module_call(path, json.dumps(spec, sort_keys=True), tensors)
        return (out[0], (out[1], out[2])) if isinstance(module, nn.LSTM) else (out[0], out[1])
    return forward


@contextlib.contextmanager
def kept_as_library_calls(model: nn.Module, kinds: tuple[type[nn.Module], ...]) -> Iterator[list[str]]:
    """While active, every submodule of `model` of one of `kinds` records one `module_call` node when traced (the
    paths kept are yielded); on exit the submodules are as they were."""
    patched = [(path, m) for path, m in model.named_modules() if kinds and isinstance(m, kinds) and path]
    previous = dict(_ACTIVE)
    try:
        for path, m in patched:
            _ACTIVE[path] = m
            m.forward = _opaque_forward(path, m, m.forward)
        yield [p for p, _ in patched]
    finally:
        for _, m in patched:
            m.__dict__.pop("forward", None)
        _ACTIVE.clear()
        _ACTIVE.update(previous)


def is_module_call(node: Any) -> bool:
    return getattr(node, "target", None) is torch.ops.workbench.module_call.default
