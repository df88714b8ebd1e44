"""The contract between the offline proposer and the parametric Triton kernel families.

A *family* (one module in workbench/kernels/) is a readable Triton kernel with holes for what varies between problems
(an epilogue expression, an operation, flags) and a configuration space (block sizes, warps, stages, ...). Given a
*spec* (what to compute, from the proposer's graph capture) and a *config*, it renders source text:

- `kernel_src`: one or more `@triton.jit` functions, names prefixed with the given `name`;
- `launcher_src`: a plain Python function `def {name}(...)` that allocates outputs on the inputs' device, computes the
  grid and launches; the proposer's rendered `ModelNew.forward` calls it.

Rendered text must use only `torch`, `triton` and `tl` (imported by the module header) and must run both on a GPU and
under `TRITON_INTERPRET=1` on CPU tensors. `check(spec, config)` rejects configurations that cannot work before any
compile (shared memory over 227 KB, registers over budget, a block that does not cover a row when the kernel needs
it), with the reason in words; the compile stage's resource report is the second filter.

Epilogues and prologues are Triton expressions over named fp32 values: the family loads each named input broadcast
to its tile (by `EpilogueInput.kind`), evaluates `expr` and stores the result in the output dtype.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterable, Protocol

from ..core.target import H200

# The limit `check` holds shared memory to: what one block may opt into (the compile stage verifies the real numbers).
SHARED_LIMIT = H200.smem_per_block

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8, "int32": 4}


@dataclasses.dataclass(frozen=True)
class EpilogueInput:
    name: str
    kind: str  # "row": one value per output row (shape [M]); "col": per column ([N]); "full": [M, N]; "scalar"


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """`expr` maps the fp32 value `acc` (and inputs by name) to the output value, e.g. "tl.maximum(acc + bias, 0.0)"."""
    expr: str = "acc"
    inputs: tuple[EpilogueInput, ...] = ()

    @property
    def is_identity(self) -> bool:
        return self.expr.strip() == "acc" and not self.inputs


@dataclasses.dataclass(frozen=True)
class Rendered:
    kernel_src: str
    launcher_src: str


class Family(Protocol):
    name: str
    # Bumped only when a change alters what the family's kernels compute or how fast they run: a candidate rendered
    # at another version is another candidate, and measurements recorded at the old one no longer answer for it.
    # Cosmetic edits (comments, names, layout of the text) keep the version, so recorded measurements still apply.
    template_version: int

    def space(self, spec: Any) -> list[dict[str, Any]]:
        """Every configuration for this spec, in a fixed order (enumeration and seeded sampling rely on it)."""

    def check(self, spec: Any, config: dict[str, Any]) -> str | None:
        """Why this configuration cannot work, or None."""

    def render(self, spec: Any, config: dict[str, Any], name: str) -> Rendered:
        """Kernel and launcher source text for this spec and configuration."""

    def default(self, spec: Any) -> dict[str, Any]:
        """A sensible first configuration (valid for the spec)."""


def grid_space(**axes: Iterable[Any]) -> list[dict[str, Any]]:
    """The cartesian product of named axes, as a list of dicts in a fixed order."""
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*(list(axes[k]) for k in keys))]


def valid_space(family: Family, spec: Any) -> list[dict[str, Any]]:
    return [c for c in family.space(spec) if family.check(spec, c) is None]


def tl_dtype(torch_dtype_name: str) -> str:
    return {"float32": "tl.float32", "bfloat16": "tl.bfloat16", "float16": "tl.float16", "float64": "tl.float64",
            "int64": "tl.int64", "int32": "tl.int32"}[torch_dtype_name]
