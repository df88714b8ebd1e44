"""The output judge: is the candidate's output the reference's, within the precision's bounds?

The correctness stage and the timing stages' re-check of the timed output both ask it, so both accept the same
outputs. Structure first, over the whole output (`structure`: container kinds, dict keys, lengths, each tensor's
shape, dtype and device, exact leaves such as None, bool, int, str), then the values of tensors (`tolerance.compare`)
and Python floats (`tolerance.compare_float`), in the reference's order; a reason names where it differs
(`out[1]['logits']`). A bf16/fp16 or tf32 reference carries rounding error of its own, large where few terms are
summed (early rows of causal attention) or where layers compound it (a tf32 MLP): even the exact answer can fall
outside a bound judged against it. So when an output's values miss and the reference may be rounded, the reference
is re-run in strict fp32 (once per judgement) and that output's bounds widen by the reference's error against the
re-run. An fp32 reference is re-run in float64 the same way: where an output is the cancellation of larger
intermediates (the mean of a normalised tensor) its own rounding is all there is, and it sets an absolute floor
(`execution.reference_rounding`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import torch

from .. import tolerance as tol_mod
from .execution import Rounding

# A pair the structure leaves to be compared by value: (where, the candidate's, the reference's); tensors and floats.
Leaf = tuple[str, Any, Any]


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
    wrong, leaves = structure(cand_out, ref_out)
    if wrong:
        return Judgement(wrong)
    j = Judgement()
    slack: list[Rounding | None] = []  # the reference's rounding, once asked for
    k = -1  # index among the reference's tensors: the order `reference_rounding` answers in
    for path, c, r in leaves:
        if isinstance(r, float):  # Python floats: the bounds of the inputs' precision class
            j.precision, j.tolerance = tol_mod.resolve(dtypes, precision, tol_overrides)
            ok, why, facts = tol_mod.compare_float(c, r, j.tolerance)
        else:
            k += 1
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
            j.failure = why if path == "out" else f"{why} (at {path})"
            return j
    return j


def structure(cand: Any, ref: Any, path: str = "out") -> tuple[str, list[Leaf]]:
    """Where and how the candidate's output differs from the reference's in anything but the values of tensors and
    floats (empty when it does not), and the pairs left to compare by value, in the reference's flatten order."""
    leaves: list[Leaf] = []
    return _walk(cand, ref, path, leaves), leaves


def _walk(c: Any, r: Any, path: str, leaves: list[Leaf]) -> str:
    # Dicts: the same keys, in any order (a caller reads by key); lists and tuples interchangeable (a caller indexes
    # or unpacks either the same way) unless the reference's fields have names (a namedtuple, torch.return_types),
    # which a caller may read by name.
    if isinstance(r, torch.Tensor):
        if not isinstance(c, torch.Tensor):
            return _wrong_type(path, c, r)
        wrong = _tensor_mismatch(path, c, r)
        if not wrong:
            leaves.append((path, c, r))
        return wrong
    if isinstance(r, Mapping):
        if not isinstance(c, Mapping):
            return _wrong_type(path, c, r)
        missing = sorted(repr(k) for k in r if k not in c)
        extra = sorted(repr(k) for k in c if k not in r)
        if missing or extra:
            parts = ([f"lacks key(s) {', '.join(missing)}"] if missing else []) + (
                [f"has unexpected key(s) {', '.join(extra)}"] if extra else [])
            return f"wrong keys: {path} {' and '.join(parts)}"
        for key, value in r.items():
            wrong = _walk(c[key], value, f"{path}[{key!r}]", leaves)
            if wrong:
                return wrong
        return ""
    if isinstance(r, (list, tuple)):
        if not isinstance(c, (list, tuple)):
            return _wrong_type(path, c, r)
        names = getattr(type(r), "__match_args__", None)
        if names and getattr(type(c), "__match_args__", None) != names:
            return f"wrong type: {path} is a {type(c).__name__}, expected a {type(r).__name__} with fields {names}"
        if len(c) != len(r):
            return f"wrong length: {path} has {len(c)} item(s), expected {len(r)}"
        for i, (a, b) in enumerate(zip(c, r)):
            wrong = _walk(a, b, f"{path}[{i}]", leaves)
            if wrong:
                return wrong
        return ""
    if isinstance(r, float):
        if not isinstance(c, float):  # an int or a str for a float is another output
            return _wrong_type(path, c, r)
        leaves.append((path, c, r))
        return ""
    # None, bool, int, str and other objects: the same type and an equal value
    if type(c) is not type(r):
        return _wrong_type(path, c, r)
    return "" if _equal(c, r) else f"wrong value: {path} is {_short(c)}, expected {_short(r)}"


def _tensor_mismatch(path: str, c: torch.Tensor, r: torch.Tensor) -> str:
    """Why tensor `c` cannot be compared value by value with `r` (empty when it can)."""
    if tuple(c.shape) != tuple(r.shape):
        return f"wrong shape: {path} is {tuple(c.shape)}, expected {tuple(r.shape)}"
    if c.dtype != r.dtype:
        return f"wrong dtype: {path} is {c.dtype}, expected {r.dtype}"
    if c.device != r.device:
        return f"wrong device: {path} is on {c.device}, expected {r.device}"
    return ""


def _wrong_type(path: str, c: Any, r: Any) -> str:
    return f"wrong type: {path} is a {type(c).__name__}, expected a {type(r).__name__}"


def _equal(c: Any, r: Any) -> bool:
    try:
        return bool(c == r)
    except Exception:  # an object whose == is not a truth value cannot be shown equal
        return False


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
