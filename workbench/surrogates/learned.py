"""`LearnedSurrogate`: gradient-boosted trees (LightGBM) trained on the measured dataset.

Components, all on `workbench.surrogates.features` columns:
- ranking: a regressor of log2 speedup relative to the problem's median candidate (a within-problem target, so the
  pool's offset, which eager's quality sets, does not blur the order) blended with a LightGBM lambdarank model whose
  query groups are problems; the blend's `score` orders candidates of a problem, less `fail_penalty` * p_fail;
- regression: a bag of `n_bags` regressors of absolute log2 speedup (bootstrap rows, feature subsets, seeds): mu is
  their mean, their spread the model's own uncertainty;
- failure: a classifier of outcome "fails" (does not compile or is incorrect), giving p_fail;
- calibration, on inner out-of-fold predictions of two regimes: "new" (whole training problems held out: what an
  unseen problem meets) and "known" (rows held out at random: what a training problem's other candidates meet).
  Per regime sigma = sqrt((a * bag sd)^2 + b^2), (a, b) maximising the Gaussian likelihood of the residuals (a
  conformal-style scaling of sigma); p_fail through isotonic regression; for known problems the Forecast's top
  probability through isotonic regression on whether the argmax was right (for new problems only sigma is scaled:
  a map fitted on a few training problems does not transfer; results/surrogates/report.md, the `learned+iso_new`
  ablation).
- conformal calibration (`calibration="conformal"` or `"conformal_bound"`; `"gaussian"`, the above, by default): the
  9 probabilities from each regime's empirical distribution of standardised out-of-fold residuals
  z = (measured - mu) / sigma instead of the Gaussian (a split-conformal predictive distribution:
  F(t) = (n F_n(t) + Phi(t)) / (n + 1), F_n the interpolated empirical CDF of the regime's n scores, Phi one
  pseudo-score spread as a standard normal so no bin is impossible). "conformal_bound" keeps scores per regime and
  per problem bound (memory / compute: a GEMM's errors are not an elementwise chain's), a stratum with fewer than
  `MIN_STRATUM` scores from 3 problems falling back to its regime's. The top-label maps are fitted on the chosen
  mode's probabilities. All modes are fitted at once; `with_calibration(mode)` answers in another one without
  retraining (how evaluations compare them on held-out problems).
- out-of-distribution check: how far a candidate's standardised features lie outside the training range
  (`Distances.excess`), in units of what 95 % of held-out training problems stay within; beyond 1 (farther out than
  anything calibration saw) the forecast is mixed towards the training outcome frequencies, weight
  1 - exp(-(ood - 1)), so its confidence falls and the selective policy defers to the GPU.
- novelty of a whole problem (`novelty`, and the `problem_ood` / `unlike` columns of `predict_frame`): the same
  range excess over the problem-level columns only (sizes, FLOPs, bytes, intensity, dtype: `PROBLEM_PREFIXES`), in
  units of what 95 % of inner held-out training problems stay within; a problem is *unlike the training data* when
  that exceeds 1, when its candidates use a kernel family no training candidate used (their config columns are
  then invisible to the trees), or when most of its candidates have ood > 1. Its forecasts say so
  (`SurrogateForecast.unlike`, and the reasoning names why), and `SelectivePolicy` defers them to the GPU instead
  of trusting their confidence. The probabilities themselves are unchanged by this flag.

A row's regime is "known" when its `problem_key` is a training problem's (no key: "new"). Forecasts are
`from_log2(mu, sigma, p_fail)` (batched in `_probs`) followed by the two adjustments; `predict_frame` answers the raw
parts (score, mu, sigma, p_fail, ood) next to the 9 probabilities.
"""
from __future__ import annotations

import copy
import math
import pickle
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..core.candidate import Candidate
from ..core.outcomes import BINS, EDGES, Forecast
from ..metrics.bins import to_bin
from ..metrics.selectivity import threshold_for_risk
from ..problems.problem import Problem
from .features import default_ceilings, feature_columns, features_from_live, live_problem_info
from .forecast import SurrogateForecast
from .splits import grouped_folds

FORMAT = 1
N_OUT = len(BINS)
OBSERVE_SIM = 3  # observed candidates per problem in the simulation that fits the "observed" regime's sigma
OBSERVE_MAP = (1, 2, 3, 5, 8)  # ... and those its top-label map is fitted over
CALIBRATIONS = ("gaussian", "conformal", "conformal_bound")
MIN_STRATUM = 200  # scores (from >= 3 problems) a "conformal_bound" stratum needs to stand on its own
PROBLEM_PREFIXES = ("p.", "s.")  # feature columns that describe the problem, not the candidate
MOSTLY_OOD = 0.5  # a problem whose share of candidates with ood > 1 exceeds this is unlike the training data


def conformal_cdf(scores: np.ndarray, t: np.ndarray) -> np.ndarray:
    """F(t) = (n F_n(t) + Phi(t)) / (n + 1): F_n the empirical CDF of the sorted `scores` (linear between order
    statistics at plotting positions (i + 0.5) / n), Phi one standard-normal pseudo-score."""
    from scipy.special import ndtr

    n = len(scores)
    t = np.asarray(t, float)
    if not n:
        return ndtr(t)
    fn = np.interp(t, scores, (np.arange(n) + 0.5) / n, left=0.0, right=1.0)
    return (n * fn + ndtr(t)) / (n + 1)


