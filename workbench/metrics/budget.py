"""Budgeted search: measure candidates in the order a score ranks them; how many measurements find a good one?

`scores`: higher means measure first (NaN: unscored, measured last); ties keep the input order. `true_speedup`:
the measured speedup of each candidate (NaN or <= 0 for one that failed: it is never "found").
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def _order(scores, true_speedup) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float).ravel()
    t = np.asarray(true_speedup, dtype=float).ravel()
    if s.shape != t.shape:
        raise ValueError("scores and true_speedup differ in length")
    key = np.where(np.isnan(s), np.inf, -s)  # ascending key = score descending, NaN last
    order = np.lexsort((np.arange(s.size), key, np.isnan(s)))  # last key sorts first; ties keep input order
    tt = t[order]
    return order, np.where(np.isfinite(tt) & (tt > 0), tt, 0.0)


def budget_recall(scores, true_speedup, budgets: list[int], within: float = 0.2) -> pd.DataFrame:
    """For each budget k: measure the top-k candidates by score; does the measured set hold one within `within`
    (relative) of the pool's best, i.e. best_found >= (1 - within) * pool_best?

    Returns a DataFrame with one row per budget: k, best_found (the highest speedup among the k measured, 0 when all
    failed), pool_best, ratio = best_found / pool_best, hit. A budget larger than the pool measures all of it. A pool
    with no working candidate has pool_best 0, ratio NaN and no hit.
    """
    if not 0 <= within < 1:
        raise ValueError("within must be in [0, 1)")
    _, t = _order(scores, true_speedup)
    pool_best = float(t.max()) if t.size else 0.0
    rows = []
    for k in budgets:
        if k < 0:
            raise ValueError("budgets must be non-negative")
        found = float(t[:k].max()) if k and t.size else 0.0
        ratio = found / pool_best if pool_best > 0 else float("nan")
        rows.append({"k": int(k), "best_found": found, "pool_best": pool_best, "ratio": ratio,
                     "hit": bool(pool_best > 0 and found >= (1 - within) * pool_best)})
    return pd.DataFrame(rows, columns=["k", "best_found", "pool_best", "ratio", "hit"])


def measurements_to_reach(scores, true_speedup, target: float) -> int | None:
    """The fewest measurements, in score order, until one candidate with speedup >= target is measured (1-based);
    None when no candidate in the pool reaches the target."""
    _, t = _order(scores, true_speedup)
    hits = np.nonzero(t >= target)[0] if target > 0 else np.nonzero(t > 0)[0]
    return int(hits[0]) + 1 if hits.size else None


def headroom_share(scores, true_speedup, default: int, k: int, noise: float = 0.0) -> float:
    """The share of the pool's headroom over its default candidate that measuring the top-k by score captures, in
    log2 speedup: (log2 best_found - log2 default) / (log2 pool_best - log2 default), clipped to [0, 1] (a top-k that
    holds nothing faster than the default captures none of it; a failed candidate is never "found").

    `default` is the position of the default candidate (a search's root); `noise` (log2) the headroom below which
    there is nothing to capture. NaN when the default failed or the pool's best is within `noise` of the default:
    such a pool cannot tell surrogates apart, so it is left out of an average, not counted as a success."""
    if k < 1:
        raise ValueError("k must be at least 1")
    s = np.asarray(scores, dtype=float).ravel()
    t = np.asarray(true_speedup, dtype=float).ravel()
    if not 0 <= default < t.size:
        raise ValueError(f"default position {default} outside a pool of {t.size}")
    d = t[default]
    if not (np.isfinite(d) and d > 0):
        return float("nan")
    _, ordered = _order(s, t)
    best = float(ordered.max())
    head = np.log2(best) - np.log2(d)
    if not head > max(noise, 0.0):
        return float("nan")
    found = float(ordered[:k].max())
    if found <= 0:
        return 0.0
    return float(np.clip((np.log2(found) - np.log2(d)) / head, 0.0, 1.0))
