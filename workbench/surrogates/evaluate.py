"""Cross-validated evaluation of surrogates on the measured dataset.

Splits (`split_folds`):
- "random": rows dealt to k folds at random (candidates of a test problem were seen in training: the easy case);
- "problem": grouped k-fold over problems, whole problems held out (the headline: a search meets new problems);
- "family": leave one kernel family out, a problem's family being its candidates' usual dominant group family.

`cross_predict` trains a fresh surrogate per fold and predicts the held-out rows; `metrics` scores those predictions:

- ranking, within each problem's pool, averaged over pools: pairwise ordering accuracy excluding pairs whose measured
  log2 speedups differ by <= 2 * the problem's noise sd (floored at features.NOISE_FLOOR), Kendall tau-b, Spearman
  rho; a failed candidate ranks below every timed one (its true value: the pool's worst - 1);
- bins: accuracy and within-one-bin of the argmax, median |mu - measured log2| over timed rows;
- calibration, with failures as outcome "fails" (class 8, the ninth): ECE over 15 equal-width and 15 equal-mass
  bins of the top probability, multiclass Brier, NLL, the 15-bin reliability table;
- selectivity: the risk-coverage curve of the 0/1 argmax error by confidence, and its area (AURC);
- budget, per problem with a timed candidate: TenSet's top-k score (best speedup among the k best-scored over the
  pool's best, k = 1, 5) and, for B = 2, 5, 10, 25 % of the pool measured in score order, the fraction of problems
  where that finds a kernel within 5 % and within 20 % of the pool's best.

Sampling (`sample_rows`, `evaluate(..., sample=)`): a surrogate that pays per forecast (the LLM: one API call per
pair) is scored on a seeded sample of rows, and every other surrogate on that same sample, so the comparison is on
identical candidates. Folds are still dealt over the whole table and each fold's surrogate still trains on all the
other folds' rows; only the held-out rows it is scored on are restricted. The sample keeps whole pools of a few
candidates per problem (ranking needs two or more in a pool) and draws only rows the caller marks eligible (for the
LLM: rows whose source the dataset can regenerate).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from ..metrics import (
    aurc,
    bin_accuracy,
    brier_multiclass,
    budget_recall,
    expected_calibration_error,
    kendall_tau,
    median_abs_log2_error,
    nll_multiclass,
    pairwise_accuracy,
    per_pool,
    reliability_table,
    risk_coverage,
    spearman_rho,
    to_bin,
    within_one_bin,
)
from .baselines import OracleBaseline, PriorBaseline, RandomBaseline, RooflineRowsBaseline
from .learned import LearnedSurrogate, grouped_folds

SPLITS = ("random", "problem", "family")
BUDGETS = (2, 5, 10, 25)  # percent of a pool measured
N_OUT = 9
HEADLINE = ("pairwise_accuracy", "spearman", "kendall", "bin_accuracy", "within_one_bin", "median_abs_log2_error",
            "ece", "ece_mass", "brier", "nll", "aurc", "top1_score", "top5_score", "top10_within5",
            "top10_within20")


def default_surrogates(seed: int = 0, trees: int = 250) -> dict[str, Callable[[], Any]]:
    """name -> factory of an untrained surrogate: the learned one (`trees` per LightGBM model) and the baselines."""
    return {"learned": lambda: LearnedSurrogate(n_estimators=trees, seed=seed), "roofline": RooflineRowsBaseline,
            "prior": lambda: PriorBaseline(seed), "random": lambda: RandomBaseline(seed), "oracle": OracleBaseline}


def split_folds(table: pd.DataFrame, split: str, k: int = 5, seed: int = 0) -> np.ndarray:
    """A fold id per row for one of SPLITS."""
    if split == "random":
        return np.random.default_rng(seed).permutation(np.arange(len(table)) % k)
    if split == "problem":
        n = table["problem_key"].nunique()
        if n < 2:
            raise ValueError("a held-out-problem split needs at least 2 problems")
        return grouped_folds(table["problem_key"].to_numpy(), min(k, n), seed)
    if split == "family":
        fams = sorted(table["family"].unique())
        if len(fams) < 2:
            raise ValueError("a held-out-family split needs problems of at least 2 kernel families")
        return table["family"].map({f: i for i, f in enumerate(fams)}).to_numpy()
    raise ValueError(f"split must be one of {SPLITS}, not {split!r}")


def sample_rows(table: pd.DataFrame, n: int, seed: int = 0, eligible: np.ndarray | None = None,
                per_problem: int = 8) -> pd.Index:
    """A seeded sample of at most n row labels: problems in a random order, up to `per_problem` random eligible rows
    from each, until n are taken (in table order). All eligible rows when there are no more than n."""
    if n < 1:
        raise ValueError(f"the sample needs at least 1 pair, got {n}")
    if per_problem < 1:
        raise ValueError(f"pairs per problem must be at least 1, got {per_problem}")
    ok = np.ones(len(table), bool) if eligible is None else np.asarray(eligible, bool)
    if len(ok) != len(table):
        raise ValueError("eligible must have one flag per table row")
    pool = table[ok]
    if pool.empty:
        raise ValueError("no eligible rows to sample (for the LLM: no candidate whose source regenerates)")
    if len(pool) <= n:
        return pool.index
    rng = np.random.default_rng(seed)
    groups = {k: g.index.to_numpy() for k, g in pool.groupby("problem_key", sort=True)}
    keys = sorted(groups)
    picked: list = []
    for j in rng.permutation(len(keys)):
        rows = groups[keys[j]]
        take = rng.choice(len(rows), size=min(per_problem, len(rows), n - len(picked)), replace=False)
        picked.extend(rows[np.sort(take)])
        if len(picked) >= n:
            break
    return table.index[table.index.isin(picked)]


def cross_predict(factory: Callable[[], Any], table: pd.DataFrame, folds: np.ndarray,
                  sample: pd.Index | None = None) -> tuple[pd.DataFrame, float]:
    """Held-out predictions for every row, or for the rows in `sample` (each from a surrogate trained on the other
    folds' rows, all of them), and the mean seconds one training took. A fold with no row to predict trains
    nothing."""
    wanted = np.ones(len(table), bool) if sample is None else table.index.isin(sample)
    parts, secs = [], []
    for f in np.unique(folds):
        test = table[(folds == f) & wanted]
        if test.empty:
            continue
        t0 = time.perf_counter()
        s = factory().fit(table[folds != f])
        secs.append(time.perf_counter() - t0)
        parts.append(s.predict_frame(test))
    return pd.concat(parts).loc[table.index[wanted]], float(np.mean(secs))


def _ranking_truth(table: pd.DataFrame) -> np.ndarray:
    """log2 speedup, a failure set to its pool's worst timed value - 1 (NaN for a pool with none timed)."""
    y = table["log2_speedup"].to_numpy(float)
    worst = table["log2_speedup"].groupby(table["problem_key"]).transform("min").to_numpy(float)
    return np.where(table["failed"].to_numpy(bool), worst - 1.0, y)


def _pool_mean(df: pd.DataFrame, fn, **kw) -> float:
    v = per_pool(df, "problem_key", "score", "truth", fn, **kw)["value"]
    return float(v.mean()) if v.notna().any() else math.nan


def ranking_metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, float]:
    df = pd.DataFrame({"problem_key": table["problem_key"], "score": pred["score"].to_numpy(float),
                       "truth": _ranking_truth(table), "noise": 2 * table["noise_sd"].to_numpy(float)})
    df = df[np.isfinite(df["truth"])]
    pa = [pairwise_accuracy(g["score"], g["truth"], g["noise"].to_numpy()) for _, g in df.groupby("problem_key")]
    pa = [x for x in pa if not math.isnan(x)]
    return {"pairwise_accuracy": float(np.mean(pa)) if pa else math.nan, "kendall": _pool_mean(df, kendall_tau),
            "spearman": _pool_mean(df, spearman_rho)}


