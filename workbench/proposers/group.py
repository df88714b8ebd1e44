"""`Group`: a set of captured-graph nodes one kernel family computes, and the small helpers every recogniser uses."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node

DTYPE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclasses.dataclass
class Group:
    family: str  # a key of workbench.kernels.FAMILIES
    out: Node  # the node whose value the group produces
    nodes: list[Node]  # every node computed inside the group's kernel(s)
    args: list[str]  # launcher arguments: python expressions over value names
    spec: Any
    fused_epilogue: bool = False
    post: str = ""  # appended to the launcher call (e.g. ".unsqueeze(-1)" for a keepdim reduction)
    gid: str = ""  # "g<i>": `run` numbers the groups in graph order of their outputs


def val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, Node) else None


