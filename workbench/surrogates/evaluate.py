"""Cross-validated evaluation of surrogates on the measured dataset.

Splits (`split_folds`, `workbench.surrogates.splits`, which also says how a problem's family and level are derived):
- "random": rows dealt to k folds at random (candidates of a test problem were seen in training: the easy case);
- "problem": grouped k-fold over problems, whole problems held out (the headline: a search meets new problems);
- "family": leave one kernel family out, a problem's family being its candidates' usual dominant group family;
- "level": leave one KernelBench level out (the built-in suite is one more group, "builtin").
A split with fewer than two groups is a ValueError naming what it found; rows of an unknown group train every fold
and are scored in none.

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
  where that finds a kernel within 5 % and within 20 % of the pool's best;
- headroom (`top10_headroom`): the share of the pool's headroom over its default candidate that the top 10 % by
  score captures, (log2 best found - log2 default) / (log2 pool best - log2 default) clipped to [0, 1], averaged over
  problems whose best beats the default by more than 2 * noise sd (`headroom_problems` counts them). The default is
  the row a `default` column marks, else the problem's first row in table order: the dataset's rows are in
  collection order and the proposer measures its default point first (a search's root). Unlike "within 20 %",
  which every surrogate meets on these narrow pools, this separates a surrogate from the proposer's own order;
- novelty: for a surrogate whose predictions carry `unlike` (the learned one), the share of scored problems it
  flags as unlike its training data (`unlike_share`).

Confidence intervals (`confidence_intervals`, `evaluate(..., n_boot=)`): a percentile bootstrap over problems
(`workbench.metrics.bootstrap`): `n_boot` replicates, each drawing as many scored problems as there are with
replacement (seeded; the same draws for every surrogate of an evaluation), every headline metric recomputed on
the drawn problems -- means over problems from the per-problem values, candidate-level metrics (ECE, Brier, NLL,
AURC, bin accuracy) from the drawn problems' rows. `ci` holds [lo, hi] at `level` (95 % by default), and
`ci_vs_<name>` the interval of the paired difference (this surrogate - <name>) for the separating metrics.
Per held-out group (family and level splits), `per_group` gives each group's problems and main metrics.

Subsampling (`subsample`): at most `per_problem` rows of each problem, the default row always kept and the rest a
seeded random choice, for runs that would otherwise take too long (the wider data on 2 CPU cores).

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
    bootstrap_mean,
    brier_multiclass,
    budget_recall,
    expected_calibration_error,
    group_draws,
    headroom_share,
    kendall_tau,
    median_abs_log2_error,
    nll_multiclass,
    pairwise_accuracy,
    per_pool,
    percentile_interval,
    reliability_table,
    risk_coverage,
    spearman_rho,
    to_bin,
    within_one_bin,
)
from .baselines import OracleBaseline, PriorBaseline, RandomBaseline, RooflineRowsBaseline
from .learned import CALIBRATIONS, LearnedSurrogate
from .splits import SPLITS, split_folds  # noqa: F401  (SPLITS re-exported: the splits live in `splits`)

BUDGETS = (2, 5, 10, 25)  # percent of a pool measured
HEADROOM_BUDGET = 10  # percent of a pool measured for the headroom share
N_OUT = 9
HEADLINE = ("pairwise_accuracy", "spearman", "kendall", "bin_accuracy", "within_one_bin", "median_abs_log2_error",
            "ece", "ece_mass", "brier", "nll", "aurc", "top1_score", "top5_score", "top10_within5",
            "top10_within20", "top10_headroom")
POOL_METRICS = ("pairwise_accuracy", "spearman", "kendall", "top1_score", "top5_score", "top10_within5",
                "top10_within20", "top10_headroom")  # means over problems of a per-problem value
ROW_METRICS = ("bin_accuracy", "within_one_bin", "median_abs_log2_error", "ece", "ece_mass", "brier", "nll", "aurc")
SEPARATING = ("pairwise_accuracy", "top10_within5", "top10_headroom")  # paired differences reported for these


class Variants:
    """One surrogate trained once per fold and scored under several names: `views` maps each name to a function of
    the fitted surrogate giving the one that predicts (the learned surrogate under each calibration mode, say)."""

    def __init__(self, factory: Callable[[], Any], views: Mapping[str, Callable[[Any], Any]]):
        if not views:
            raise ValueError("Variants needs at least one view")
        self.factory, self.views = factory, dict(views)


def calibration_variants(seed: int = 0, trees: int = 250, modes=CALIBRATIONS, base: str = "learned") -> Variants:
    """The learned surrogate under each calibration mode ("learned" for the default one, "learned+<mode>" for the
    others), trained once per fold."""
    name = lambda m: base if m == "gaussian" else f"{base}+{m}"  # noqa: E731
    return Variants(lambda: LearnedSurrogate(n_estimators=trees, seed=seed),
                    {name(m): (lambda s, m=m: s.with_calibration(m)) for m in modes})


def default_surrogates(seed: int = 0, trees: int = 250) -> dict[str, Callable[[], Any]]:
    """name -> factory of an untrained surrogate: the learned one (`trees` per LightGBM model) and the baselines."""
    return {"learned": lambda: LearnedSurrogate(n_estimators=trees, seed=seed), "roofline": RooflineRowsBaseline,
            "prior": lambda: PriorBaseline(seed), "random": lambda: RandomBaseline(seed), "oracle": OracleBaseline}


def default_rows(table: pd.DataFrame) -> pd.Series:
    """Per problem key (sorted), the label of its default row: the first row a boolean `default` column marks, else
    its first row in table order (see the module docstring)."""
    t = table
    if "default" in t.columns:
        t = t.iloc[np.lexsort((np.arange(len(t)), ~t["default"].fillna(False).astype(bool).to_numpy()))]
    return t.index.to_series().groupby(t["problem_key"].to_numpy(), sort=True).first()


def subsample(table: pd.DataFrame, per_problem: int, seed: int = 0) -> pd.DataFrame:
    """At most `per_problem` rows of each problem, in table order: its default row (`default_rows`) and a seeded
    random choice of the others (problems in sorted key order, one generator for all)."""
    if per_problem < 2:
        raise ValueError(f"keep at least 2 rows per problem (a pool to rank), not {per_problem}")
    rng = np.random.default_rng(seed)
    first = default_rows(table)
    keep = []
    for key, g in table.groupby("problem_key", sort=True):
        others = g.index[g.index != first[key]].to_numpy()
        take = rng.choice(len(others), size=min(per_problem - 1, len(others)), replace=False)
        keep.extend([first[key], *others[np.sort(take)]])
    return table.loc[table.index.isin(keep)]


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


def cross_predict(factory: Callable[[], Any] | Variants, table: pd.DataFrame, folds: np.ndarray,
                  sample: pd.Index | None = None) -> tuple[pd.DataFrame | dict[str, pd.DataFrame], float]:
    """Held-out predictions for every row of a fold >= 0, or for those in `sample` (each from a surrogate trained on
    the other folds' rows, all of them, fold -1 included), and the mean seconds one training took. A fold with no
    row to predict trains nothing. For `Variants`, {name: predictions} from one training per fold."""
    wanted = (folds >= 0) & (np.ones(len(table), bool) if sample is None else table.index.isin(sample))
    views = factory.views if isinstance(factory, Variants) else {"": lambda s: s}
    make = factory.factory if isinstance(factory, Variants) else factory
    parts: dict[str, list[pd.DataFrame]] = {n: [] for n in views}
    secs = []
    for f in np.unique(folds[folds >= 0]):
        test = table[(folds == f) & wanted]
        if test.empty:
            continue
        t0 = time.perf_counter()
        s = make().fit(table[folds != f])
        secs.append(time.perf_counter() - t0)
        for n, view in views.items():
            parts[n].append(view(s).predict_frame(test))
    out = {n: pd.concat(p).loc[table.index[wanted]] for n, p in parts.items()}
    return (out if isinstance(factory, Variants) else out[""]), float(np.mean(secs))


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


def _budget_rows(table: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """Per problem with a timed candidate (index: problem key): the budget scores and the headroom share (NaN for a
    pool without headroom over its default)."""
    first = default_rows(table)
    rows, keys = [], []
    for key, g in table.assign(score=pred["score"].to_numpy(float)).groupby("problem_key", sort=True):
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
        row["top10_headroom"] = headroom_share(g["score"], speed, int(np.nonzero(g.index == first[key])[0][0]),
                                               max(1, math.ceil(HEADROOM_BUDGET / 100 * n)),
                                               noise=2 * float(g["noise_sd"].iloc[0]))
        rows.append(row)
        keys.append(key)
    return pd.DataFrame(rows, index=pd.Index(keys, name="problem_key"))


def budget_metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, float]:
    df = _budget_rows(table, pred)
    if df.empty:
        return {}
    return ({k: float(v) for k, v in df.mean().items()} |
            {"budget_problems": len(df), "headroom_problems": int(df["top10_headroom"].notna().sum())})


def per_problem_values(table: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """One row per problem (sorted keys): the per-problem values whose means over problems are the pool metrics
    (`POOL_METRICS`; NaN where a problem does not count, as the point estimates leave it out)."""
    df = pd.DataFrame({"problem_key": table["problem_key"], "score": pred["score"].to_numpy(float),
                       "truth": _ranking_truth(table), "noise": 2 * table["noise_sd"].to_numpy(float)})
    df = df[np.isfinite(df["truth"])]
    out = pd.DataFrame(index=pd.Index(sorted(table["problem_key"].unique()), name="problem_key"))
    rank = {}
    for key, g in df.groupby("problem_key", sort=True):
        rank[key] = {"pairwise_accuracy": pairwise_accuracy(g["score"], g["truth"], g["noise"].to_numpy()),
                     "kendall": kendall_tau(g["score"], g["truth"]), "spearman": spearman_rho(g["score"], g["truth"])}
    out = out.join(pd.DataFrame.from_dict(rank, orient="index"))
    return out.join(_budget_rows(table, pred))


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


def novelty_metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, Any]:
    """For predictions with an `unlike` column: the share of problems flagged unlike the training data, and which."""
    if "unlike" not in pred.columns:
        return {}
    per = pd.Series(pred["unlike"].astype(bool).to_numpy()).groupby(table["problem"].to_numpy()).max()
    return {"unlike_share": float(per.mean()), "unlike_problems": sorted(per.index[per.to_numpy()])}


def metrics(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, Any]:
    """Every metric of one surrogate's held-out predictions (see the module docstring)."""
    if len(pred) != len(table) or not pred.index.equals(table.index):
        raise ValueError("predictions must have one row per table row, same index")
    return {**ranking_metrics(table, pred), **calibration_metrics(table, pred), **budget_metrics(table, pred),
            **novelty_metrics(table, pred), "n_rows": len(table), "n_problems": int(table["problem_key"].nunique())}


def _row_statistics(table: pd.DataFrame, pred: pd.DataFrame) -> Callable[[np.ndarray], dict[str, float]]:
    """statistic(row positions) -> the candidate-level metrics (`ROW_METRICS`) of those rows."""
    probs = pred[[f"p{i}" for i in range(N_OUT)]].to_numpy(float)
    true = np.atleast_1d(to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool)))
    conf = probs.max(1)
    correct = (probs.argmax(1) == true).astype(float)
    mu, y = pred["mu"].to_numpy(float), table["log2_speedup"].to_numpy(float)

    def stat(r: np.ndarray) -> dict[str, float]:
        return {"bin_accuracy": bin_accuracy(probs[r], true[r]), "within_one_bin": within_one_bin(probs[r], true[r]),
                "median_abs_log2_error": median_abs_log2_error(mu[r], y[r]),
                "ece": expected_calibration_error(conf[r], correct[r], 15),
                "ece_mass": expected_calibration_error(conf[r], correct[r], 15, binning="mass"),
                "brier": brier_multiclass(probs[r], true[r]), "nll": nll_multiclass(probs[r], true[r]),
                "aurc": aurc(conf[r], 1 - correct[r])}
    return stat