def budget_metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, float]:
    rows = []
    for _, g in table.assign(score=pred["score"].to_numpy(float)).groupby("problem_key"):
        speed = np.where(g["failed"], np.nan, 2.0 ** g["log2_speedup"].to_numpy(float))
        if not np.isfinite(speed).any():
            continue  # nothing in the pool works: no budget can find a kernel
        n = len(g)
        ks = [1, 5] + [max(1, math.ceil(b / 100 * n)) for b in BUDGETS]
        r5 = budget_recall(g["score"], speed, ks, within=0.05)
        r20 = budget_recall(g["score"], speed, ks, within=0.2)
        row = {"top1_score": r5["ratio"][0], "top5_score": r5["ratio"][1]}
        for j, b in enumerate(BUDGETS):
            row[f"top{b}_within5"] = float(r5["hit"][2 + j])
            row[f"top{b}_within20"] = float(r20["hit"][2 + j])
        rows.append(row)
    if not rows:
        return {}
    return {k: float(v) for k, v in pd.DataFrame(rows).mean().items()} | {"budget_problems": len(rows)}


def calibration_metrics(table: pd.DataFrame, pred: pd.DataFrame, n_bins: int = 15) -> dict[str, Any]:
    probs = pred[[f"p{i}" for i in range(N_OUT)]].to_numpy(float)
    true = np.atleast_1d(to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool)))
    conf = probs.max(1)
    correct = (probs.argmax(1) == true).astype(float)
    rc = risk_coverage(conf, 1 - correct)
    step = max(1, len(rc) // 50)
    return {"bin_accuracy": bin_accuracy(probs, true), "within_one_bin": within_one_bin(probs, true),
            "median_abs_log2_error": median_abs_log2_error(pred["mu"], table["log2_speedup"]),
            "ece": expected_calibration_error(conf, correct, n_bins),
            "ece_mass": expected_calibration_error(conf, correct, n_bins, binning="mass"),
            "brier": brier_multiclass(probs, true), "nll": nll_multiclass(probs, true), "aurc": aurc(conf, 1 - correct),
            "mean_confidence": float(conf.mean()),
            "reliability": reliability_table(conf, correct, n_bins).to_dict("records"),
            "risk_coverage": rc.iloc[list(range(step - 1, len(rc), step))][["coverage", "confidence", "risk"]]
            .to_dict("records")}


def metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, Any]:
    """Every metric of one surrogate's held-out predictions (see the module docstring)."""
    if len(pred) != len(table) or not pred.index.equals(table.index):
        raise ValueError("predictions must have one row per table row, same index")
    return {**ranking_metrics(table, pred), **calibration_metrics(table, pred), **budget_metrics(table, pred),
            "n_rows": len(table), "n_problems": int(table["problem_key"].nunique())}


