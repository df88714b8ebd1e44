"""Confidence intervals over groups (problems): the percentile bootstrap with whole groups resampled.

A surrogate's metric on held-out problems varies more with which problems were held out than with which candidates,
so the unit of resampling is the problem: each replicate draws as many problems as there are, with replacement, and
recomputes the metric on them (a problem drawn twice counts twice). `group_draws` makes the draws once for a seed,
so every metric and every surrogate of one evaluation is resampled on the same problem sets (paired: the interval of
a difference between two surrogates is the percentiles of the per-replicate differences).

- `bootstrap_mean`: a metric that is a mean over problems of a per-problem value (pairwise accuracy, top-k scores,
  headroom share): per replicate the mean of the drawn problems' values, NaN values left out (as the point estimate
  leaves them out).
- `bootstrap_statistic`: any statistic of the rows of the drawn problems (ECE, Brier, NLL: means over candidates),
  recomputed from the concatenated rows of each replicate.
- `percentile_interval`: the (lo, hi) percentiles of replicates at a coverage `level` (0.95: the 2.5th and 97.5th).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


def group_draws(n_groups: int, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """(n_boot, n_groups) group indices drawn with replacement, reproducible from `seed`."""
    if n_groups < 1:
        raise ValueError("the bootstrap needs at least one group")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    return np.random.default_rng(seed).integers(0, n_groups, size=(n_boot, n_groups))


def percentile_interval(samples, level: float = 0.95) -> tuple[float, float]:
    """The (100 (1 - level) / 2, 100 (1 + level) / 2) percentiles of the finite replicates; NaNs when none is."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    s = np.asarray(samples, float)
    s = s[np.isfinite(s)]
    if not s.size:
        return math.nan, math.nan
    lo, hi = np.percentile(s, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def bootstrap_mean(values, draws: np.ndarray) -> np.ndarray:
    """Per replicate, the mean of the drawn groups' values (one value per group, in the order `draws` indexes; NaN
    values left out, a replicate with none NaN)."""
    v = np.asarray(values, float)
    if draws.size and draws.max() >= v.size:
        raise ValueError(f"draws index {draws.max() + 1} groups, values has {v.size}")
    picked = v[draws]
    ok = np.isfinite(picked)
    n = ok.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(ok, picked, 0.0).sum(1) / n, np.nan)


def bootstrap_statistic(group_rows: Sequence[np.ndarray], statistic: Callable[[np.ndarray], float],
                        draws: np.ndarray) -> np.ndarray:
    """Per replicate, `statistic(rows)` where rows concatenates `group_rows[g]` (row positions) of the drawn groups."""
    return np.array([statistic(np.concatenate([group_rows[g] for g in d])) for d in draws], float)
