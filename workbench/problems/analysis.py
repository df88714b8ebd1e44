"""FLOPs, bytes and the roofline floor of a problem, counted on meta tensors (no data, no device, any size).

- FLOPs: torch's flop counter (matmul, convolution, attention); elementwise arithmetic is not counted, which only
  matters for problems that are memory-bound anyway.
- min_bytes: the fewest bytes any implementation must move: every input, parameter and buffer read once, every output
  written once.
- eager_bytes: bytes read and written by every aten op of the eager reference (what an unfused implementation moves).
- floor: max(FLOPs / compute ceiling, min_bytes / bandwidth ceiling) on a device whose ceilings were measured
  (see `workbench.core.ceilings`); none when the device has no measured ceilings.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from .loader import ProblemError
from .problem import Problem


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _TrafficCounter(TorchDispatchMode):
    """Sums bytes of tensor inputs and outputs of every aten op (views excluded: they move nothing)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func in (torch.ops.aten.detach.default,):
            return out
        ins, _ = tree_flatten((args, kwargs))
        outs, _ = tree_flatten(out)
        self.bytes += sum(_nbytes(t) for t in ins + outs if isinstance(t, torch.Tensor))
        self.ops += 1
        return out


@dataclasses.dataclass
class ProblemCounts:
    flops: int
    min_bytes: int
    eager_bytes: int
    compute_dtype: str  # which FLOP ceiling applies: fp32, tf32, bf16, fp16
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    parameters: int

    @property
    def intensity(self) -> float:
        return self.flops / self.min_bytes if self.min_bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["intensity"] = self.intensity
        return d


def _describe(x: Any) -> dict[str, Any]:
    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    return {"value": repr(x)}


def _meta_inputs(problem: Problem) -> tuple[list[Any], list[Any]]:
    with torch.device("meta"):
        init = problem.init_inputs()
        inputs = problem.inputs()
    inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
    return init, inputs


def count(problem: Problem) -> ProblemCounts:
    """Count FLOPs and bytes of the reference on meta tensors."""
    init, inputs = _meta_inputs(problem)
    with torch.device("meta"):
        model = problem.make_reference(init)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc, _TrafficCounter() as tc:
            out = model(*inputs)
    except Exception as e:
        raise ProblemError(f"{problem.path}: the reference could not run on meta tensors "
                           f"({type(e).__name__}: {e}); FLOPs and bytes are unknown") from e
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    state = list(model.parameters()) + list(model.buffers())
    in_tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    min_bytes = sum(_nbytes(t) for t in in_tensors + state + outs)
    float_dtypes = [t.dtype for t in in_tensors + state if t.is_floating_point()]
    dominant = max(set(float_dtypes), key=float_dtypes.count) if float_dtypes else torch.float32
    compute = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dominant, "fp32")
    # a reference with tf32 anywhere (cuDNN's convolutions) gets the tf32 rate for all its FLOPs: a looser floor, but
    # still a lower bound
    if compute == "fp32" and problem.effective_precision in ("tf32", "cudnn_tf32"):
        compute = "tf32"
    return ProblemCounts(
        flops=int(fc.get_total_flops()), min_bytes=int(min_bytes), eager_bytes=int(tc.bytes),
        compute_dtype=compute, inputs=[_describe(x) for x in inputs], outputs=[_describe(t) for t in outs],
        parameters=sum(p.numel() for p in model.parameters()))


@dataclasses.dataclass
class Floor:
    device: str
    compute_ms: float
    memory_ms: float

    @property
    def ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_ms >= self.memory_ms else "memory"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "floor_ms": self.ms, "compute_ms": self.compute_ms,
                "memory_ms": self.memory_ms, "bound": self.bound}


def roofline_floor(counts: ProblemCounts, ceilings: dict[str, Any]) -> Floor:
    """The floor on a device from its measured ceilings ({'copy_gbps':..., 'tflops': {'bf16':...}})."""
    tflops = ceilings["tflops"].get(counts.compute_dtype)
    if tflops is None:
        raise KeyError(f"no measured {counts.compute_dtype} rate for {ceilings.get('device')}")
    compute_ms = counts.flops / (tflops * 1e12) * 1e3
    memory_ms = counts.min_bytes / (ceilings["copy_gbps"] * 1e9) * 1e3
    return Floor(ceilings.get("device", "?"), compute_ms, memory_ms)