def replicates(table: pd.DataFrame, pred: pd.DataFrame, draws: np.ndarray) -> dict[str, np.ndarray]:
    """Per headline metric, its value on each bootstrap replicate of problems (`draws` index the sorted problem
    keys of `table`)."""
    per = per_problem_values(table, pred)
    out = {m: bootstrap_mean(per[m].to_numpy(float), draws) for m in POOL_METRICS if m in per.columns}
    keys = np.asarray(per.index)
    pos = pd.Series(np.arange(len(table))).groupby(table["problem_key"].to_numpy(), sort=True).apply(np.asarray)
    rows = [pos[k] for k in keys]
    stat = _row_statistics(table, pred)
    reps = [stat(np.concatenate([rows[g] for g in d])) for d in draws]
    for m in ROW_METRICS:
        out[m] = np.array([r[m] for r in reps], float)
    return out


def confidence_intervals(table: pd.DataFrame, preds: Mapping[str, pd.DataFrame], n_boot: int = 1000, seed: int = 0,
                         level: float = 0.95) -> dict[str, dict[str, Any]]:
    """{surrogate: {"ci": {metric: [lo, hi]}, "ci_vs_<other>": {metric: [lo, hi]}}}: percentile intervals of the
    headline metrics over `n_boot` bootstrap replicates of the problems (the same draws for every surrogate, so
    the differences are paired; see the module docstring)."""
    draws = group_draws(table["problem_key"].nunique(), n_boot, seed)
    reps = {name: replicates(table, p, draws) for name, p in preds.items()}
    out: dict[str, dict[str, Any]] = {}
    for name, r in reps.items():
        out[name] = {"ci": {m: list(percentile_interval(v, level)) for m, v in r.items()}, "ci_level": level,
                     "n_boot": n_boot}
        for other, r2 in reps.items():
            if other != name and other != "oracle":
                out[name][f"ci_vs_{other}"] = {m: list(percentile_interval(r[m] - r2[m], level)) for m in SEPARATING
                                               if m in r and m in r2}
    return out


