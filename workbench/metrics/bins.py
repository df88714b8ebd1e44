"""Bin-level scores of `Forecast`s: the outcome bins are those of `workbench.core.outcomes` (8 log2-speedup bins with
edges (-inf, -2, -1, -0.5, 0, 0.5, 1, 2, +inf), bin i = [edge_i, edge_{i+1}), then "fails" = 8).

`probs` arguments are arrays of shape (n, 9) (e.g. `np.array([f.probs for f in forecasts])`).
"""
from __future__ import annotations

import numpy as np

from ..core.outcomes import BINS, EDGES, FAILS


def to_bin(log2_speedup, failed=False):
    """Outcome index 0..8 of each measurement: FAILS (8) where `failed`, else the bin i with
    edge_i <= log2_speedup < edge_{i+1}. Scalars give an int, arrays an int array. A NaN speedup that is not marked
    failed is a ValueError (a missing measurement is not an outcome)."""
    x = np.asarray(log2_speedup, dtype=float)
    f = np.broadcast_to(np.asarray(failed, dtype=bool), x.shape)
    if np.any(np.isnan(x) & ~f):
        raise ValueError("NaN log2 speedup for a candidate not marked failed")
    out = np.where(f, FAILS, np.searchsorted(np.asarray(EDGES), np.nan_to_num(x), side="right"))
    return int(out) if out.ndim == 0 else out.astype(int)


def _probs_bins(probs, true_bins) -> tuple[np.ndarray, np.ndarray]:
    p = np.atleast_2d(np.asarray(probs, dtype=float))
    t = np.asarray(true_bins, dtype=int).ravel()
    if p.shape[1] != len(BINS) or p.shape[0] != t.size:
        raise ValueError(f"probs must be (n, {len(BINS)}) with n = len(true_bins); got {p.shape}, {t.size}")
    if t.size and (t.min() < 0 or t.max() >= len(BINS)):
        raise ValueError("true bins must be in 0..8")
    return p, t


def bin_accuracy(probs, true_bins) -> float:
    """Fraction of items whose most likely outcome (argmax; ties go to the lower index) is the true one."""
    p, t = _probs_bins(probs, true_bins)
    return float(np.mean(np.argmax(p, axis=1) == t)) if t.size else float("nan")


def within_one_bin(probs, true_bins) -> float:
    """Fraction of items whose argmax is the true outcome or an adjacent speedup bin (|pred - true| <= 1 with both
    in 0..7); "fails" only matches "fails" (bin 7 and "fails" are not neighbours)."""
    p, t = _probs_bins(probs, true_bins)
    if not t.size:
        return float("nan")
    pred = np.argmax(p, axis=1)
    both_speed = (pred != FAILS) & (t != FAILS)
    return float(np.mean((pred == t) | (both_speed & (np.abs(pred - t) <= 1))))


def median_abs_log2_error(point, true) -> float:
    """Median of |point - true| over items where both the predicted and the measured log2 speedup are finite (a
    failed candidate or a forecast with no point drop out). NaN when none remain."""
    p = np.asarray(point, dtype=float).ravel()
    t = np.asarray(true, dtype=float).ravel()
    if p.shape != t.shape:
        raise ValueError("point and true differ in length")
    ok = np.isfinite(p) & np.isfinite(t)
    return float(np.median(np.abs(p[ok] - t[ok]))) if ok.any() else float("nan")
