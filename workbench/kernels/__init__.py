"""Parametric Triton kernel families: readable templates with holes, each with a configuration space.

`FAMILIES` names every family the offline proposer lowers groups to (the name a group carries, e.g. "row" for the
row-reduction family); `base.Family` is the contract each one keeps, `identity` what makes two rendered candidates
the same candidate.
"""
from __future__ import annotations

from . import attention, conv, conv_transpose, elementwise, gemm, memory, norm, pool, reduce, reduce_nd
from .base import Family

# group family name -> the family (a module with space/check/render/default is itself a family)
FAMILIES: dict[str, Family] = {
    "elementwise": elementwise.ELEMENTWISE, "gemm": gemm, "attention": attention, "row": reduce.ROW_REDUCE,
    "scan": reduce.SCAN, "col": reduce.COL_REDUCE, "permute": memory.PERMUTE, "gather": memory.GATHER,
    "conv": conv,
    "conv_transpose": conv_transpose,
    "norm": norm.GROUPED_NORM,
    "pool": pool,
    "reduce_nd": reduce_nd.REDUCE_ND, "scan_nd": reduce_nd.SCAN_ND, "softmax_nd": reduce_nd.SOFTMAX_ND,
}


def family(name: str) -> Family:
    return FAMILIES[name]


def template_version(name: str) -> int:
    """The version of a family's templates (see `base.Family.template_version`)."""
    return FAMILIES[name].template_version