def per_problem(table: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: candidates, failures, pairwise accuracy (noise-excluded), Spearman rho, the best found
    in the top 10 % over the pool's best, argmax accuracy and mean confidence: where a surrogate does well or not."""
    probs = pred[[f"p{i}" for i in range(N_OUT)]].to_numpy(float)
    true = np.atleast_1d(to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool)))
    df = table[["problem", "problem_key", "family", "failed", "log2_speedup", "noise_sd"]].assign(
        score=pred["score"].to_numpy(float), truth=_ranking_truth(table), right=probs.argmax(1) == true,
        confidence=probs.max(1))
    rows = []
    for key, g in df.groupby("problem_key", sort=True):
        ranked = np.isfinite(g["truth"])  # failures rank below the timed; a pool with none timed drops out
        speed = np.where(g["failed"], np.nan, 2.0 ** g["log2_speedup"].to_numpy(float))
        r10 = (budget_recall(g["score"], speed, [max(1, math.ceil(0.1 * len(g)))])["ratio"][0]
               if np.isfinite(speed).any() else math.nan)
        t = g[ranked]
        rows.append({"problem": g["problem"].iloc[0], "family": g["family"].iloc[0], "n": len(g),
                     "failed": int(g["failed"].sum()),
                     "pairwise_accuracy": pairwise_accuracy(t["score"], t["truth"], 2 * t["noise_sd"].to_numpy())
                     if len(t) > 1 else math.nan,
                     "spearman": spearman_rho(t["score"], t["truth"]) if len(t) > 1 else math.nan,
                     "top10_ratio": r10, "bin_accuracy": float(g["right"].mean()),
                     "confidence": float(g["confidence"].mean())})
    return pd.DataFrame(rows)


