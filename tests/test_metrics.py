"""workbench.metrics on small hand-computed cases (the arithmetic is in the comments)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.metrics import (
    aurc,
    bin_accuracy,
    brier_multiclass,
    budget_recall,
    expected_calibration_error,
    kendall_tau,
    measurements_to_reach,
    median_abs_log2_error,
    pairwise_accuracy,
    per_pool,
    reliability_table,
    risk_coverage,
    spearman_rho,
    threshold_for_risk,
    to_bin,
    within_one_bin,
)

# ---- ranking ----

def test_pairwise_accuracy_hand_computed():
    # pairs (0,1): dt=+2, dp=+1 right; (0,2): dt=+1, dp=+2 right; (1,2): dt=-1, dp=+1 wrong -> 2/3
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2]) == pytest.approx(2 / 3)
    # scalar noise 1: (0,2) and (1,2) have |dt| = 1 <= 1 and drop out; (0,1) is right -> 1
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2], noise=1.0) == 1.0
    # per-item noise [0, 0, 0.5]: |dt| = 1 > 0.5 keeps all three pairs -> 2/3; [0, 0, 1.5] drops both pairs with 2
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2], noise=[0, 0, 0.5]) == pytest.approx(2 / 3)
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2], noise=[0, 0, 1.5]) == 1.0
    # a tie in the prediction counts one half; a tie in the truth is excluded
    assert pairwise_accuracy([1, 1], [1, 2]) == 0.5
    assert math.isnan(pairwise_accuracy([1, 2], [3, 3]))


def test_kendall_tau_b():
    # C = 2, D = 1, no ties: (2 - 1) / 3
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # pred tie in pair (0,1): S = 2, n0 = 3, n1 = 1, n2 = 0 -> 2 / sqrt(2 * 3)
    assert kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_spearman_rho():
    # d = [0, 0, -1, 1]: 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman_rho([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(0.8)
    # ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4]; centred products sum 4.5, squares 4.5 and 5 -> 4.5 / sqrt(22.5)
    assert spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_cross_check_with_scipy_when_installed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    p, t = rng.integers(0, 5, 40).astype(float), rng.integers(0, 6, 40).astype(float)
    assert kendall_tau(p, t) == pytest.approx(stats.kendalltau(p, t).statistic)
    assert spearman_rho(p, t) == pytest.approx(stats.spearmanr(p, t).statistic)


def test_per_pool():
    df = pd.DataFrame({"problem": ["b", "b", "b", "a", "a"], "pred": [1, 2, 3, 1, 2], "true": [1, 3, 2, 2, 1]})
    out = per_pool(df, "problem", "pred", "true", pairwise_accuracy)
    assert list(out["problem"]) == ["a", "b"] and list(out["n"]) == [2, 3]
    assert out["value"].tolist() == pytest.approx([0.0, 2 / 3])
    out = per_pool(df, "problem", "pred", "true", pairwise_accuracy, noise=1.0)
    # pool a: its one pair has |dt| = 1 <= 1 and drops out -> NaN; pool b as in the first test -> 1
    assert math.isnan(out["value"][0]) and out["value"][1] == 1.0


# ---- bins ----

def test_to_bin_edges_are_half_open():
    # bins: <-2 | [-2,-1) | [-1,-.5) | [-.5,0) | [0,.5) | [.5,1) | [1,2) | >=2 | fails
    x = [-3, -2, -0.5, 0, 0.49, 1, 2, 5]
    assert to_bin(x, False).tolist() == [0, 1, 3, 4, 4, 6, 7, 7]
    assert to_bin([0.0, np.nan], [True, True]).tolist() == [8, 8]
    assert to_bin(-0.7) == 2 and isinstance(to_bin(-0.7), int)
    with pytest.raises(ValueError):
        to_bin([np.nan], [False])


def _onehot(idx, p=0.6):
    row = np.full(9, (1 - p) / 8)
    row[idx] = p
    return row


def test_bin_accuracy_and_within_one():
    probs = np.array([_onehot(4), _onehot(8), _onehot(2)])
    true = [4, 7, 3]
    assert bin_accuracy(probs, true) == pytest.approx(1 / 3)  # only the first argmax is right
    # first right; fails vs [>=2] is not adjacent; |2 - 3| = 1 counts -> 2/3
    assert within_one_bin(probs, true) == pytest.approx(2 / 3)


def test_median_abs_log2_error_drops_missing():
    # errors of the finite pairs: |0-.5|, |1-0|, |2-2| = .5, 1, 0 -> median .5
    assert median_abs_log2_error([0, 1, np.nan, 2], [0.5, 0, 1, 2]) == 0.5


# ---- calibration ----

def test_ece_and_reliability_table():
    conf, correct = [0.95, 0.95, 0.15, 0.15, 1.0], [1, 0, 0, 0, 1]
    # bin 9: conf mean .9667, acc 2/3, gap .3; bin 1: conf .15, acc 0, gap .15 -> 3/5 * .3 + 2/5 * .15 = .24
    assert expected_calibration_error(conf, correct) == pytest.approx(0.24)
    t = reliability_table(conf, correct)
    assert len(t) == 10 and t["count"].tolist() == [0, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    assert t.loc[9, "accuracy"] == pytest.approx(2 / 3) and t.loc[9, "confidence"] == pytest.approx(2.9 / 3)
    assert math.isnan(t.loc[0, "accuracy"])
    assert expected_calibration_error([0.5, 0.5], [1, 0]) == 0.0  # bin 5: conf .5, acc .5


def test_brier_multiclass():
    certain = np.eye(9)[[3, 3]]
    assert brier_multiclass(certain, [3, 3]) == 0.0
    assert brier_multiclass(certain, [3, 4]) == pytest.approx(1.0)  # (0 + 2) / 2
    # uniform: 8 * (1/9)^2 + (8/9)^2 = 72/81 = 8/9
    assert brier_multiclass(np.full((1, 9), 1 / 9), [0]) == pytest.approx(8 / 9)


# ---- selectivity ----

def test_risk_coverage_and_aurc():
    conf, err = [0.6, 0.9, 0.7, 0.8], [1, 0, 0, 1]
    # by confidence: .9 (0), .8 (1), .7 (0), .6 (1) -> risks 0, 1/2, 1/3, 1/2; AURC = mean = 1/3
    rc = risk_coverage(conf, err)
    assert rc["risk"].tolist() == pytest.approx([0, 0.5, 1 / 3, 0.5])
    assert rc["coverage"].tolist() == [0.25, 0.5, 0.75, 1.0]
    assert aurc(conf, err) == pytest.approx(1 / 3)


def test_risk_coverage_ties_are_order_free():
    # the tie at .9 carries its mean error .5 each -> risks .5, .5, 1/3 whichever order the tie comes in
    a = risk_coverage([0.9, 0.9, 0.5], [1, 0, 0])["risk"].tolist()
    b = risk_coverage([0.9, 0.9, 0.5], [0, 1, 0])["risk"].tolist()
    assert a == pytest.approx([0.5, 0.5, 1 / 3]) and a == pytest.approx(b)


def test_threshold_for_risk():
    conf, err = [0.9, 0.8, 0.7, 0.6], [0, 1, 0, 1]
    # risk at tau .9 / .8 / .7 / .6 = 0, 1/2, 1/3, 1/2 -> lowest tau with risk <= .4 is .7
    assert threshold_for_risk(conf, err, 0.4) == 0.7
    assert threshold_for_risk(conf, err, 0.0) == 0.9
    assert threshold_for_risk(conf, err, 0.5) == 0.6
    assert threshold_for_risk(conf, err, -1) == math.inf
    # a tie cannot be split: tau .8 accepts both .8s (risk 1/3), so max_risk .2 stays at .9
    assert threshold_for_risk([0.9, 0.8, 0.8], [0, 0, 1], 0.4) == 0.8
    assert threshold_for_risk([0.9, 0.8, 0.8], [0, 0, 1], 0.2) == 0.9


# ---- budget ----

def test_budget_recall():
    scores, speed = [3, 2, 1, 0], [1.0, 1.5, 2.0, np.nan]
    # measured in order 1.0, 1.5, 2.0, failed; pool best 2.0; within .2 needs >= 1.6
    out = budget_recall(scores, speed, [0, 1, 2, 3, 10])
    assert out["best_found"].tolist() == [0.0, 1.0, 1.5, 2.0, 2.0]
    assert out["hit"].tolist() == [False, False, False, True, True]
    assert out["ratio"].tolist() == pytest.approx([0, 0.5, 0.75, 1, 1])
    assert budget_recall(scores, speed, [2], within=0.3)["hit"].tolist() == [True]  # 1.5 >= 1.4
    assert budget_recall([1, 2], [np.nan, 0.0], [2])["hit"].tolist() == [False]


def test_measurements_to_reach():
    assert measurements_to_reach([3, 2, 1, 0], [1.0, 1.5, 2.0, np.nan], 1.5) == 2
    assert measurements_to_reach([3, 2, 1, 0], [1.0, 1.5, 2.0, np.nan], 3.0) is None
    assert measurements_to_reach([np.nan, 1, 0], [5, 1, 1], 5) == 3  # unscored candidates go last
    assert measurements_to_reach([1, 1], [1, 2], 2) == 2  # score ties keep the input order


# ---- calibration: equal-mass bins, NLL ----

def test_ece_equal_mass_bins():
    from workbench.metrics import nll_multiclass  # noqa: F401  (exported)

    conf, correct = [0.9, 0.1, 0.3, 0.2], [1, 0, 0, 1]
    # sorted .1 .2 | .3 .9: conf .15 acc .5 gap .35; conf .6 acc .5 gap .1 -> .5 * .35 + .5 * .1 = .225
    assert expected_calibration_error(conf, correct, 2, binning="mass") == pytest.approx(0.225)
    # equal width (2 bins) puts .1 .2 .3 together (conf .2, acc 1/3) and .9 alone (gap .1): .75 * 2/15 + .25 * .1
    assert expected_calibration_error(conf, correct, 2) == pytest.approx(0.75 * 2 / 15 + 0.25 * 0.1)
    # 5 items in 2 runs: sizes 3 and 2 (the first longer); lo/hi are the bin's smallest and largest confidence
    t = reliability_table([0.5, 0.1, 0.4, 0.2, 0.3], [1, 0, 0, 0, 1], 2, binning="mass")
    assert t["count"].tolist() == [3, 2] and t["lo"].tolist() == [0.1, 0.4] and t["hi"].tolist() == [0.3, 0.5]
    assert t["accuracy"].tolist() == pytest.approx([1 / 3, 0.5])
    with pytest.raises(ValueError, match="binning"):
        expected_calibration_error(conf, correct, 2, binning="quantiles")


def test_nll_multiclass():
    from workbench.metrics import nll_multiclass

    assert nll_multiclass(np.eye(9)[[2]], [2]) == pytest.approx(0.0)
    assert nll_multiclass(np.full((1, 9), 1 / 9), [5]) == pytest.approx(math.log(9))
    # p_true .5 and .25: (log 2 + log 4) / 2
    half = _onehot(3, 0.5)
    quarter = _onehot(4, 0.25)
    assert nll_multiclass(np.array([half, quarter]), [3, 4]) == pytest.approx((math.log(2) + math.log(4)) / 2)
    # an outcome forecast impossible costs -log(eps)
    assert nll_multiclass(np.eye(9)[[0]], [1], eps=1e-3) == pytest.approx(-math.log(1e-3))
