"""Selective prediction: accept the forecasts a surrogate is most confident about and send the rest to the GPU.

`confidence`: higher means more sure; `error`: the loss of each item if accepted (a 0/1 mistake, or e.g. the absolute
log2 error). Risk at coverage k/n is the mean error of the k most confident items.

Ties in confidence: no threshold can split items of equal confidence, so within a group of equal confidence each
item is taken to carry the group's mean error, which makes the curve the expectation over a random order of the
ties, independent of the input order. `threshold_for_risk` only considers thresholds that accept whole groups.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def _conf_err(confidence, error) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(confidence, dtype=float).ravel()
    e = np.asarray(error, dtype=float).ravel()
    if c.shape != e.shape:
        raise ValueError("confidence and error differ in length")
    if np.isnan(c).any() or np.isnan(e).any():
        raise ValueError("confidence and error must not contain NaN")
    return c, e


def risk_coverage(confidence, error) -> pd.DataFrame:
    """The risk-coverage curve: rows k = 1..n with coverage k/n, the k-th highest confidence, and risk = mean error
    of the k most confident items (ties in confidence resolved in expectation, see the module docstring)."""
    c, e = _conf_err(confidence, error)
    n = c.size
    order = np.argsort(-c, kind="stable")
    cs, es = c[order], e[order]
    # each item's error replaced by its tie group's mean
    _, start, counts = np.unique(-cs, return_index=True, return_counts=True)
    smoothed = np.repeat(np.add.reduceat(es, start) / counts, counts) if n else es.copy()
    k = np.arange(1, n + 1)
    return pd.DataFrame({"k": k, "coverage": k / n if n else k, "confidence": cs,
                         "risk": np.cumsum(smoothed) / k})


def aurc(confidence, error) -> float:
    """Area under the risk-coverage curve, as the mean of the risks at coverages 1/n, 2/n, ..., 1 (lower is better;
    a perfect ranking of a 0/1 error with m mistakes has the least possible area). NaN for no items."""
    rc = risk_coverage(confidence, error)
    return float(rc["risk"].mean()) if len(rc) else float("nan")


def threshold_for_risk(confidence, error, max_risk: float) -> float:
    """The lowest threshold tau whose accepted set {i : confidence_i >= tau} has mean error <= max_risk.

    Candidate thresholds are the distinct confidences (so an accepted set always holds whole tie groups); the risk
    need not fall monotonically with tau, and the lowest tau that qualifies (the largest coverage) wins. When no
    threshold qualifies (or there are no items) the answer is +inf: accept nothing, measure everything.
    """
    c, e = _conf_err(confidence, error)
    if not c.size:
        return float("inf")
    order = np.argsort(-c, kind="stable")
    cs, es = c[order], e[order]
    # the last index of each tie group (in descending order) is where a threshold at that confidence cuts
    last = np.r_[np.nonzero(np.diff(cs) != 0)[0], cs.size - 1]
    risk = np.cumsum(es)[last] / (last + 1)
    ok = np.nonzero(risk <= max_risk)[0]
    return float(cs[last[ok[-1]]]) if ok.size else float("inf")