def evaluate(table: pd.DataFrame, split: str = "problem", surrogates: Mapping[str, Callable[[], Any]] | None = None,
             k: int = 5, seed: int = 0, predictions: dict[str, pd.DataFrame] | None = None,
             sample: pd.Index | None = None) -> dict[str, dict[str, Any]]:
    """{surrogate name: metrics} for one split, each surrogate trained afresh per fold. Pass a dict as
    `predictions` to get each surrogate's held-out prediction frame too. `sample` (row labels, see `sample_rows`):
    every surrogate is scored on those rows only (trained as without it). A surrogate whose predictions say which
    replies it could read (a `parsed` column: the LLM) also reports how many it could not."""
    folds = split_folds(table, split, k, seed)
    scored = table if sample is None else table.loc[table.index.isin(sample)]
    if scored.empty:
        raise ValueError("the sample holds none of the table's rows")
    out = {}
    for name, factory in (surrogates or default_surrogates(seed)).items():
        pred, secs = cross_predict(factory, table, folds, None if sample is None else scored.index)
        if predictions is not None:
            predictions[name] = pred
        out[name] = {**metrics(scored, pred), "split": split, "folds": int(len(np.unique(folds))),
                     "train_seconds": secs, **({"unparsed": int((~pred["parsed"].astype(bool)).sum())}
                                               if "parsed" in pred.columns else {})}
    return out


def format_table(results: Mapping[str, Mapping[str, Any]], columns=HEADLINE) -> str:
    """The headline metrics as a plain-text table, one line per surrogate."""
    head = f"{'surrogate':10s} " + " ".join(f"{c[:14]:>14s}" for c in columns)
    lines = [head]
    for name, m in results.items():
        lines.append(f"{name:10s} " + " ".join(f"{m.get(c, math.nan):14.3f}" for c in columns))
    return "\n".join(lines)


def jsonable(x: Any) -> Any:
    """Metrics as strict JSON: NaN/inf -> None, numpy scalars -> Python numbers, keys -> strings."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def few_shot(table: pd.DataFrame, shots: tuple[int, ...] = (0, 1, 3, 5), k: int = 5, seed: int = 0,
             trees: int = 250) -> dict[int, dict[str, Any]]:
    """The learned surrogate on held-out problems after it has seen `n` measured candidates of each (what a search
    gives it: `LearnedSurrogate.observe`), for each n in `shots`. Per fold one model is trained without the fold's
    problems; per test problem a seeded random order of its timed candidates is drawn, the first n are observed,
    and every n is scored on the same rows: all but the first max(shots) (so the n = 0 row is the zero-shot
    surrogate on exactly those rows). {n: metrics}."""
    if not shots or min(shots) < 0:
        raise ValueError("shots must be non-negative counts")
    folds = split_folds(table, "problem", k, seed)
    most = max(shots)
    rng = np.random.default_rng(seed)
    revealed: dict[Any, list] = {}
    for key, g in table.groupby("problem_key", sort=True):
        timed = g.index[~g["failed"].to_numpy(bool)].to_numpy()
        revealed[key] = list(timed[rng.permutation(len(timed))][:most])
    held = table.index[~table.index.isin([i for v in revealed.values() for i in v])]
    preds: dict[int, list[pd.DataFrame]] = {n: [] for n in shots}
    for f in np.unique(folds):
        test = table[folds == f]
        model = LearnedSurrogate(n_estimators=trees, seed=seed).fit(table[folds != f])
        rows = test.loc[test.index.isin(held)]
        if rows.empty:
            continue
        for n in shots:
            model.forget()
            for key in test["problem_key"].unique():
                seen = revealed[key][:n]
                if seen:
                    model.observe(table.loc[seen], table.loc[seen, "log2_speedup"].to_numpy(float))
            preds[n].append(model.predict_frame(rows))
    scored = table.loc[held]
    return {n: metrics(scored, pd.concat(preds[n]).loc[scored.index]) for n in shots}
