"""The output judge: is the candidate's output the reference's, within the precision's bounds?

The correctness stage and the timing stages' re-check of the timed output both ask it, so both accept the same
outputs. Structure first (number of tensors, then each output's shape, dtype and device), then each output's values by
`tolerance.compare`. A bf16/fp16 or tf32 reference carries rounding error of its own, large where few terms are summed
(early rows of causal attention) or where layers compound it (a tf32 MLP): even the exact answer can fall outside a
bound judged against it. So when an output's values miss and the reference may be rounded, the reference is re-run in
strict fp32 (once per judgement) and that output's bounds widen by the reference's error against the re-run. An fp32
reference is re-run in float64 the same way: where an output is the cancellation of larger intermediates (the mean of
a normalised tensor) its own rounding is all there is, and it sets an absolute floor (`execution.reference_rounding`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .. import tolerance as tol_mod
from .execution import Rounding, tensors


@dataclasses.dataclass
class Judgement:
    failure: str = ""  # why the outputs are wrong, in words; empty when they are right
    precision: str = "fp32"  # precision class the last judged output was held to
    tolerance: tol_mod.Tolerance | None = None  # its bounds (None when no output's values were judged)
    outputs: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # tolerance.compare's facts per output
    widened: bool = False  # some output passed only once its bounds widened by the reference's rounding

    @property
    def ok(self) -> bool:
        return not self.failure


def judge_outputs(cand_out: Any, ref_out: Any, precision: str, dtypes: list[Any],
                  tol_overrides: dict[str, Any] | None = None,
                  rounding: Callable[[], Rounding | None] | None = None) -> Judgement:
    """Judge the candidate's outputs against the reference's. `dtypes`: the floating dtypes of the inputs (and of the
    reference's parameters and buffers, where they count) that pick the precision class with each output's own dtype;
    `rounding`: computes the reference's own error (`execution.reference_rounding`), called at most once, and only
    when an output's values miss."""
    cands, refs = tensors(cand_out), tensors(ref_out)
    if len(cands) != len(refs):
        return Judgement(f"wrong shape: the candidate returned {len(cands)} tensor(s), the reference {len(refs)}")
    j = Judgement()
    slack: list[Rounding | None] = []  # the reference's rounding, once asked for
    for k, (c, r) in enumerate(zip(cands, refs)):
        wrong = _structure(k, c, r)
        if wrong:
            j.failure = wrong
            return j
        j.precision, j.tolerance = tol_mod.resolve(dtypes + [r.dtype], precision, tol_overrides)
        ok, why, facts = tol_mod.compare(c, r, j.tolerance)
        if not ok and why.startswith("output mismatch") and rounding is not None and r.is_floating_point():
            if not slack:
                slack.append(rounding())
            if slack[0] is not None:
                ok, why, facts = tol_mod.compare(c, r, j.tolerance, slack[0][0][k], slack[0][1][k])
                j.widened = j.widened or ok
        j.outputs.append(facts)
        if not ok:
            j.failure = why if len(refs) == 1 else f"{why} (output {k})"
            return j
    return j


def _structure(k: int, c: Any, r: Any) -> str:
    """Why output `k` cannot be compared value by value (empty when it can)."""
    if tuple(c.shape) != tuple(r.shape):
        return f"wrong shape: output {k} is {tuple(c.shape)}, expected {tuple(r.shape)}"
    if c.dtype != r.dtype:
        return f"wrong dtype: output {k} is {c.dtype}, expected {r.dtype}"
    if c.device != r.device:
        return f"wrong device: output {k} is on {c.device}, expected {r.device}"
    return ""
