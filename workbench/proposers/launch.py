"""Which launch a candidate starts with: its forward as written (eager) or replayed by the harness as one CUDA graph
(`LAUNCH_MODE = "cuda_graph"`, see workbench/harness/child/graph_launch.py).

A graph pays where the host is the bottleneck: a forward of many small kernels spends more time launching them from
Python than the GPU spends running them (on the H100 of session 35, ConvViT's ~90 kernels ran at 0.37x eager and an
RNN step at 180 us against eager's 56 us). It costs a copy of the inputs into the graph's buffers and of the outputs
out of them on every call. The estimate below is a roofline of both sides, coarse on purpose: the search's `launch:`
move tries the other mode, so the default only has to be right where the answer is clear.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ..harness.launch_mode import CUDA_GRAPH, EAGER
from .graph import Captured
from .group import Group, val
from .library_modules import is_module_call

HOST_S_PER_LAUNCH = 8e-6  # a torch op or Triton launcher called from a rendered forward (Python, arguments, launch)
LIBRARY_LAUNCHES = 4  # kernels a kept library module (a cuDNN RNN layer) launches, at least
GPU_BYTES_PER_S = 3.0e12  # H100/H200 HBM, what streaming kernels reach
GPU_FLOPS_PER_S = 2.0e14  # dense fp32-in/TF32-or-3xTF32 tensor-core work, what the families reach
COPY_SHARE = 0.25  # the per-call copies may cost at most this share of the host time a graph saves
MIN_LAUNCHES = 6  # below this a replay's own overhead (~10 us) eats the saving
RANDOM_OPS = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "poisson")


@dataclasses.dataclass(frozen=True)
class LaunchEstimate:
    launches: int  # kernels one call of the forward launches (generated groups + torch and library calls)
    host_s: float
    gpu_s: float
    copy_s: float  # inputs into the graph's buffers, outputs out of them
    blocker: str | None  # why a graph is never the default here

    @property
    def mode(self) -> str:
        launch_bound = self.launches >= MIN_LAUNCHES and self.host_s >= self.gpu_s
        cheap_copies = self.copy_s <= COPY_SHARE * (self.host_s - 10e-6)
        return CUDA_GRAPH if self.blocker is None and launch_bound and cheap_copies else EAGER

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mode": self.mode}


def _nbytes(values: Any) -> int:
    return sum(x.numel() * x.element_size() for x in tree_flatten(values)[0] if isinstance(x, torch.Tensor))


def estimate(captured: Captured, groups: list[Group]) -> LaunchEstimate:
    owned = {n for g in groups for n in g.nodes}
    launches, blocker = len({g.gid for g in groups}), None
    for node in captured.gm.graph.nodes:
        if node.op != "call_function" or node in owned or node.target is operator.getitem:
            continue
        name = str(node.target)
        if any(r in name for r in RANDOM_OPS):
            blocker = f"random op {name}"
        if is_module_call(node):
            launches += LIBRARY_LAUNCHES
        elif captured.node_bytes.get(node.name, 0) > 0:  # views and metadata ops launch nothing
            launches += 1
    if captured.state_writes:
        blocker = "the forward reassigns tensor attributes (" + ", ".join(captured.state_writes[:3]) + ")"
    n_state = len(captured.state_names)
    in_bytes = sum(_nbytes(val(ph)) for ph in captured.placeholders[n_state:])
    out_node = next(n for n in captured.gm.graph.nodes if n.op == "output")
    out_bytes = _nbytes(val(a) for a in tree_flatten(out_node.args[0])[0])
    gpu_s = max(captured.total_bytes / GPU_BYTES_PER_S, captured.total_flops / GPU_FLOPS_PER_S)
    copy_s = 2 * (in_bytes + out_bytes) / GPU_BYTES_PER_S  # each copy reads and writes
    return LaunchEstimate(launches, launches * HOST_S_PER_LAUNCH, gpu_s, copy_s, blocker)
