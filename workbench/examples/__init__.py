"""Example candidates shipped with the package: what the README's main job runs until the search exists."""
from __future__ import annotations

import dataclasses
from pathlib import Path

HERE = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class Example:
    problem: str
    path: Path
    cpu_overrides: tuple[str, ...]  # small shapes for the Triton interpreter on a machine without a GPU


EXAMPLES = [
    Example("scale_shift_relu", HERE / "scale_shift_relu_triton.py", ("batch_size=16", "dim=1024")),
    Example("softmax_rows", HERE / "softmax_rows_triton.py", ("batch_size=8", "dim=1000")),
    Example("matmul_bf16", HERE / "matmul_bf16_triton.py", ("M=64", "N=48", "K=80")),
]