def lgb_params(seed: int, n_estimators: int, learning_rate: float) -> dict[str, Any]:
    return dict(n_estimators=n_estimators, learning_rate=learning_rate, num_leaves=31, min_child_samples=10,
                subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0, random_state=seed,
                verbose=-1, n_jobs=1)  # one thread: on 2 shared cores OpenMP spinning costs more than it gains


def _families(value: Any) -> list[str]:
    """The kernel families of a `kernel_families` cell ("conv+elementwise"; empty for none or unknown)."""
    return [f for f in value.split("+") if f] if isinstance(value, str) else []


def fit_sigma(res: np.ndarray, bag_sd: np.ndarray,
              alphas: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)) -> tuple[float, float]:
    """(a, b) of sigma = sqrt((a * bag sd)^2 + b^2) maximising the Gaussian likelihood of held-out residuals (a grid:
    a over `alphas`, b over 40 log-spaced values in [0.02, 3])."""
    best = (math.inf, 1.0, 0.5)
    for a in alphas:
        for b in np.geomspace(0.02, 3.0, 40):
            s2 = (a * bag_sd) ** 2 + b * b
            nll = float(np.mean(0.5 * np.log(s2) + 0.5 * res * res / s2))
            if nll < best[0]:
                best = (nll, a, float(b))
    return best[1:]


def offset_variances(residuals, groups) -> tuple[float, float] | None:
    """(between-group variance of the mean residual, pooled within-group variance) from held-out residuals grouped by
    problem (method of moments; None with fewer than 3 groups of 2 or more rows)."""
    df = pd.DataFrame({"r": np.asarray(residuals, float), "g": np.asarray(groups)})
    st = df.groupby("g")["r"].agg(["mean", "var", "count"])
    st = st[st["count"] >= 2]
    if len(st) < 3:
        return None
    within2 = float(np.average(st["var"], weights=st["count"] - 1))
    tau2 = max(float(st["mean"].var(ddof=1)) - float(np.mean(within2 / st["count"])), 0.0)
    return tau2, max(within2, 1e-6)


def relevance(y: np.ndarray, groups: np.ndarray, failed: np.ndarray, step: float = 0.1, levels: int = 31):
    """Lambdarank labels: levels-1 for a pool's best, one grade less per `step` log2 below it, 0 for a failure."""
    r = np.zeros(len(y), dtype=int)
    for q in np.unique(groups):
        m = (groups == q) & ~failed
        if m.any():
            r[m] = np.clip(np.round(levels - 1 - (y[m].max() - y[m]) / step), 0, levels - 1).astype(int)
    return r


def _transform(X: pd.DataFrame) -> np.ndarray:
    """Features on a log scale: columns already in log2 as they are, the others through sign(x) log2(1 + |x|)."""
    Z = X.to_numpy(float).copy()
    raw = np.array(["log2" not in c for c in X.columns])
    Z[:, raw] = np.sign(Z[:, raw]) * np.log2(1 + np.abs(Z[:, raw]))
    return Z


class IsotonicMap:
    """A non-decreasing map x -> E[y | x] fitted by isotonic regression, applied by linear interpolation."""

    def __init__(self, x, y, lo: float = 0.0, hi: float = 1.0):
        from scipy.optimize import isotonic_regression

        x, y = np.asarray(x, float), np.asarray(y, float)
        o = np.argsort(x, kind="stable")
        self.x = x[o]
        self.y = np.clip(isotonic_regression(y[o], increasing=True).x, lo, hi) if len(x) else np.array([])

    def __call__(self, x):
        if not len(self.x):
            return np.asarray(x, float)
        return np.interp(np.asarray(x, float), self.x, self.y)


