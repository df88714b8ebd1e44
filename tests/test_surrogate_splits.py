"""Splits that match use (held-out problem / family / level), bootstrap intervals over problems, the headroom metric,
conformal calibration, and the novelty check that makes the selective policy defer. Small synthetic data; the
learned surrogate only on the small fixture with few trees."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.metrics import bootstrap_mean, bootstrap_statistic, group_draws, headroom_share, percentile_interval
from workbench.surrogates.baselines import OracleBaseline, PriorBaseline
from workbench.surrogates.evaluate import (
    budget_metrics,
    confidence_intervals,
    default_rows,
    evaluate,
    per_problem_values,
    subsample,
)
from workbench.surrogates.forecast import SurrogateForecast
from workbench.surrogates.selective import DEFER, EXPLORE, MEASURE, SKIP, SelectivePolicy
from workbench.surrogates.splits import (
    candidate_family,
    kernel_family,
    problem_level,
    problem_levels,
    split_folds,
)

DATA = Path(__file__).parent / "fixtures" / "dataset_small"


def synthetic(groups: dict[str, tuple[str, str]], n: int = 6, seed: int = 0) -> pd.DataFrame:
    """n timed rows per problem: problem -> (family, level); log2 speedups 0, 0.1, ... (the first the default)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p, (fam, lev) in groups.items():
        for i in range(n):
            rows.append({"problem": p, "problem_key": f"{p}@0", "family": fam, "level": lev, "failed": False,
                         "log2_speedup": 0.1 * i + 0.01 * rng.random(), "noise_sd": 0.01})
    return pd.DataFrame(rows)


# ---- families and levels from what the rows carry ----

def test_kernel_family_longest_registry_name_wins():
    assert kernel_family("_g0_conv_transpose_kernel") == ("g0", "conv_transpose")
    assert kernel_family("_g2_conv_gemm_kernel") == ("g2", "conv")
    assert kernel_family("_g1_reduce_nd_kernel") == ("g1", "reduce_nd")
    assert kernel_family("_g0_row_kernel") == ("g0", "row")
    assert kernel_family("_g0_unheardof_kernel") is None and kernel_family("matmul") is None


def test_candidate_family_is_the_dominant_group():
    conv = {"configs": {"g0": {"ALGO": "gemm"}, "g1": {"BLOCK": 1024, "PERSISTENT_WAVES": 0}}}
    kernels = [{"kernel": "_g0_conv_kernel"}, {"kernel": "_g1_elementwise_kernel"}]
    assert candidate_family(conv, kernels) == "conv"  # a convolution outranks its epilogue
    gemm = {"configs": {"g0": {"BM": 64, "BN": 64, "BK": 32}, "g1": {"BLOCK": 1024, "PERSISTENT_WAVES": 0}}}
    assert candidate_family(gemm, []) == "gemm"  # config keys when no kernel names the group
    assert candidate_family({"configs": {"g0": {"X": 1}}}, []) is None


def test_problem_level_rules_in_order():
    kb = {"19_ReLU": ("level1",), "1_MLP": ("level3",), "1_Conv": ("level1", "level2")}
    lv = lambda name, **kw: problem_level(name, kernelbench=kb, builtins=["layernorm"], **kw)  # noqa: E731
    assert lv("19_ReLU", recorded=2) == "level2"  # a recorded level wins
    assert lv("19_ReLU", recorded="level3") == "level3"
    assert lv("level2/19_ReLU") == "level2" and lv("level1__x") == "level1"  # a level in the name
    assert lv("layernorm") == "builtin" and lv("anything", key_matches_builtin=True) == "builtin"
    assert lv("19_ReLU") == "level1" and lv("1_MLP") == "level3"  # the KernelBench checkout's file stems
    assert lv("1_Conv") == "unknown"  # a stem in two levels says nothing
    assert lv("my_problem") == "unknown"


def test_problem_levels_read_a_level_column_of_problems_parquet():
    cands = pd.DataFrame({"problem": ["a", "a", "b"], "problem_key": ["a@1", "a@1", "b@1"]})
    probs = pd.DataFrame({"problem_key": ["a@1", "b@1"], "level": [1, None],
                          "key_matches_builtin": [False, True]})
    got = problem_levels(cands, probs, kernelbench={}, builtins=[])
    assert got.to_dict() == {"a@1": "level1", "b@1": "builtin"}


