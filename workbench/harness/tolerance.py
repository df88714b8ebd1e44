"""How close a candidate's output must be to the reference's, per dtype and the problem's precision.

Two checks, both must pass:
- the relative error norm ||out - ref|| / ||ref|| under `norm` (catches outputs that are wrong on average,
  including degenerate outputs of small magnitude that a loose `allclose(atol=1e-4)` accepts);
- an elementwise bound |out - ref| <= rtol * |ref| + atol_rms * rms(ref) everywhere (catches a wrong row or a wrong
  tile that a norm over a large tensor dilutes). atol is scaled by the reference's RMS so the check means the same
  thing for outputs of magnitude 1e-5 and 1e5.

Defaults (configurable): fp32 strict 1e-4 (fp32 arithmetic in another order lands near 1e-6); fp32 where the
problem accepts tf32, or its reference runs cuDNN's tf32 (PyTorch's default for convolutions), 2e-3 (tf32 lands near
3e-4); bf16/fp16 1e-2. NaN never passes unless the reference has NaN at
the same place; integer and bool outputs must match exactly. A Python float among the outputs is held to the same
bounds as a one-element tensor (`compare_float`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class Tolerance:
    norm: float
    rtol: float
    atol_rms: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


DEFAULTS: dict[str, Tolerance] = {
    "fp32": Tolerance(norm=1e-4, rtol=1e-3, atol_rms=1e-3),
    "tf32": Tolerance(norm=2e-3, rtol=1e-2, atol_rms=1e-2),
    "bf16": Tolerance(norm=1e-2, rtol=4e-2, atol_rms=4e-2),
    "fp16": Tolerance(norm=1e-2, rtol=2e-2, atol_rms=2e-2),
    "fp64": Tolerance(norm=1e-9, rtol=1e-7, atol_rms=1e-7),
}


def precision_class(dtypes: list[Any], precision: str) -> str:
    """The loosest class among the floating dtypes involved (inputs, parameters, output)."""
    names = {str(d).replace("torch.", "") for d in dtypes}
    if "bfloat16" in names:
        return "bf16"
    if "float16" in names:
        return "fp16"
    if names and names <= {"float64"}:
        return "fp64"
    # a reference that ran tf32 math anywhere (cuDNN's convolutions under PyTorch's defaults) is tf32-accurate at best
    return "tf32" if precision in ("tf32", "cudnn_tf32") else "fp32"


def resolve(dtypes: list[Any], precision: str, overrides: dict[str, Any] | None = None) -> tuple[str, Tolerance]:
    cls = precision_class(dtypes, precision)
    tol = DEFAULTS[cls]
    if overrides:
        tol = dataclasses.replace(tol, **{k: float(v) for k, v in overrides.items()
                                          if k in ("norm", "rtol", "atol_rms")})
    return cls, tol


def compare(out, ref, tol: Tolerance, slack=None, norm_slack: float = 0.0) -> tuple[bool, str, dict[str, Any]]:
    """Judge one output tensor against the reference tensor (same shape and dtype already checked). `slack` (same
    shape, >= 0) widens each element's bound and `norm_slack` the relative-norm bound: the reference's own error,
    when it is known (`execution.reference_rounding`: a bf16/fp16 or tf32 reference against its strict fp32 re-run)."""
    import torch  # worker side: the parent reads bounds from this module without loading torch

    facts: dict[str, Any] = {}
    if not (ref.is_floating_point() or ref.is_complex()):
        same = torch.equal(out, ref)
        facts["mismatched"] = int((out != ref).sum().item()) if not same else 0
        return same, "" if same else f"output mismatch: {facts['mismatched']} of {ref.numel()} elements differ " \
                                     "(integer output must match exactly)", facts
    # fp32 arithmetic (bf16/fp16 widened) is accurate enough for bounds of 1e-4 and up, and a quarter of float64's
    # memory traffic on outputs of gigabytes; float64 outputs stay float64.
    wide = torch.complex128 if ref.is_complex() else (torch.float64 if ref.dtype == torch.float64 else torch.float32)
    o, r = out, ref
    if not (bool(torch.isfinite(o).all()) and bool(torch.isfinite(r).all())):
        o_nan, r_nan = torch.isnan(o), torch.isnan(r)
        if bool((o_nan & ~r_nan).any()):
            n = int((o_nan & ~r_nan).sum().item())
            facts["nan"] = n
            return False, f"nan in output: {n} of {ref.numel()} elements are NaN where the reference is finite", facts
        if bool((r_nan & ~o_nan).any()):
            return False, "output mismatch: the reference is NaN where the output is not", facts
        finite = ~r_nan
        o, r = o[finite], r[finite]
        if bool(torch.isinf(o).ne(torch.isinf(r)).any()):
            return False, "output mismatch: infinities where the reference is finite (or the reverse)", facts
        inf = torch.isinf(r)
        if bool(inf.any()):
            if not torch.equal(o[inf], r[inf]):
                return False, "output mismatch: infinities of the wrong sign", facts
            o, r = o[~inf], r[~inf]
        slack = None  # (NaN/inf filtering changes the shape: no slack then)
    # In chunks: an output of gigabytes judged whole needs several temporaries of its size (a 7.5 GB GroupNorm
    # output ran an 80 GB card out of memory); per chunk, the same numbers in float64 accumulators.
    of, rf = o.reshape(-1), r.reshape(-1)
    sf = slack.reshape(-1) if slack is not None and tuple(slack.shape) == tuple(ref.shape) else None
    chunks = [(i, min(i + COMPARE_CHUNK, rf.numel())) for i in range(0, rf.numel(), COMPARE_CHUNK)]
    ref_sq = err_sq = 0.0
    for a, b in chunks:
        oc, rc = of[a:b].to(wide), rf[a:b].to(wide)
        ref_sq += _norm(rc) ** 2
        err_sq += _norm(oc - rc) ** 2
    ref_norm, err_norm = math.sqrt(ref_sq), math.sqrt(err_sq)
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    rms = ref_norm / max(rf.numel(), 1) ** 0.5
    n_bad, max_err, worst, worst_excess = 0, 0.0, -1, -math.inf
    for a, b in chunks:
        oc, rc = of[a:b].to(wide), rf[a:b].to(wide)
        diff = (oc - rc).abs()
        bound = tol.rtol * rc.abs() + tol.atol_rms * rms
        if sf is not None:
            bound = bound + sf[a:b].to(bound.dtype)
        bad = diff > bound
        n_bad += int(bad.sum().item())
        max_err = max(max_err, float(diff.max()))
        excess = diff - bound
        k = int(torch.argmax(excess))
        if float(excess[k]) > worst_excess:
            worst, worst_excess = a + k, float(excess[k])
    facts.update(rel_err=rel, max_abs_err=max_err, ref_rms=rms, elements_outside=n_bad)
    # NaN fails too; an all-zero reference has no relative error to speak of: the elementwise bound (0 unless the
    # reference's own rounding widened it) decides
    if not (ref_norm == 0 or rel <= tol.norm + norm_slack):
        return False, (f"output mismatch: relative error {rel:.3g} > {tol.norm:g} "
                       f"({n_bad} of {rf.numel()} elements outside the elementwise bound)"), facts
    if n_bad:
        return False, (f"output mismatch: {n_bad} of {rf.numel()} elements outside |d| <= {tol.rtol:g}*|ref| + "
                       f"{tol.atol_rms:g}*rms(ref) (worst: {float(of[worst]):.4g} vs "
                       f"{float(rf[worst]):.4g} at flat index {worst}) though the relative error {rel:.3g} "
                       f"is within {tol.norm:g}"), facts
    return True, "", facts


# elements judged at a time (64 Mi: 256 MB per fp32 temporary)
COMPARE_CHUNK = 1 << 26


def _norm(t) -> float:
    """||t|| as a Python float; in float64 where the chunk's squares overflow its own dtype."""
    import torch

    n = float(torch.linalg.vector_norm(t))
    if not math.isfinite(n) and t.dtype in (torch.float32, torch.complex64):
        n = float(torch.linalg.vector_norm(t.to(torch.complex128 if t.is_complex() else torch.float64)))
    return n


def compare_float(out: float, ref: float, tol: Tolerance) -> tuple[bool, str, dict[str, Any]]:
    """Judge a Python float output against the reference's: the bounds of a one-element tensor (rms(ref) = |ref|, so
    |out - ref| <= rtol*|ref| + atol_rms*|ref| and |out - ref| / |ref| <= norm), NaN only where the reference is NaN,
    infinities exactly. Pure Python: no torch needed."""
    if not (math.isfinite(out) and math.isfinite(ref)):
        same = out == ref or (math.isnan(out) and math.isnan(ref))
        return same, "" if same else f"output mismatch: {out!r}, expected {ref!r}", {}
    err = abs(out - ref)
    rel = err / abs(ref) if ref else (0.0 if err == 0 else math.inf)
    facts = {"rel_err": rel, "max_abs_err": err, "ref_rms": abs(ref), "elements_outside": 0}
    bound = min(tol.norm, tol.rtol + tol.atol_rms)
    if rel <= bound:
        return True, "", facts
    facts["elements_outside"] = 1
    return False, f"output mismatch: {out!r}, expected {ref!r} (relative error {rel:.3g} > {bound:g})", facts
