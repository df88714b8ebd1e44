"""Calibration: does a stated confidence match the rate at which the forecast is right?

`confidence` is one number in [0, 1] per item (e.g. `Forecast.confidence`, the top probability) and `correct` a
0/1 per item (e.g. argmax == true bin). Bins are equal-width on [0, 1] by default (`binning="width"`): bin
b = [b/n_bins, (b+1)/n_bins), the last one closed so that a confidence of exactly 1 falls in it. `binning="mass"`
makes equal-mass bins instead: the items sorted by confidence (ties in input order) and cut into n_bins runs whose
sizes differ by at most one (the first n % n_bins runs one longer), so a forecaster whose confidences crowd into a
narrow range is still judged on several bins; lo and hi are then the smallest and largest confidence in the bin.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.outcomes import BINS


def _conf_correct(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(confidence, dtype=float).ravel()
    y = np.asarray(correct, dtype=float).ravel()
    if c.shape != y.shape:
        raise ValueError("confidence and correct differ in length")
    if np.isnan(c).any() or (c < 0).any() or (c > 1).any():
        raise ValueError("confidence must lie in [0, 1]")
    return c, y


def _bin_of(c: np.ndarray, n_bins: int) -> np.ndarray:
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    return np.minimum(np.floor(c * n_bins).astype(int), n_bins - 1)


def _mass_bins(c: np.ndarray, n_bins: int) -> np.ndarray:
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    b = np.empty(c.size, dtype=int)
    for i, run in enumerate(np.array_split(np.argsort(c, kind="stable"), n_bins)):
        b[run] = i
    return b


def reliability_table(confidence, correct, n_bins: int = 10, binning: str = "width") -> pd.DataFrame:
    """One row per bin (empty ones included): bin, lo, hi, count, confidence (mean confidence in the bin) and
    accuracy (mean of `correct` in the bin); the two means are NaN for an empty bin."""
    c, y = _conf_correct(confidence, correct)
    if binning not in ("width", "mass"):
        raise ValueError(f"binning must be 'width' or 'mass', not {binning!r}")
    b = _bin_of(c, n_bins) if binning == "width" else _mass_bins(c, n_bins)
    rows = []
    for i in range(n_bins):
        m = b == i
        k = int(m.sum())
        lo, hi = ((i / n_bins, (i + 1) / n_bins) if binning == "width" else
                  (float(c[m].min()) if k else float("nan"), float(c[m].max()) if k else float("nan")))
        rows.append({"bin": i, "lo": lo, "hi": hi, "count": k,
                     "confidence": float(c[m].mean()) if k else float("nan"),
                     "accuracy": float(y[m].mean()) if k else float("nan")})
    return pd.DataFrame(rows, columns=["bin", "lo", "hi", "count", "confidence", "accuracy"])


def expected_calibration_error(confidence, correct, n_bins: int = 10, binning: str = "width") -> float:
    """ECE = sum over bins of (count_b / n) * |accuracy_b - mean confidence_b| (equal-width bins by default,
    equal-mass with binning="mass"; empty bins add nothing). 0 for a perfectly calibrated forecaster; NaN for no
    items."""
    c, y = _conf_correct(confidence, correct)
    if binning not in ("width", "mass"):
        raise ValueError(f"binning must be 'width' or 'mass', not {binning!r}")
    b = _bin_of(c, n_bins) if binning == "width" else _mass_bins(c, n_bins)
    if not c.size:
        return float("nan")
    # count_b / n * |accuracy_b - confidence_b| = |sum of correct - sum of confidence in b| / n
    gap = np.bincount(b, weights=y, minlength=n_bins) - np.bincount(b, weights=c, minlength=n_bins)
    return float(np.sum(np.abs(gap)) / c.size)


def brier_multiclass(probs, true_bins) -> float:
    """Mean over items of sum_k (p_k - [k == true])^2 over the 9 outcomes: 0 for certain and right, 2 for certain
    and wrong, 8/9 for a uniform forecast."""
    p = np.atleast_2d(np.asarray(probs, dtype=float))
    t = np.asarray(true_bins, dtype=int).ravel()
    if p.shape != (t.size, len(BINS)):
        raise ValueError(f"probs must be (n, {len(BINS)}) with n = len(true_bins); got {p.shape}, {t.size}")
    if not t.size:
        return float("nan")
    onehot = np.zeros_like(p)
    onehot[np.arange(t.size), t] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def nll_multiclass(probs, true_bins, eps: float = 1e-6) -> float:
    """Mean negative log-likelihood of the true outcome, -mean log max(p_true, eps) (natural log): 0 for certain and
    right, log 9 for a uniform forecast; `eps` bounds the cost of one item forecast impossible at -log(eps)."""
    p = np.atleast_2d(np.asarray(probs, dtype=float))
    t = np.asarray(true_bins, dtype=int).ravel()
    if p.shape != (t.size, len(BINS)):
        raise ValueError(f"probs must be (n, {len(BINS)}) with n = len(true_bins); got {p.shape}, {t.size}")
    if not 0 < eps < 1:
        raise ValueError("eps must be in (0, 1)")
    if not t.size:
        return float("nan")
    return float(-np.mean(np.log(np.maximum(p[np.arange(t.size), t], eps)))) + 0.0  # + 0.0: no -0.0