def test_family_and_level_folds():
    t = synthetic({"p1": ("gemm", "level1"), "p2": ("gemm", "level2"), "p3": ("row", "level1"),
                   "p4": ("row", "builtin"), "p5": ("row", "unknown")})
    fam = split_folds(t, "family")
    assert set(fam[t["family"] == "gemm"]) == {0} and set(fam[t["family"] == "row"]) == {1}
    lev = split_folds(t, "level")
    by = pd.Series(lev).groupby(t["level"].to_numpy()).agg(set).to_dict()
    assert by == {"builtin": {0}, "level1": {1}, "level2": {2}, "unknown": {-1}}  # unknown: trained on, never held out
    prob = split_folds(t, "problem", k=5)
    assert all(len(set(prob[t["problem"] == p])) == 1 for p in t["problem"].unique()) and len(set(prob)) == 5


def test_a_split_with_one_group_fails_naming_it():
    t = synthetic({"p1": ("gemm", "builtin"), "p2": ("row", "builtin"), "p3": ("row", "unknown")})
    with pytest.raises(ValueError, match=r"at least 2 KernelBench levels.*only builtin \(2 problems\), unknown "
                                         r"\(1 problem\)"):
        split_folds(t, "level")
    with pytest.raises(ValueError, match=r"at least 2 kernel families.*only gemm \(3 problems\)"):
        split_folds(t.assign(family="gemm"), "family")
    with pytest.raises(ValueError, match="at least 2 problems"):
        split_folds(t[t["problem"] == "p1"], "problem")
    with pytest.raises(ValueError, match="split must be"):
        split_folds(t, "by-colour")


def test_evaluate_scores_held_out_groups_only():
    t = synthetic({"p1": ("gemm", "level1"), "p2": ("gemm", "level2"), "p3": ("row", "level1"),
                   "p4": ("row", "unknown")})
    res = evaluate(t, "level", {"oracle": OracleBaseline, "prior": lambda: PriorBaseline(0)})
    o = res["oracle"]
    assert o["n_problems"] == 3 and o["n_rows"] == 18 and o["train_only_rows"] == 6 and o["folds"] == 2
    assert set(o["per_group"]) == {"level1", "level2"} and o["per_group"]["level1"]["n_problems"] == 2
    assert o["pairwise_accuracy"] == 1.0 and o["top10_headroom"] == 1.0


# ---- the headroom metric ----

def test_headroom_share_by_hand():
    speed = [1.0, 2.0, 4.0, 1.5]  # the default (position 0) at 1x, the best at 4x: 2 log2 of headroom
    assert headroom_share([0, 9, 1, 2], speed, default=0, k=1) == pytest.approx(0.5)  # finds 2x: 1 of 2 log2
    assert headroom_share([0, 1, 9, 2], speed, default=0, k=1) == pytest.approx(1.0)
    assert headroom_share([0, 1, 2, 9], speed, default=0, k=1) == pytest.approx(math.log2(1.5) / 2)
    assert headroom_share([0, 9, 1, 2], speed, default=0, k=2) == pytest.approx(0.5)  # 2x and 1.5x
    assert headroom_share([9, 0, 1, 2], [2.0, 1.0, 4.0, 1.5], default=0, k=1) == 0.0  # the default itself
    assert headroom_share([0, 9, 1, 2], [2.0, 1.0, 4.0, 1.5], default=0, k=1) == 0.0  # slower than the default
    assert headroom_share([0, 9, 1, 2], [2.0, np.nan, 4.0, 1.5], default=0, k=1) == 0.0  # a failure finds nothing
    assert math.isnan(headroom_share([0, 1], [np.nan, 2.0], default=0, k=1))  # the default failed
    assert math.isnan(headroom_share([0, 1], [1.0, 1.01], default=0, k=1, noise=0.05))  # no headroom beyond noise
    with pytest.raises(ValueError):
        headroom_share([0, 1], [1.0, 2.0], default=5, k=1)


def test_headroom_in_budget_metrics_uses_the_default_row():
    t = synthetic({"p1": ("gemm", "builtin"), "p2": ("row", "builtin")}, n=10)
    assert list(default_rows(t)) == [0, 10]  # the first row of each problem
    score = np.zeros(len(t))
    score[[3, 19]] = 1.0  # p1: the 4th candidate (0.3 of 0.9 log2), p2: its best
    pred = pd.DataFrame({"score": score}, index=t.index)
    m = budget_metrics(t, pred)
    y = t["log2_speedup"].to_numpy()
    p1 = (y[3] - y[0]) / (y[9] - y[0])
    assert m["top10_headroom"] == pytest.approx((p1 + 1.0) / 2) and m["headroom_problems"] == 2
    # a `default` column moves the default: p1's default is now its best row, so p1 has no headroom
    m2 = budget_metrics(t.assign(default=t.index == 9), pred)
    assert m2["headroom_problems"] == 1 and m2["top10_headroom"] == pytest.approx(1.0)


