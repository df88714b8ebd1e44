"""Metrics for surrogates and search policies: pure numpy/pandas, one concept per module.

- `ranking`: does a score order candidates the way measurements do (pairwise accuracy, Kendall tau-b, Spearman rho)?
- `bins`: is a `Forecast` right about the speedup bin?
- `calibration`: does a confidence mean what it says?
- `selectivity`: how much error does a surrogate make on the part it is confident about (risk-coverage)?
- `budget`: measuring the top-k by score, how close does one get to the pool's best, and how much of the headroom
  over the default does that capture?
- `bootstrap`: confidence intervals over problems (whole problems resampled).
"""
from .bins import bin_accuracy, median_abs_log2_error, to_bin, within_one_bin
from .bootstrap import bootstrap_mean, bootstrap_statistic, group_draws, percentile_interval
from .budget import budget_recall, headroom_share, measurements_to_reach
from .calibration import brier_multiclass, expected_calibration_error, nll_multiclass, reliability_table
from .ranking import kendall_tau, pairwise_accuracy, per_pool, spearman_rho
from .selectivity import aurc, risk_coverage, threshold_for_risk

__all__ = ["aurc", "bin_accuracy", "bootstrap_mean", "bootstrap_statistic", "brier_multiclass", "budget_recall",
           "expected_calibration_error", "group_draws", "headroom_share", "kendall_tau", "measurements_to_reach",
           "median_abs_log2_error", "nll_multiclass", "pairwise_accuracy", "per_pool", "percentile_interval",
           "reliability_table", "risk_coverage", "spearman_rho", "threshold_for_risk", "to_bin", "within_one_bin"]
