"""The LLM surrogate on dataset rows, so `workbench surrogate eval` scores it on the same pairs as the learned one.

The evaluation works on `features.training_table` rows (problem key, candidate hash, measured outcome), and the
surrogates there answer `predict_frame(rows)`. The LLM needs each candidate's source, which the dataset does not store:
it stores the offline proposer's choice, and `regenerates` says whether that choice still renders to the recorded
hash (experiments/export_dataset.py). `workbench.proposers.recorded.DatasetSources` renders those and checks the hash
again; a row without a regenerable source is refused with the reason, never forecast from something else.

`LLMRowsSurrogate` is the adapter: `fit` is a no-op (nothing is trained: every split is held out for it alike),
`predict_frame` asks `LLMSurrogate.forecast` once per problem (its candidates share the cached prompt prefix) and
returns the columns the baselines return (score = expected log2 speedup with "fails" at -3, the selective policy's
promise; mu = the forecast's point given no failure; p_fail; confidence; p0..p8) plus `parsed`.
"""
from __future__ import annotations

import math

import pandas as pd

from ..core.outcomes import BINS, expected_log2
from ..proposers.recorded import DatasetSources
from .surrogate import LLMSurrogate


class LLMRowsSurrogate:
    name = "llm"

    def __init__(self, surrogate: LLMSurrogate, sources: DatasetSources):
        self.surrogate, self.sources = surrogate, sources

    def fit(self, table: pd.DataFrame) -> "LLMRowsSurrogate":
        return self  # nothing to train: the model is used as it is

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        missing = ~self.sources.available(table)
        if missing.any():
            raise ValueError(f"{int(missing.sum())} of {len(table)} rows have no regenerable source for the LLM "
                             "(evaluate on a sample: --limit-pairs draws only rows whose source regenerates)")
        out = pd.DataFrame(index=table.index, columns=["score", "mu", "p_fail", "confidence", "parsed"], dtype=float)
        probs = pd.DataFrame(index=table.index, columns=[f"p{i}" for i in range(len(BINS))], dtype=float)
        for key, rows in table.groupby("problem_key", sort=True):
            problem = self.sources.problem(key)
            cands = [self.sources.candidate(key, h) for h in rows["candidate"]]
            for idx, f in zip(rows.index, self.surrogate.forecast(problem, cands, "eager")):
                point = f.point
                out.loc[idx] = [expected_log2(f), math.nan if point is None else point, f.p_fail, f.confidence,
                                float(f.parsed)]
                probs.loc[idx] = f.probs
        out["parsed"] = out["parsed"].astype(bool)
        return pd.concat([out, probs], axis=1)


def llm_factory(surrogate: LLMSurrogate, candidates: pd.DataFrame):
    """A factory for `evaluate`: every fold gets the same adapter (no training; its problem and proposer caches are
    shared across folds)."""
    adapter = LLMRowsSurrogate(surrogate, DatasetSources(candidates))
    return lambda: adapter