def test_subsample_keeps_the_default_row_and_is_seeded():
    t = synthetic({"p1": ("gemm", "builtin"), "p2": ("row", "builtin")}, n=10)
    a, b = subsample(t, 4, seed=3), subsample(t, 4, seed=3)
    assert a.index.equals(b.index) and len(a) == 8 and {0, 10} <= set(a.index)
    assert not subsample(t, 4, seed=4).index.equals(a.index)


# ---- confidence intervals over problems ----

def test_bootstrap_pieces_by_hand():
    d = group_draws(3, n_boot=4, seed=1)
    assert d.shape == (4, 3) and (d == group_draws(3, n_boot=4, seed=1)).all()
    vals = np.array([1.0, np.nan, 3.0])
    draws = np.array([[0, 0, 2], [1, 1, 1], [2, 1, 0]])
    np.testing.assert_allclose(bootstrap_mean(vals, draws), [5 / 3, np.nan, 2.0])  # NaN left out; none: NaN
    rows = [np.array([0, 1]), np.array([2]), np.array([3, 4, 5])]
    x = np.arange(6.0)
    got = bootstrap_statistic(rows, lambda r: float(x[r].sum()), draws)
    np.testing.assert_allclose(got, [1 + 1 + 12, 6, 12 + 2 + 1])  # group 0 twice, then 2
    assert percentile_interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))
    assert all(math.isnan(v) for v in percentile_interval([np.nan]))


def test_confidence_intervals_bracket_the_point_and_are_paired():
    t = synthetic({f"p{i}": ("gemm", "builtin") for i in range(8)}, n=8, seed=2)
    rng = np.random.default_rng(0)
    oracle = OracleBaseline().predict_frame(t)
    noisy = oracle.assign(score=oracle["score"] + rng.normal(0, 0.2, len(t)))
    ci = confidence_intervals(t, {"oracle": oracle, "noisy": noisy}, n_boot=300, seed=0)
    assert ci["oracle"]["ci"]["pairwise_accuracy"] == [1.0, 1.0] and ci["oracle"]["ci"]["ece"] == [0.0, 0.0]
    point = per_problem_values(t, noisy)["pairwise_accuracy"].mean()
    lo, hi = ci["noisy"]["ci"]["pairwise_accuracy"]
    assert lo <= point <= hi and lo < hi < 1.0
    assert "ci_vs_oracle" not in ci["noisy"]  # the ceiling is not a baseline to beat
    d = ci["oracle"]["ci_vs_noisy"]["pairwise_accuracy"]
    assert d[0] > 0  # the oracle beats the noisy order on every replicate: a paired difference


def test_evaluate_adds_intervals():
    t = synthetic({f"p{i}": ("gemm" if i % 2 else "row", "builtin") for i in range(6)})
    res = evaluate(t, "family", {"oracle": OracleBaseline, "prior": lambda: PriorBaseline(0)}, n_boot=50)
    assert res["prior"]["ci"]["pairwise_accuracy"] == [0.5, 0.5]
    assert res["prior"]["ci_level"] == 0.95 and res["prior"]["n_boot"] == 50
    assert set(res["prior"]["ci"]) >= {"ece", "top10_headroom", "nll", "top10_within5"}
    assert "ci_vs_prior" in res["oracle"] and "ci_vs_oracle" not in res["prior"]


# ---- the selective policy defers a problem unlike the training data ----

def _f(top: float, unlike: bool = False, winner: bool = True) -> SurrogateForecast:
    rest = (1 - top) / 8
    probs = [rest] * 9
    probs[7 if winner else 0] = top
    return SurrogateForecast(tuple(probs), unlike=unlike, ood=3.0 if unlike else 0.0)


def test_policy_defers_unlike_forecasts_whatever_their_confidence():
    fs = [_f(0.9), _f(0.9, winner=False), _f(0.9, unlike=True), _f(0.9, unlike=True, winner=False)]
    pol = SelectivePolicy(tau=0.5, explore=0.0)
    assert pol.decide(fs, slots=4) == [MEASURE, SKIP, DEFER, DEFER]  # the unlike loser is not skipped
    assert SelectivePolicy(tau=0.5, explore=0.0, defer_unlike=False).decide(fs, slots=4) == [MEASURE, SKIP, MEASURE,
                                                                                             SKIP]


@pytest.fixture(scope="module")
def fixture_model():
    pytest.importorskip("lightgbm")
    from workbench.store.dataset import load
    from workbench.surrogates.features import training_table
    from workbench.surrogates.learned import LearnedSurrogate

    table = training_table(load("candidates", DATA), load("problems", DATA))
    return table, LearnedSurrogate(n_estimators=20, n_bags=3, inner_folds=3).fit(table)


