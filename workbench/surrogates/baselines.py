"""Baselines the learned surrogate is judged against, on `features.training_table` rows.

Each has `fit(table)` and `predict_frame(table)` like `LearnedSurrogate`: per row a `score` (higher = measure
first), `mu` (point log2 speedup vs eager, NaN when it has none), `p_fail`, `confidence` and the 9 outcome
probabilities p0..p8.

- `RandomBaseline`: a seeded random score and the training outcome frequencies as the forecast: what measuring in
  a random order buys.
- `PriorBaseline`: the "child beats parent" style constant forecast: every candidate gets the training outcome
  frequencies and the same score, so ties keep the table's order (the proposer's sample order: its default point
  first). It says how much of a metric comes from the pools rather than from telling candidates apart.
- `OracleBaseline`: the measurements themselves (the true outcome with probability 1, the true log2 as score): the
  ceiling of every metric.
- `RooflineRowsBaseline`: `RooflineSurrogate` on dataset rows: the problem's counts and the H200's ceilings give mu,
  the compile facts give spills (lower efficiency) and failure (p_fail 0.95); sigma 0.75.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..core.outcomes import BINS, FAILS, MIDPOINTS, from_log2
from ..core.records import FAIL, PASS, StageRecord
from ..metrics.bins import to_bin
from ..problems.analysis import ProblemCounts
from .features import default_ceilings
from .roofline import RooflineSurrogate

N_OUT = len(BINS)


def outcome_frequencies(table: pd.DataFrame) -> np.ndarray:
    """Training frequencies of the 9 outcomes, with one pseudo-count each (no outcome is impossible)."""
    out = to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool))
    return (np.bincount(np.atleast_1d(out), minlength=N_OUT) + 1.0) / (len(table) + N_OUT)


def frame(index, score, mu, p_fail, probs: np.ndarray) -> pd.DataFrame:
    out = pd.DataFrame({"score": score, "mu": mu, "p_fail": p_fail, "confidence": probs.max(1)}, index=index)
    for i in range(N_OUT):
        out[f"p{i}"] = probs[:, i]
    return out


class _Constant:
    name = "constant"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.prior: np.ndarray | None = None

    def fit(self, table: pd.DataFrame):
        self.prior = outcome_frequencies(table)
        return self

    def _forecast(self, table: pd.DataFrame):
        if self.prior is None:
            raise ValueError(f"{type(self).__name__} is not fitted")
        probs = np.tile(self.prior, (len(table), 1))
        ok = 1 - self.prior[FAILS]
        mu = float(np.dot(self.prior[:FAILS], MIDPOINTS) / ok) if ok > 0 else math.nan
        return probs, np.full(len(table), mu), np.full(len(table), self.prior[FAILS])


class RandomBaseline(_Constant):
    name = "random"

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        probs, mu, pf = self._forecast(table)
        return frame(table.index, np.random.default_rng(self.seed).random(len(table)), mu, pf, probs)


class PriorBaseline(_Constant):
    name = "prior"

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        probs, mu, pf = self._forecast(table)
        return frame(table.index, np.zeros(len(table)), mu, pf, probs)


class OracleBaseline:
    name = "oracle"

    def fit(self, table: pd.DataFrame):
        return self

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        y = table["log2_speedup"].to_numpy(float)
        failed = table["failed"].to_numpy(bool)
        probs = np.zeros((len(table), N_OUT))
        probs[np.arange(len(table)), np.atleast_1d(to_bin(y, failed))] = 1.0
        score = np.where(failed, -1e6, np.nan_to_num(y))
        return frame(table.index, score, np.where(failed, np.nan, y), failed.astype(float), probs)


class RooflineRowsBaseline:
    name = "roofline"

    def __init__(self, ceilings: Mapping[str, Any] | None = None, sigma: float = 0.75, fail_penalty: float = 4.0):
        ceilings = ceilings if ceilings is not None else default_ceilings()
        self.model = RooflineSurrogate(ceilings, sigma=sigma)
        self.fail_penalty = fail_penalty

    def fit(self, table: pd.DataFrame):
        return self

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        need = {"flops", "min_bytes", "eager_bytes", "compute_dtype", "k.spills", "k.failed"}
        if need - set(table.columns):
            raise ValueError(f"rows lack {sorted(need - set(table.columns))} (use features.training_table)")
        m = self.model
        mus, pfs, probs = [], [], []
        for fl, mb, eb, dt, spills, failed in zip(table["flops"], table["min_bytes"], table["eager_bytes"],
                                                  table["compute_dtype"], table["k.spills"], table["k.failed"]):
            counts = ProblemCounts(int(fl), int(mb), int(eb), str(dt), [], [], 0)
            rec = StageRecord("compile", FAIL if failed == 1 else PASS,
                              flags=[{"check": "spills"}] if spills == 1 else [])
            mu, _ = m.log2_speedup(counts, rec)
            pf = m.p_fail_compile_failed if failed == 1 else m.p_fail
            mus.append(mu)
            pfs.append(pf)
            probs.append(from_log2(mu, m.sigma, pf).probs)
        mu, pf = np.array(mus), np.array(pfs)
        return frame(table.index, mu - self.fail_penalty * pf, mu, pf, np.array(probs))