class Distances:
    """How far rows lie from a training set, on `_transform`ed features standardised on it (the scale floored, so a
    column constant in training does not make every new value infinitely far):

    `excess` is the largest amount, over all columns, by which a row lies outside the training range, in scale
    units (a value where training saw none counts `UNSEEN`): 0 inside the box the training rows span.
    """

    UNSEEN = 4.0

    def __init__(self, X: pd.DataFrame):
        Z = _transform(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            self.center = np.nan_to_num(np.nanmean(Z, axis=0))
            self.scale = np.maximum(np.nan_to_num(np.nanstd(Z, axis=0)), 0.25)
            S = (Z - self.center) / self.scale
            self.lo, self.hi = np.nanmin(S, axis=0), np.nanmax(S, axis=0)

    def _s(self, X: pd.DataFrame) -> np.ndarray:
        return (_transform(X) - self.center) / self.scale

    def excess(self, X: pd.DataFrame) -> np.ndarray:
        S = self._s(X)
        with np.errstate(invalid="ignore"):
            out = np.maximum(np.maximum(S - self.hi, self.lo - S), 0.0)
        out = np.where(np.isnan(self.lo)[None, :] & ~np.isnan(S), self.UNSEEN, np.nan_to_num(out))
        return out.max(1) if out.shape[1] else np.zeros(len(S))


class _Core:
    """The fitted trees of one training set: relative regressor + ranker, absolute bag, failure classifier."""

    def __init__(self, X: pd.DataFrame, y, failed, groups, n_bags: int, n_estimators: int, learning_rate: float,
                 seed: int):
        try:
            import lightgbm as lgb
        except ImportError as e:
            raise ImportError("the learned surrogate needs LightGBM: pip install -e '.[surrogates]'") from e

        ok = ~failed
        if ok.sum() < 2:
            raise ValueError("need at least 2 candidates that were timed to train on")
        p = lambda s: lgb_params(seed + s, n_estimators, learning_rate)  # noqa: E731
        med = pd.Series(y[ok]).groupby(groups[ok]).transform("median").to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.relative = lgb.LGBMRegressor(**p(0)).fit(X[ok], y[ok] - med)
            order = np.argsort(groups, kind="stable")
            _, counts = np.unique(groups[order], return_counts=True)
            self.ranker = lgb.LGBMRanker(**p(1), objective="lambdarank", label_gain=list(range(64)),
                                         lambdarank_truncation_level=30).fit(
                X.iloc[order], relevance(y, groups, failed)[order], group=counts)
            rng = np.random.default_rng(seed)
            idx = np.nonzero(ok)[0]
            self.bag = [lgb.LGBMRegressor(**{**p(10 + b), "subsample": 1.0, "colsample_bytree": 0.7}).fit(
                X.iloc[boot], y[boot]) for b in range(n_bags) for boot in [rng.choice(idx, idx.size)]]
            n_fail = int(failed.sum())
            self.fail_const = (n_fail + 1) / (len(failed) + 2)
            self.classifier = None
            if 0 < n_fail < len(failed):
                self.classifier = lgb.LGBMClassifier(**p(2)).fit(X, failed.astype(int))
        r = self.ranker.predict(X)
        self.rank_scale = float(np.std(r)) or 1.0  # the ranker's scores, put on the relative model's scale
        self.rel_scale = float(np.std(y[ok] - med)) or 1.0

    def predict(self, X: pd.DataFrame) -> dict[str, np.ndarray]:
        rel = self.relative.predict(X)
        rank = self.ranker.predict(X) / self.rank_scale * self.rel_scale
        bag = np.stack([m.predict(X) for m in self.bag])
        pf = (self.classifier.predict_proba(X)[:, 1] if self.classifier is not None
              else np.full(len(X), self.fail_const))
        return {"rel": 0.5 * rel + 0.5 * rank, "mu": bag.mean(0), "bag_sd": bag.std(0), "p_fail": pf}


class LearnedSurrogate:
    name = "learned"

    def __init__(self, n_bags: int = 5, n_estimators: int = 250, learning_rate: float = 0.05, inner_folds: int = 4,
                 fail_penalty: float = 4.0, isotonic_new: bool = False, seed: int = 0,
                 ceilings: Mapping[str, Any] | None = None, compile_records: Mapping[str, Any] | None = None,
                 calibration: str = "gaussian"):
        if calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, not {calibration!r}")
        self.calibration = calibration
        self.n_bags, self.n_estimators, self.learning_rate = n_bags, n_estimators, learning_rate
        self.inner_folds, self.fail_penalty, self.seed = inner_folds, fail_penalty, seed
        self.isotonic_new = isotonic_new  # top-label isotonic for new problems too (off: see the module docstring)
        self.ceilings = dict(ceilings) if ceilings is not None else None
        self.compile_records = dict(compile_records or {})  # candidate hash -> compile StageRecord, for forecast()
        self.columns: list[str] = []
        self.core: _Core | None = None
        self.fit_seconds = math.nan
        self._problems: dict[str, dict[str, Any]] = {}
        self._observed: dict[str, list[float]] = {}  # problem key -> residuals (measured - mu) seen in a search
        self.offset_prior: tuple[float, float] | None = None  # (between-problem var, within-problem var) of residuals

    # ---- training ----
    def fit(self, table: pd.DataFrame) -> "LearnedSurrogate":
        """Train on a `features.training_table` (meta columns + features). Calibration comes from inner
        out-of-fold predictions of two kinds: whole training problems held out (what a new problem meets) and rows
        held out at random (what a known problem meets), so sigma learns how much a new problem adds."""
        t0 = time.perf_counter()
        self.columns = feature_columns(table)
        if not self.columns or not {"problem_key", "log2_speedup", "failed"} <= set(table.columns):
            raise ValueError("fit needs a features.training_table (problem_key, log2_speedup, failed + features)")
        X, y, failed, groups = self._xy(table)
        if (~failed).sum() < 2 * self.inner_folds:
            raise ValueError(f"too few timed candidates ({int((~failed).sum())}) to train and calibrate on")
        n_groups = len(set(groups))
        regimes = [np.random.default_rng(self.seed).permutation(np.arange(len(y)) % self.inner_folds)]
        if n_groups >= 3:
            regimes.insert(0, grouped_folds(groups, min(self.inner_folds, n_groups), self.seed))
        self.problem_columns = [c for c in self.columns if c.startswith(PROBLEM_PREFIXES)]
        strata = self._strata(X)
        cal = []
        for r, folds in enumerate(regimes):
            for f in np.unique(folds):
                tr, te = folds != f, folds == f
                if (~failed[tr]).sum() < 2:
                    continue
                core = _Core(X[tr], y[tr], failed[tr], groups[tr], self.n_bags, self.n_estimators,
                             self.learning_rate, self.seed)
                dist = Distances(X[tr])
                part = core.predict(X[te])
                part.update(excess=dist.excess(X[te]), y=y[te], failed=failed[te], group=groups[te],
                            new_problem=np.full(int(te.sum()), r == 0 and n_groups >= 3), stratum=strata[te],
                            p_excess=Distances(X.loc[tr, self.problem_columns]).excess(
                                X.loc[te, self.problem_columns]))
                cal.append(part)
        cal = {k: np.concatenate([c[k] for c in cal]) for k in cal[0]}
        self._calibrate(cal)
        self._keep_validation(cal)
        self.core = _Core(X, y, failed, groups, self.n_bags, self.n_estimators, self.learning_rate, self.seed)
        self.distances = Distances(X)
        self.prior = (np.bincount(to_bin(y, failed), minlength=N_OUT) + 1.0) / (len(y) + N_OUT)
        self.n_train, self.train_problems = len(y), sorted(set(groups))
        self.problem_distances = Distances(X[self.problem_columns])
        self.train_families = (sorted({f for v in table["kernel_families"] for f in _families(v)})
                               if "kernel_families" in table.columns else None)
        self.fit_seconds = time.perf_counter() - t0
        return self

    def _strata(self, X: pd.DataFrame) -> np.ndarray:
        """The "conformal_bound" stratum of each row: 1 for a compute-bound problem, else 0."""
        if "p.compute_bound" not in X.columns:
            return np.zeros(len(X), int)
        return (X["p.compute_bound"].to_numpy(float) == 1).astype(int)

    def _xy(self, table: pd.DataFrame):
        X = table[self.columns].astype(float)
        return (X, table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool),
                table["problem_key"].to_numpy())

    def _calibrate(self, cal: dict[str, np.ndarray]) -> None:
        """Per regime ("new": rows of problems held out, "known": rows held out at random), sigma =
        sqrt((a * bag sd)^2 + b^2) with (a, b) maximising the Gaussian likelihood of the out-of-fold residuals; for
        known problems also a top-label isotonic map. p_fail through isotonic regression; the OOD scales from the
        new-problem distances."""
        y, failed, new = cal["y"], cal["failed"], cal["new_problem"]
        n = len(y)
        # floored/capped by a pseudo-count: a few thousand rows never justify certainty
        self.fail_map = IsotonicMap(cal["p_fail"], failed.astype(float), lo=0.5 / n, hi=1 - 0.5 / n)
        self.sigma_ab: dict[str, tuple[float, float]] = {}
        for regime, rows in (("known", ~new), ("new", new if new.any() else ~new)):
            ok = rows & ~failed
            self.sigma_ab[regime] = fit_sigma(y[ok] - cal["mu"][ok], cal["bag_sd"][ok])
        self.conf_maps: dict[str, IsotonicMap] = {}
        for regime, rows in (("known", ~new), ("new", new)):
            if not rows.any() or (regime == "new" and not self.isotonic_new):
                continue
            probs = self._probs(cal["mu"][rows], self._sigma(cal["bag_sd"][rows], np.full(int(rows.sum()),
                                                                                          regime == "known")),
                                self.fail_map(cal["p_fail"][rows]))
            right = probs.argmax(1) == to_bin(y[rows], failed[rows])
            self.conf_maps[regime] = IsotonicMap(probs.max(1), right.astype(float), lo=0.0,
                                                 hi=1 - 2.0 / max(int(rows.sum()), 4))
        self._calibrate_conformal(cal)
        # how a new problem's residuals split into one shared offset and the rest: what `observe` shrinks towards
        if new.any():
            self.offset_prior = offset_variances(y[new & ~failed] - cal["mu"][new & ~failed],
                                                 cal["group"][new & ~failed])
            if self.offset_prior is not None:
                self._calibrate_observed(cal)
        # the OOD unit: the range excess that 95 % of held-out training problems stay within (at least 1 scale)
        self.excess_ref = max(float(np.quantile(cal["excess"][new], 0.95)) if new.any() else 1.0, 1.0)
        # ... and, over the problem columns only, per held-out problem (each problem's rows share the value)
        if new.any():
            per = pd.Series(cal["p_excess"][new]).groupby(cal["group"][new]).max()
            self.problem_excess_ref = max(float(np.quantile(per.to_numpy(), 0.95)), 1.0)
        else:
            self.problem_excess_ref = 1.0

    def _conformal_scores(self, z: np.ndarray, strata: np.ndarray, groups: np.ndarray) -> dict[Any, np.ndarray]:
        """{None: every score sorted, stratum: that stratum's sorted scores where it has enough of its own}."""
        out: dict[Any, np.ndarray] = {None: np.sort(z)}
        for st in np.unique(strata):
            m = strata == st
            if m.sum() >= MIN_STRATUM and len(set(groups[m])) >= 3:
                out[int(st)] = np.sort(z[m])
        return out

    def _calibrate_conformal(self, cal: dict[str, np.ndarray]) -> None:
        """Per conformal mode: the regimes' standardised residuals ("known", "new"; "observed" in
        `_calibrate_observed`), the top-label maps refitted on that mode's probabilities, and the validation
        forecasts of held-out problems (what `tau` reads)."""
        y, failed, new = cal["y"], cal["failed"], cal["new_problem"]
        self.conformal: dict[str, dict[str, Any]] = {}
        for mode in CALIBRATIONS[1:]:
            scores: dict[str, dict[Any, np.ndarray]] = {}
            for regime, rows in (("known", ~new), ("new", new if new.any() else ~new)):
                ok = rows & ~failed
                sig = self._sigma(cal["bag_sd"][ok], np.full(int(ok.sum()), regime == "known"))
                z = (y[ok] - cal["mu"][ok]) / sig
                st = cal["stratum"][ok] if mode == "conformal_bound" else np.zeros(int(ok.sum()), int)
                scores[regime] = self._conformal_scores(z, st, cal["group"][ok])
            self.conformal[mode] = {"scores": scores, "maps": {}}
            for regime, rows in (("known", ~new), ("new", new)):
                if not rows.any() or (regime == "new" and not self.isotonic_new):
                    continue
                probs = self._bin_probs(cal["mu"][rows], self._sigma(cal["bag_sd"][rows], np.full(
                    int(rows.sum()), regime == "known")), self.fail_map(cal["p_fail"][rows]), regime,
                    cal["stratum"][rows], mode)
                right = probs.argmax(1) == to_bin(y[rows], failed[rows])
                self.conformal[mode]["maps"][regime] = IsotonicMap(probs.max(1), right.astype(float), lo=0.0,
                                                                   hi=1 - 2.0 / max(int(rows.sum()), 4))

    def _bin_probs(self, mu, sigma, p_fail, regime: str, strata=None, mode: str | None = None) -> np.ndarray:
        """(n, 9) probabilities of rows of one regime under a calibration mode (default: this surrogate's)."""
        mode = mode or getattr(self, "calibration", "gaussian")
        if mode == "gaussian":
            return self._probs(mu, sigma, p_fail)
        scores = self.conformal[mode]["scores"].get(regime) or self.conformal[mode]["scores"]["new"]
        mu, sigma, p_fail = (np.asarray(v, float) for v in (mu, sigma, p_fail))
        strata = np.zeros(len(mu), int) if strata is None or mode != "conformal_bound" else np.asarray(strata)
        cdf = np.empty((len(mu), len(EDGES)))
        for st in np.unique(strata):
            m = strata == st
            sc = scores.get(int(st), scores[None])
            cdf[m] = conformal_cdf(sc, (np.asarray(EDGES)[None, :] - mu[m, None]) / sigma[m, None])
        cdf = np.hstack([np.zeros((len(mu), 1)), cdf, np.ones((len(mu), 1))])
        return np.hstack([np.clip(np.diff(cdf, axis=1), 0.0, None) * (1 - p_fail)[:, None], p_fail[:, None]])

    def _maps(self) -> dict[str, "IsotonicMap"]:
        mode = getattr(self, "calibration", "gaussian")
        return self.conf_maps if mode == "gaussian" else self.conformal[mode]["maps"]

    def with_calibration(self, mode: str) -> "LearnedSurrogate":
        """This trained surrogate answering in another calibration mode (a shallow copy: the models are shared)."""
        if mode not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, not {mode!r}")
        if mode != "gaussian" and mode not in getattr(self, "conformal", {}):
            raise ValueError(f"this surrogate was trained without {mode!r} calibration: retrain it")
        out = copy.copy(self)
        out.calibration = mode
        out._observed = {k: list(v) for k, v in getattr(self, "_observed", {}).items()}
        return out

    def _calibrate_observed(self, cal: dict[str, np.ndarray]) -> None:
        """The "observed" regime: a new problem after some of its candidates were measured. Simulated on the held-out
        training problems: each row's offset is estimated from n other timed rows of its problem (shrunk as
        `observe` does); sigma's (a, b) are fitted to the residuals so corrected at n = OBSERVE_SIM, and a top-label
        isotonic map to whether the corrected forecast's argmax was right, pooled over n in OBSERVE_MAP (the offset
        removed, the remaining errors are far more independent than raw new-problem ones, so the map has enough of
        them to learn from)."""
        tau2, within2 = self.offset_prior
        rng = np.random.default_rng(self.seed)
        new, failed, y, mu = cal["new_problem"], cal["failed"], cal["y"], cal["mu"]
        all_rows = np.nonzero(new)[0]

        def simulate(n: int):
            shrink = n * tau2 / (n * tau2 + within2)
            offset = np.full(len(all_rows), np.nan)
            for g in np.unique(cal["group"][all_rows]):
                members = all_rows[cal["group"][all_rows] == g]
                timed = members[~failed[members]]
                if len(timed) <= n:
                    continue
                res = y[timed] - mu[timed]
                for i in members:
                    others = np.nonzero(timed != i)[0]
                    pick = rng.choice(others, size=n, replace=False)
                    offset[np.searchsorted(all_rows, i)] = shrink * float(res[pick].mean())
            ok = ~np.isnan(offset)
            return all_rows[ok], offset[ok]

        rows, offset = simulate(OBSERVE_SIM)
        if len(rows) < 50:
            return
        mu_c, sd, ff = mu[rows] + offset, cal["bag_sd"][rows], failed[rows]
        self.sigma_ab["observed"] = fit_sigma(y[rows][~ff] - mu_c[~ff], sd[~ff], alphas=(0.0, 0.5, 1.0, 2.0, 4.0))
        z = (y[rows][~ff] - mu_c[~ff]) / self._sigma_observed(sd[~ff], OBSERVE_SIM)
        for mode in CALIBRATIONS[1:]:
            st = cal["stratum"][rows][~ff] if mode == "conformal_bound" else np.zeros(int((~ff).sum()), int)
            self.conformal[mode]["scores"]["observed"] = self._conformal_scores(z, st, cal["group"][rows][~ff])
        sims = [(n, *simulate(n)) for n in OBSERVE_MAP]
        for mode in CALIBRATIONS:
            top, right = [], []
            for n, rows, offset in sims:
                probs = self._bin_probs(mu[rows] + offset, self._sigma_observed(cal["bag_sd"][rows], n),
                                        self.fail_map(cal["p_fail"][rows]), "observed", cal["stratum"][rows], mode)
                top.append(probs.max(1))
                right.append(probs.argmax(1) == to_bin(y[rows], failed[rows]))
            top, right = np.concatenate(top), np.concatenate(right)
            m = IsotonicMap(top, right.astype(float), lo=0.0, hi=1 - 2.0 / max(len(top), 4))
            (self.conf_maps if mode == "gaussian" else self.conformal[mode]["maps"])["observed"] = m

    def _sigma_observed(self, bag_sd, n: int) -> np.ndarray:
        """sigma after n observed candidates: the simulated regime's width, with the offset's posterior variance
        for n in place of the one for OBSERVE_SIM it was fitted with."""
        a, b = self.sigma_ab["observed"]
        tau2, within2 = self.offset_prior
        left = lambda k: tau2 * within2 / (k * tau2 + within2)  # noqa: E731
        return np.sqrt(np.maximum((a * bag_sd) ** 2 + b * b + left(n) - left(OBSERVE_SIM), 1e-6))

    def _keep_validation(self, cal: dict[str, np.ndarray]) -> None:
        """Confidence and 0/1 bin error of the calibrated held-out forecasts for problems held out of training (the
        "new" regime; rows held out at random when there were too few problems): the risk-coverage data that
        `tau()` reads."""
        new = cal["new_problem"] if cal["new_problem"].any() else ~cal["new_problem"]
        known = np.zeros(int(new.sum()), bool)
        active = getattr(self, "calibration", "gaussian")
        try:
            for mode in CALIBRATIONS:
                self.calibration = mode
                probs = self._bin_probs(cal["mu"][new], self._sigma(cal["bag_sd"][new], known),
                                        self.fail_map(cal["p_fail"][new]), "new", cal["stratum"][new])
                probs = self._recalibrate(probs, ~known, "new")
                v = {"confidence": probs.max(1),
                     "wrong": (probs.argmax(1) != to_bin(cal["y"][new], cal["failed"][new])).astype(float)}
                if mode == "gaussian":
                    self.validation = v
                else:
                    self.conformal[mode]["validation"] = v
        finally:
            self.calibration = active

    def tau(self, max_risk: float = 0.3) -> float:
        """The selective policy's threshold, from the risk-coverage curve of held-out-problem forecasts: the lowest
        confidence whose accepted forecasts have a bin-error rate <= max_risk (+inf: defer everything)."""
        mode = getattr(self, "calibration", "gaussian")
        v = getattr(self, "validation", None) if mode == "gaussian" else self.conformal[mode].get("validation")
        if v is None:
            raise ValueError("this surrogate kept no validation forecasts: retrain it to derive tau")
        return float(threshold_for_risk(v["confidence"], v["wrong"], max_risk))

    # ---- measurements seen during a search ----
    def observe(self, table: pd.DataFrame, log2_speedup) -> None:
        """Measured log2 speedups of candidates (rows of a features table with `problem_key`). On a problem the
        surrogate was not trained on, most of its error is one offset shared by all the problem's candidates (how
        fast eager is there); later forecasts for that problem move mu by the measured residuals' mean, shrunk
        towards 0 by how much offsets vary between training problems (`offset_prior`, a normal-normal posterior),
        and sigma drops from the new-problem width to what is left once the offset is known. The ranking score is
        unchanged. Training problems' rows and failed or missing measurements are ignored."""
        if self.core is None:
            raise ValueError("the surrogate is not trained: call fit() or LearnedSurrogate.load()")
        y = np.asarray(log2_speedup, float)
        if len(y) != len(table):
            raise ValueError(f"{len(y)} measurements for {len(table)} rows")
        mu = self.core.predict(table.reindex(columns=self.columns).astype(float))["mu"]
        for key, res in zip(table["problem_key"], y - mu):
            if np.isfinite(res) and key not in self.train_problems:
                self._observed.setdefault(key, []).append(float(res))

    def observe_candidates(self, problem: Problem, candidates: list[Candidate], log2_speedup) -> None:
        """`observe` for live candidates (compile facts from `self.compile_records`)."""
        if candidates:
            self.observe(self._live_features(problem, candidates), log2_speedup)

    def add_compile_records(self, records: Mapping[str, Any]) -> None:
        """Compile records (candidate hash -> compile StageRecord) for `forecast`, e.g. a search's compile-ahead."""
        self.compile_records.update(records)

    def forget(self, problem_key: str | None = None) -> None:
        """Drop what `observe` learnt (for one problem, or all)."""
        if problem_key is None:
            self._observed.clear()
        else:
            self._observed.pop(problem_key, None)

    def _apply_observed(self, keys: np.ndarray, known: np.ndarray, mu: np.ndarray, sigma: np.ndarray,
                        bag_sd: np.ndarray) -> np.ndarray:
        """Shift mu and set sigma in place for rows of problems with observed measurements (see `observe`); the
        mask of those rows (their forecasts take the "observed" regime's top-label map)."""
        rows_seen = np.zeros(len(keys), bool)
        prior = getattr(self, "offset_prior", None)
        if not getattr(self, "_observed", None) or prior is None or "observed" not in self.sigma_ab:
            return rows_seen
        tau2, within2 = prior
        for key, res in self._observed.items():
            rows = (keys == key) & ~known
            if not rows.any():
                continue
            n = len(res)
            mu[rows] += n * tau2 / (n * tau2 + within2) * float(np.mean(res))
            sigma[rows] = self._sigma_observed(bag_sd[rows], n)
            rows_seen |= rows
        return rows_seen

    # ---- prediction ----
    def _sigma(self, bag_sd, known):
        """sigma of each row: the "known" regime's where the problem is a training problem, else the "new" one's."""
        (ak, bk), (an, bn) = self.sigma_ab["known"], self.sigma_ab["new"]
        return np.where(known, np.sqrt((ak * bag_sd) ** 2 + bk ** 2), np.sqrt((an * bag_sd) ** 2 + bn ** 2))

    def _recalibrate(self, probs: np.ndarray, rows: np.ndarray, regime: str) -> np.ndarray:
        """Top-label calibration of `rows`: the argmax's probability through the regime's map, the others rescaled
        to fill the rest, never so low that another outcome overtakes the argmax."""
        out = probs.copy()
        idx = np.nonzero(rows)[0]
        maps = self._maps()
        if not idx.size or regime not in maps:
            return out
        top = probs[idx].argmax(1)
        p = probs[idx, top]
        second = np.sort(probs[idx], axis=1)[:, -2]
        new = np.clip(maps[regime](p), second / np.maximum(1 - p + second, 1e-12), 1.0)
        rest = np.where(p < 1, (1 - new) / np.maximum(1 - p, 1e-12), 0.0)
        out[idx] *= rest[:, None]
        out[idx, top] = new
        out[idx] /= out[idx].sum(1, keepdims=True)
        return out

    @staticmethod
    def _probs(mu, sigma, p_fail) -> np.ndarray:
        """(n, 9): the Gaussian's mass in each speedup bin times (1 - p_fail), then p_fail (`from_log2`, batched)."""
        from scipy.special import ndtr

        mu, sigma, p_fail = (np.asarray(v, float) for v in (mu, sigma, p_fail))
        cdf = ndtr((np.asarray(EDGES)[None, :] - mu[:, None]) / sigma[:, None])
        cdf = np.hstack([np.zeros((len(mu), 1)), cdf, np.ones((len(mu), 1))])
        return np.hstack([np.diff(cdf, axis=1) * (1 - p_fail)[:, None], p_fail[:, None]])

    def predict_frame(self, table: pd.DataFrame) -> pd.DataFrame:
        """Per row: score (within-problem order, higher first), mu, sigma, p_fail, ood, problem_ood, unlike (the
        row's problem is unlike the training data: `novelty`), confidence and p0..p8."""
        if self.core is None:
            raise ValueError("the surrogate is not trained: call fit() or LearnedSurrogate.load()")
        X = table.reindex(columns=self.columns).astype(float)
        raw = self.core.predict(X)
        known = (table["problem_key"].isin(self.train_problems).to_numpy() if "problem_key" in table.columns
                 else np.zeros(len(table), bool))
        sigma = self._sigma(raw["bag_sd"], known)
        mu = np.array(raw["mu"], float)
        seen = (self._apply_observed(table["problem_key"].to_numpy(), known, mu, sigma, raw["bag_sd"])
                if "problem_key" in table.columns else np.zeros(len(table), bool))
        pf = np.clip(self.fail_map(raw["p_fail"]), 0.0, 1.0)
        ood = self.distances.excess(X) / self.excess_ref
        strata = self._strata(X)
        probs = np.empty((len(X), N_OUT))
        for regime, rows in (("known", known), ("observed", seen), ("new", ~known & ~seen)):
            if rows.any():
                probs[rows] = self._bin_probs(mu[rows], sigma[rows], pf[rows], regime, strata[rows])
        probs = self._recalibrate(probs, known, "known")
        probs = self._recalibrate(probs, seen, "observed")
        probs = self._recalibrate(probs, ~known & ~seen, "new")
        w = 1 - np.exp(-np.maximum(ood - 1, 0))  # beyond anything calibration saw: towards the training frequencies
        probs = (1 - w)[:, None] * probs + w[:, None] * self.prior[None, :]
        nov = self._novelty_rows(table, X, ood)
        out = pd.DataFrame({"score": raw["rel"] - self.fail_penalty * pf, "mu": mu, "sigma": sigma,
                            "p_fail": pf, "ood": ood, "problem_ood": nov["problem_ood"], "unlike": nov["unlike"],
                            "confidence": probs.max(1)}, index=table.index)
        for i in range(N_OUT):
            out[f"p{i}"] = probs[:, i]
        out["novelty"] = nov["why"]
        return out

    # ---- novelty of a whole problem ----
    def _novelty_rows(self, table: pd.DataFrame, X: pd.DataFrame, ood: np.ndarray) -> dict[str, np.ndarray]:
        """Per row, its problem's problem_ood, unlike flag and the reason (see the module docstring)."""
        n = len(X)
        pd_ = getattr(self, "problem_distances", None)
        if pd_ is None:  # saved before novelty existed: the row-level check only
            return {"problem_ood": np.zeros(n), "unlike": ood > 1, "why": np.where(ood > 1, "candidate ood > 1", "")}
        P = X[self.problem_columns]
        S = pd_._s(P)
        with np.errstate(invalid="ignore"):
            ex = np.maximum(np.maximum(S - pd_.hi, pd_.lo - S), 0.0)
        ex = np.where(np.isnan(pd_.lo)[None, :] & ~np.isnan(S), Distances.UNSEEN, np.nan_to_num(ex))
        p_ood = (ex.max(1) if ex.shape[1] else np.zeros(n)) / self.problem_excess_ref
        worst = ex.argmax(1) if ex.shape[1] else np.zeros(n, int)
        keys = table["problem_key"].to_numpy() if "problem_key" in table.columns else np.arange(n)
        fams = (table["kernel_families"].to_numpy() if "kernel_families" in table.columns
                else np.full(n, None, object))
        train_fams = set(self.train_families) if getattr(self, "train_families", None) is not None else None
        p_out, unlike, why = np.zeros(n), np.zeros(n, bool), np.full(n, "", object)
        for key in pd.unique(keys):
            m = keys == key
            reasons = []
            po = float(p_ood[m].max())
            if po > 1:
                i = np.nonzero(m)[0][int(p_ood[m].argmax())]
                reasons.append(f"{self.problem_columns[worst[i]]} lies {ex[i, worst[i]]:.1f} scale units outside the "
                               f"training problems' range (problem ood {po:.2f})")
            if train_fams is not None:
                unseen = sorted({f for v in fams[m] for f in _families(v)} - train_fams)
                if unseen:
                    reasons.append(f"kernel famil{'ies' if len(unseen) > 1 else 'y'} {', '.join(unseen)} never seen "
                                   "in training")
            share = float((ood[m] > 1).mean())
            if share > MOSTLY_OOD:
                reasons.append(f"{share:.0%} of its candidates lie outside the training candidates' range")
            p_out[m], unlike[m], why[m] = po, bool(reasons), "; ".join(reasons)
        return {"problem_ood": p_out, "unlike": unlike, "why": why}

    def novelty(self, table: pd.DataFrame) -> pd.DataFrame:
        """One row per problem of a features table: problem_ood (problem columns' range excess in units of what 95 %
        of held-out training problems stay within), the share of its candidates with ood > 1, `unlike` (unlike the
        training data: problem_ood > 1, a kernel family no training candidate used, or most candidates out of range)
        and `why`, the reason in words."""
        pred = self.predict_frame(table)
        keys = table["problem_key"] if "problem_key" in table.columns else pd.Series("?", index=table.index)
        df = pd.DataFrame({"problem_key": keys.to_numpy(), "problem_ood": pred["problem_ood"].to_numpy(),
                           "ood": pred["ood"].to_numpy(), "unlike": pred["unlike"].to_numpy(),
                           "why": pred["novelty"].to_numpy()})
        return df.groupby("problem_key", sort=True).agg(
            problem_ood=("problem_ood", "max"), candidates=("ood", "size"),
            ood_share=("ood", lambda v: float((v > 1).mean())), unlike=("unlike", "max"),
            why=("why", "first")).reset_index()

    def forecasts_from_frame(self, pred: pd.DataFrame) -> list[Forecast]:
        out = []
        for _, r in pred.iterrows():
            unlike = bool(r.get("unlike", False))
            why = str(r.get("novelty", "") or "")
            out.append(SurrogateForecast(
                tuple(r[f"p{i}"] for i in range(N_OUT)),
                reasoning=f"learned: mu {r['mu']:+.2f} log2, sigma {r['sigma']:.2f}, p_fail {r['p_fail']:.2f}, ood "
                          f"{r['ood']:.2f}, score {r['score']:+.2f}" + (f"; unlike the training data: {why}"
                                                                        if unlike else ""),
                ood=float(max(r["ood"], r.get("problem_ood", 0.0))), unlike=unlike))
        return out

    def forecast_frame(self, problem: Problem, candidates: list[Candidate]) -> pd.DataFrame:
        """`predict_frame` for live candidates (the point estimate mu and the ranking score next to the 9
        probabilities); compile facts from `self.compile_records` when the search has filled them."""
        return self.predict_frame(self._live_features(problem, candidates))

    def _live_features(self, problem: Problem, candidates: list[Candidate]) -> pd.DataFrame:
        ceil = self.ceilings if self.ceilings is not None else default_ceilings()
        if problem.key not in self._problems:
            self._problems[problem.key] = live_problem_info(problem, ceil)
        X = features_from_live(self._problems[problem.key], candidates, self.compile_records, ceil)
        X["problem_key"] = problem.key
        return X

    def forecast(self, problem: Problem, candidates: list[Candidate], anchor: str = "eager") -> list[Forecast]:
        """One Forecast per candidate vs eager (the `Surrogate` protocol); mu and the score are in its reasoning."""
        if anchor != "eager":
            raise ValueError(f"LearnedSurrogate forecasts against the eager anchor only, not {anchor!r}")
        if not candidates:
            return []
        return self.forecasts_from_frame(self.forecast_frame(problem, candidates))

    # ---- persistence ----
    def save(self, path: str | Path) -> Path:
        """Pickle the trained state (models, calibration, training ranges), not the per-search caches."""
        if self.core is None:
            raise ValueError("nothing to save: the surrogate is not trained")
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        state = {k: v for k, v in self.__dict__.items() if k not in ("_problems", "compile_records", "_observed")}
        p.write_bytes(pickle.dumps({"format": FORMAT, "class": "LearnedSurrogate", "state": state}))
        return p

    @classmethod
    def load(cls, path: str | Path) -> "LearnedSurrogate":
        """A surrogate saved by `save` (a pickle: load only files you made or trust)."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"no trained surrogate at {p} (train one: workbench surrogate train --out {p})")
        blob = pickle.loads(p.read_bytes())
        if not isinstance(blob, dict) or blob.get("class") != "LearnedSurrogate" or blob.get("format") != FORMAT:
            raise ValueError(f"{p} is not a LearnedSurrogate saved by this version (format {FORMAT})")
        obj = cls.__new__(cls)
        obj.__dict__.update(blob["state"])
        obj._problems, obj.compile_records, obj._observed = {}, {}, {}
        return obj