def per_group(table: pd.DataFrame, pred: pd.DataFrame, groups: pd.Series) -> dict[str, dict[str, Any]]:
    """Per held-out group (a family, a level): its problems and the pool metrics' means over them."""
    per = per_problem_values(table, pred)
    g = groups.groupby(table["problem_key"].to_numpy()).first().reindex(per.index)
    out = {}
    for name, sub in per.groupby(g.to_numpy(), sort=True):
        out[str(name)] = {"n_problems": len(sub), **{m: float(sub[m].mean()) if sub[m].notna().any() else math.nan
                                                      for m in ("pairwise_accuracy", "top10_within5",
                                                                "top10_headroom") if m in sub.columns}}
    return out


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


def evaluate(table: pd.DataFrame, split: str = "problem",
             surrogates: Mapping[str, Callable[[], Any] | Variants] | None = None, k: int = 5, seed: int = 0,
             predictions: dict[str, pd.DataFrame] | None = None, sample: pd.Index | None = None,
             n_boot: int = 0, level: float = 0.95) -> dict[str, dict[str, Any]]:
    """{surrogate name: metrics} for one split, each surrogate trained afresh per fold (a `Variants` entry trains
    once per fold and gives one result per view name). Pass a dict as `predictions` to get each surrogate's
    held-out prediction frame too. `sample` (row labels, see `sample_rows`): every surrogate is scored on those rows
    only (trained as without it). Rows of fold -1 (an unknown group) train every fold and are scored in none.
    `n_boot` > 0 adds bootstrap intervals over problems (`confidence_intervals`). A surrogate whose predictions say
    which replies it could read (a `parsed` column: the LLM) also reports how many it could not."""
    folds = split_folds(table, split, k, seed)
    wanted = folds >= 0
    if sample is not None:
        wanted &= table.index.isin(sample)
    scored = table.loc[wanted]
    if scored.empty:
        raise ValueError("the sample holds none of the table's held-out rows")
    out, preds = {}, {}
    n_folds = int(len(np.unique(folds[folds >= 0])))
    for name, factory in (surrogates or default_surrogates(seed)).items():
        got, secs = cross_predict(factory, table, folds, None if sample is None else scored.index)
        for vname, pred in (got.items() if isinstance(factory, Variants) else [(name, got)]):
            preds[vname] = pred
            if predictions is not None:
                predictions[vname] = pred
            out[vname] = {**metrics(scored, pred), "split": split, "folds": n_folds, "train_seconds": secs,
                          "train_only_rows": int((folds < 0).sum()),
                          **({"unparsed": int((~pred["parsed"].astype(bool)).sum())} if "parsed" in pred.columns
                             else {})}
            if split in ("family", "level"):
                out[vname]["per_group"] = per_group(scored, pred, scored[split])
    if n_boot > 0:
        for name, ci in confidence_intervals(scored, preds, n_boot, seed, level).items():
            out[name].update(ci)
    return out


def format_table(results: Mapping[str, Mapping[str, Any]], columns=HEADLINE) -> str:
    """The headline metrics as a plain-text table, one line per surrogate."""
    head = f"{'surrogate':10s} " + " ".join(f"{c[:14]:>14s}" for c in columns)
    lines = [head]
    for name, m in results.items():
        lines.append(f"{name:10s} " + " ".join(f"{m.get(c, math.nan):14.3f}" for c in columns))
    return "\n".join(lines)


def format_intervals(results: Mapping[str, Mapping[str, Any]],
                     columns=("pairwise_accuracy", "ece", "top10_within5", "top10_headroom")) -> str:
    """Point estimates with their bootstrap intervals, one line per surrogate that has them."""
    lines = [f"{'surrogate':18s} " + " ".join(f"{c[:20]:>22s}" for c in columns)]
    for name, m in results.items():
        ci = m.get("ci")
        if not ci:
            continue
        cell = lambda c: (f"{m.get(c, math.nan):.3f} [{ci[c][0]:.3f}, {ci[c][1]:.3f}]"  # noqa: E731
                          if c in ci else "-")
        lines.append(f"{name:18s} " + " ".join(f"{cell(c):>22s}" for c in columns))
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
