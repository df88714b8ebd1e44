"""Surrogates side by side on the shipped dataset: held-out predictions and the frames the calibration views take.

`surrogate_comparison(...)` runs the cross-validated evaluation (`workbench.surrogates.evaluate`) of several surrogates
on the same rows; `calibration_frames` turns their predictions into the plain per-candidate columns of
`workbench.viz.calibration` (notebook 02).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..metrics import to_bin
from ..store.dataset import load
from . import evaluate
from .features import training_table


@dataclasses.dataclass
class SurrogateComparison:
    """Held-out predictions of several surrogates on the same dataset rows. `table`: the training table (one row per
    candidate: problem, problem_key, log2_speedup, failed, ...); `predictions`: name -> frame with `score`, `mu`,
    `confidence` and the outcome probabilities p0..p8, indexed like `table`; `metrics`: name -> the metrics dict of
    `workbench.surrogates.evaluate.metrics`."""
    split: str
    folds: int
    table: Any
    predictions: dict[str, Any]
    metrics: dict[str, dict[str, Any]]

    def frames(self) -> dict[str, Any]:
        return calibration_frames(self.table, self.predictions)

    def metrics_frame(self, columns: Sequence[str] | None = None):
        """One row per surrogate: the headline metrics (`evaluate.HEADLINE`) and the mean training seconds."""
        cols = list(columns or evaluate.HEADLINE) + ["train_seconds"]
        return pd.DataFrame([{"surrogate": n, **{c: m.get(c, math.nan) for c in cols}}
                             for n, m in self.metrics.items()]).set_index("surrogate")

    def per_problem(self, name: str):
        """One surrogate's metrics per problem (`workbench.surrogates.evaluate.per_problem`): where it does well."""
        if name not in self.predictions:
            raise KeyError(f"no predictions of {name!r}; have {list(self.predictions)}")
        return evaluate.per_problem(self.table, self.predictions[name])


def surrogate_comparison(surrogates: Sequence[str] = ("learned", "roofline", "prior", "random"),
                         split: str = "problem", folds: int = 5, seed: int = 0, trees: int = 250,
                         data: str | Path | None = None) -> SurrogateComparison:
    """Cross-validated predictions of the named surrogates (see `workbench.surrogates.evaluate.default_surrogates`)
    on the dataset at `data` (default results/dataset), each trained afresh per fold of `split`."""
    factories = evaluate.default_surrogates(seed, trees)
    unknown = [s for s in surrogates if s not in factories]
    if unknown or not surrogates:
        raise ValueError(f"unknown surrogate(s) {unknown}; choose from {sorted(factories)}")
    data = data or None  # "" (a notebook parameter) means the shipped dataset
    table = training_table(load("candidates", data), load("problems", data))
    preds: dict[str, Any] = {}
    chosen = {s: factories[s] for s in surrogates}
    results = evaluate.evaluate(table, split, chosen, k=folds, seed=seed, predictions=preds)
    n_folds = next(iter(results.values()))["folds"]
    return SurrogateComparison(split, n_folds, table, preds, results)


def calibration_frames(table, predictions: dict[str, Any]) -> dict[str, Any]:
    """Per surrogate, the plain per-candidate columns `workbench.viz.calibration` takes: problem, confidence (top
    outcome probability), correct (that outcome was the measured one: a speedup bin, or "fails"), error
    (1 - correct), score and the measured speedup (NaN for a failed candidate)."""
    true = np.atleast_1d(to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool)))
    speed = np.where(table["failed"].to_numpy(bool), np.nan, 2.0 ** table["log2_speedup"].to_numpy(float))
    out = {}
    for name, pred in predictions.items():
        probs = pred[[f"p{i}" for i in range(9)]].to_numpy(float)
        correct = (probs.argmax(1) == true).astype(float)
        out[name] = pd.DataFrame({"problem": table["problem"].to_numpy(), "confidence": probs.max(1),
                                  "correct": correct, "error": 1.0 - correct,
                                  "score": pred["score"].to_numpy(float), "speedup": speed}, index=table.index)
    return out
