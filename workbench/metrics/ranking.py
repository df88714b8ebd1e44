"""Ranking agreement between a predicted score and a measured value (higher is better for both).

All three are O(n^2) in time (pairs are compared row by row, O(n) memory), which is fine for candidate pools of a
few thousand.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd


def _pair(pred, true) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=float).ravel()
    t = np.asarray(true, dtype=float).ravel()
    if p.shape != t.shape:
        raise ValueError(f"pred and true differ in length ({p.size} vs {t.size})")
    if np.isnan(p).any() or np.isnan(t).any():
        raise ValueError("pred and true must not contain NaN")
    return p, t


def pairwise_accuracy(pred, true, noise=None) -> float:
    """Fraction of pairs (i, j) that `pred` orders the same way as `true`.

    A pair is *excluded* when the true values are indistinguishable: |t_i - t_j| <= max(noise_i, noise_j), where
    `noise` is a scalar or a per-item array of measurement noise (None means 0, so only exact true ties are excluded).
    Among the remaining pairs, one counts 1 when sign(p_i - p_j) == sign(t_i - t_j), 1/2 when the prediction ties
    (p_i == p_j), 0 otherwise. NaN when no pair remains.
    """
    p, t = _pair(pred, true)
    n = p.size
    nz = np.zeros(n) if noise is None else np.broadcast_to(np.asarray(noise, dtype=float), (n,))
    if (nz < 0).any() or np.isnan(nz).any():
        raise ValueError("noise must be non-negative")
    score, pairs = 0.0, 0
    for i in range(n - 1):
        dt = t[i + 1:] - t[i]
        keep = np.abs(dt) > np.maximum(nz[i], nz[i + 1:])
        dp = p[i + 1:][keep] - p[i]
        st = np.sign(dt[keep])
        score += float(np.sum(np.sign(dp) == st)) + 0.5 * float(np.sum(dp == 0))
        pairs += int(keep.sum())
    return score / pairs if pairs else float("nan")


def kendall_tau(pred, true) -> float:
    """Kendall's tau-b: (C - D) / sqrt((n0 - n1)(n0 - n2)).

    C, D: concordant and discordant pairs; n0 = n(n-1)/2; n1, n2: pairs tied in `pred`, in `true` (a pair tied in
    both counts in n1 and n2 and in neither C nor D). NaN when either side is constant (or n < 2).
    """
    p, t = _pair(pred, true)
    n = p.size
    s, tied_p, tied_t = 0, 0, 0
    for i in range(n - 1):
        sp = np.sign(p[i + 1:] - p[i])
        stt = np.sign(t[i + 1:] - t[i])
        s += int(np.sum(sp * stt))  # +1 concordant, -1 discordant, 0 a tie on either side
        tied_p += int(np.sum(sp == 0))
        tied_t += int(np.sum(stt == 0))
    n0 = n * (n - 1) // 2
    denom = np.sqrt(float(n0 - tied_p) * float(n0 - tied_t))
    return s / denom if denom > 0 else float("nan")


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n, ties sharing the average of the ranks they span (e.g. [10, 20, 20, 30] -> [1, 2.5, 2.5, 4])."""
    return pd.Series(np.asarray(x, dtype=float)).rank(method="average").to_numpy()


def spearman_rho(pred, true) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (ties get average ranks). NaN when a side is
    constant (or n < 2)."""
    p, t = _pair(pred, true)
    if p.size < 2:
        return float("nan")
    rp, rt = average_ranks(p), average_ranks(t)
    rp, rt = rp - rp.mean(), rt - rt.mean()
    denom = np.sqrt(np.sum(rp * rp) * np.sum(rt * rt))
    return float(np.sum(rp * rt) / denom) if denom > 0 else float("nan")


def per_pool(df: pd.DataFrame, pool_col: str, pred_col: str, true_col: str,
             fn: Callable[..., float], **kw) -> pd.DataFrame:
    """`fn(pred, true, **kw)` within each pool (e.g. a problem's candidates): a DataFrame with columns
    [pool_col, "n", "value"], one row per pool in sorted order. Rankings only make sense within a pool, so this is
    how a ranking metric is reported; average the "value" column (e.g. weighted by "n") to summarise."""
    rows = []
    for pool, g in df.groupby(pool_col, sort=True):
        rows.append({pool_col: pool, "n": len(g),
                     "value": fn(g[pred_col].to_numpy(), g[true_col].to_numpy(), **kw)})
    return pd.DataFrame(rows, columns=[pool_col, "n", "value"])
