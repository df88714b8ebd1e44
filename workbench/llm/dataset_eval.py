"""The LLM surrogate on dataset rows, so `workbench surrogate eval` scores it on the same pairs as the learned one.

The evaluation works on `features.training_table` rows (problem key, candidate hash, measured outcome), and the
surrogates there answer `predict_frame(rows)`. The LLM needs each candidate's source, which the dataset does not store:
it stores the offline proposer's choice, and `regenerates` says whether that choice still renders to the recorded
hash (experiments/export_dataset.py). `DatasetSources` renders those and checks the hash again; a row without a
regenerable source is refused with the reason, never forecast from something else.

`LLMRowsSurrogate` is the adapter: `fit` is a no-op (nothing is trained: every split is held out for it alike),
`predict_frame` asks `LLMSurrogate.forecast` once per problem (its candidates share the cached prompt prefix) and
returns the columns the baselines return (score = expected log2 speedup with "fails" at -3, the selective policy's
promise; mu = the forecast's point given no failure; p_fail; confidence; p0..p8) plus `parsed`.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from ..candidate import Candidate
from .forecast import BINS
from .surrogate import LLMSurrogate


class DatasetSources:
    """Candidate sources and problems of dataset rows, rebuilt from the recorded choices (built-in problems at the
    sizes the dataset was measured at)."""

    def __init__(self, candidates: pd.DataFrame):
        need = {"problem", "problem_key", "candidate", "choice_json"}
        if need - set(candidates.columns):
            raise ValueError(f"candidate rows lack {sorted(need - set(candidates.columns))} "
                             "(see workbench/store/dataset.py)")
        ok = candidates["regenerates"].astype(bool) if "regenerates" in candidates.columns else True
        rows = candidates[ok]
        self._choice = {(k, h): cj for k, h, cj in zip(rows["problem_key"], rows["candidate"], rows["choice_json"])}
        self._name = dict(zip(candidates["problem_key"], candidates["problem"]))
        self._problems: dict[str, Any] = {}
        self._proposers: dict[str, Any] = {}

    def available(self, table: pd.DataFrame) -> np.ndarray:
        """Per row of `table`: is its candidate's source regenerable?"""
        return np.array([(k, h) in self._choice for k, h in zip(table["problem_key"], table["candidate"])], bool)

    def problem(self, problem_key: str):
        if problem_key not in self._problems:
            from ..problems import Problem

            name = self._name.get(problem_key) or problem_key.split("@")[0]
            p = Problem.load(name)
            if p.key != problem_key:
                raise ValueError(f"dataset problem {problem_key} is not the built-in {name} at its default sizes "
                                 f"(that is {p.key}): its candidates cannot be rebuilt here")
            self._problems[problem_key] = p
        return self._problems[problem_key]

    def candidate(self, problem_key: str, candidate_hash: str) -> Candidate:
        cj = self._choice.get((problem_key, candidate_hash))
        if cj is None:
            raise ValueError(f"no regenerable source for candidate {candidate_hash} of {problem_key} (its recorded "
                             "choice no longer renders to that hash, or it is not in the dataset)")
        if problem_key not in self._proposers:
            from ..proposers.offline import OfflineProposer

            self._proposers[problem_key] = OfflineProposer(self.problem(problem_key))
        from ..proposers.offline import Choice

        cand = self._proposers[problem_key].render(Choice.from_dict(json.loads(cj)))
        if cand.hash != candidate_hash:
            raise ValueError(f"candidate {candidate_hash} of {problem_key} renders to {cand.hash} now: the kernel "
                             "templates changed since it was measured")
        return cand


class LLMRowsSurrogate:
    name = "llm"

    def __init__(self, surrogate: LLMSurrogate, sources: DatasetSources):
        self.surrogate, self.sources = surrogate, sources

    def fit(self, table: pd.DataFrame) -> "LLMRowsSurrogate":
        return self  # nothing to train: the model is used as it is

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        from ..surrogates.forecast import expected_log2

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
