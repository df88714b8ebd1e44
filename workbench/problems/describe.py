"""`describe(problem)`: what `workbench problems show` prints, as one JSON-able dict."""
from __future__ import annotations

from typing import Any

from ..core import ceilings
from .analysis import count, roofline_floor
from .problem import Problem


def describe(problem: Problem) -> dict[str, Any]:
    """Name, key, path, precision, size constants, shapes, FLOPs and bytes, and the roofline floor on every GPU with
    measured ceilings (or why there is none for it)."""
    counts = count(problem)
    floors: dict[str, dict[str, Any]] = {}
    for gpu, c in ceilings.available().items():
        try:
            floors[gpu] = roofline_floor(counts, c).to_dict()
        except KeyError as e:
            floors[gpu] = {"error": str(e)}
    return {"problem": problem.name, "key": problem.key, "path": problem.path,
            "precision": problem.effective_precision, "constants": problem.constants(), **counts.to_dict(),
            "floors": floors}


__all__ = ["describe"]