def far_away(table: pd.DataFrame) -> pd.DataFrame:
    """A problem like layernorm at sizes a million times beyond anything trained on, under a new key."""
    near = table[table["problem"] == "layernorm"].head(20)
    far = near.assign(problem="huge_layernorm", problem_key="huge_layernorm@0")
    for c in far.columns:
        if c.startswith(("p.log2_", "s.log2_")) and "intensity" not in c:
            far[c] = far[c] + 20.0
    return far


def test_far_away_problem_is_unlike_and_deferred(fixture_model):
    table, model = fixture_model
    near = table[table["problem"] == "layernorm"].head(20)
    far = far_away(table)
    nov = model.novelty(pd.concat([near, far]))
    got = nov.set_index("problem_key")
    assert not got.loc[near["problem_key"].iloc[0], "unlike"]  # a training problem is like the training data
    assert got.loc["huge_layernorm@0", "unlike"] and got.loc["huge_layernorm@0", "problem_ood"] > 1
    assert "outside the training problems' range" in got.loc["huge_layernorm@0", "why"]
    f_far = model.forecasts_from_frame(model.predict_frame(far))
    f_near = model.forecasts_from_frame(model.predict_frame(near))
    assert all(isinstance(f, SurrogateForecast) and f.unlike and f.ood > 1 for f in f_far)
    assert all("unlike the training data" in f.reasoning for f in f_far)
    assert not any(f.unlike for f in f_near)
    pol = SelectivePolicy(tau=0.0, explore=0.0)  # tau 0: every in-distribution forecast is trusted
    assert set(pol.decide(f_far, slots=len(f_far))) == {DEFER}
    assert DEFER not in pol.decide(f_near, slots=len(f_near))
    with_explore = SelectivePolicy(tau=0.0, explore=0.25, seed=1).decide(f_far, slots=8)
    assert with_explore.count(DEFER) == 6 and with_explore.count(EXPLORE) == 2  # the slots still bound the GPU


def test_a_kernel_family_never_trained_on_is_unlike(fixture_model):
    table, model = fixture_model
    rows = table[table["problem"] == "layernorm"].head(10).assign(problem_key="conv_like@0",
                                                                  kernel_families="conv+elementwise")
    nov = model.novelty(rows).iloc[0]
    assert nov["unlike"] and "kernel family conv never seen in training" in nov["why"]
    assert model.novelty(rows.assign(kernel_families="row")).iloc[0]["unlike"] == bool(
        model.novelty(rows.assign(kernel_families="row")).iloc[0]["problem_ood"] > 1)


# ---- conformal calibration ----

def test_conformal_cdf_is_the_empirical_cdf_plus_one_normal_pseudo_score():
    from scipy.special import ndtr

    from workbench.surrogates.learned import conformal_cdf

    s = np.sort(np.array([-1.0, 0.0, 1.0, 2.0]))
    t = np.array([-10.0, -1.0, 0.5, 10.0])
    fn = np.array([0.0, 0.125, 0.5, 1.0])  # interpolated at plotting positions (i + 0.5) / 4
    np.testing.assert_allclose(conformal_cdf(s, t), (4 * fn + ndtr(t)) / 5)
    assert (np.diff(conformal_cdf(s, np.linspace(-5, 5, 50))) >= 0).all()


def test_calibration_modes_share_one_training(fixture_model):
    table, model = fixture_model
    rows = table.head(40)
    g = model.predict_frame(rows)
    for mode in ("conformal", "conformal_bound"):
        c = model.with_calibration(mode).predict_frame(rows)
        probs = c[[f"p{i}" for i in range(9)]].to_numpy()
        np.testing.assert_allclose(probs.sum(1), 1.0)
        assert (probs > 0).all()  # the normal pseudo-score leaves no outcome impossible
        np.testing.assert_allclose(c["score"], g["score"])  # the order is the same model's
        assert not np.allclose(probs, g[[f"p{i}" for i in range(9)]].to_numpy())
        assert model.with_calibration(mode).tau(0.5) >= 0
    assert model.calibration == "gaussian"  # the copy, not the model, changed mode
    with pytest.raises(ValueError, match="calibration must be"):
        model.with_calibration("isotonic")


# ---- the command line ----

def test_cli_level_split_fails_clearly_and_boot_adds_intervals(capsys):
    import json

    from workbench.cli import main

    assert main(["surrogate", "eval", "--data", str(DATA), "--split", "level"]) == 2
    assert "at least 2 KernelBench levels" in capsys.readouterr().err
    assert main(["surrogate", "eval", "--data", str(DATA), "--split", "family", "--only", "oracle", "--only",
                 "prior", "--boot", "20", "--max-per-problem", "10", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["prior"]["n_rows"] == 70 and res["prior"]["ci"]["pairwise_accuracy"] == [0.5, 0.5]
    assert "top10_headroom" in res["oracle"] and set(res["oracle"]["per_group"]) == {"gemm", "permute", "row"}
