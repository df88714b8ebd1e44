"""How a candidate asks to be launched: the module-level constant `LAUNCH_MODE` ("eager", the default, or
"cuda_graph"). Torch-free, so the static stage (which never imports a candidate) and the worker's graph launch
(`child/graph_launch.py`) read the same names."""
from __future__ import annotations

from typing import Any

LAUNCH_ATTR = "LAUNCH_MODE"
EAGER, CUDA_GRAPH = "eager", "cuda_graph"
LAUNCH_MODES = (EAGER, CUDA_GRAPH)


def declared_mode(module: Any) -> str:
    """The launch mode an imported candidate module declares (eager when it declares none)."""
    mode = getattr(module, LAUNCH_ATTR, EAGER)
    if mode not in LAUNCH_MODES:
        raise ValueError(f"{LAUNCH_ATTR} = {mode!r}: expected one of {LAUNCH_MODES}")
    return mode
