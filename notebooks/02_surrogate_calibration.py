# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Surrogate calibration
#
# Do the surrogates' forecasts mean what they say, and are they useful under a GPU budget? Every surrogate named
# below is trained afresh on each fold of the shipped NVIDIA H200 dataset (`results/dataset`) and forecasts the
# held-out candidates (`workbench.surrogates.evaluate`; the `problem` split holds whole problems out, as a search meets
# new problems). Then, side by side:
#
# - **reliability**: accuracy of the most likely outcome (one of 8 speedup bins or "fails") against its stated
#   probability; a calibrated forecaster lies on the diagonal;
# - **risk-coverage**: accept the most confident forecasts first; the error rate among the accepted as coverage grows
#   (what the selective policy's threshold trades);
# - **budget recall**: measure each problem's pool in score order; the fraction of problems where the top x % holds a
#   kernel within `within` of the pool's best.
#
# `oracle` (the measurements themselves) and `random` bound the plots; `prior` forecasts the training frequencies.

# %% tags=["parameters"]
surrogates = ["learned", "roofline", "prior", "random"]  # any of learned, roofline, prior, random, oracle
split = "problem"  # problem (whole problems held out), family (whole kernel families), random (rows)
folds = 5
seed = 0
trees = 250  # trees per LightGBM model of the learned surrogate (fewer: faster, rougher)
n_bins = 15
binning = "width"  # width (equal-width confidence bins) or mass (equal-count)
within = 0.05  # budget recall: a kernel within this fraction of the pool's best counts as found
detail = "learned"  # the surrogate whose per-problem table is shown
data = ""  # a dataset directory (default: the shipped results/dataset)
interactive = True  # False for headless runs (papermill): progress as lines, not a bar

# %%
from workbench import viz
from workbench.widgets import compare_surrogates, setup_figures

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %% [markdown]
# ## Held-out forecasts
#
# Training and forecasting every fold takes a few seconds per surrogate, the learned one two to three minutes at
# 250 trees and 5 folds on 2 cores (about 15 s at 10 trees and 2 folds); the bar (or a line per fold, headless)
# moves as each surrogate's fold is trained and scored.

# %%
comparison = compare_surrogates(surrogates, split=split, folds=folds, seed=seed, trees=trees, data=data,
                                interactive=interactive)
frames = comparison.frames()
comparison.metrics_frame().round(3)

# %% [markdown]
# ## Reliability

# %%
viz.plot_reliability(viz.get_reliability_info(frames, n_bins=n_bins, binning=binning))

# %% [markdown]
# ## Risk against coverage

# %%
viz.plot_risk_coverage(viz.get_risk_coverage_info(frames))

# %% [markdown]
# ## Budget recall

# %%
viz.plot_budget_recall(viz.get_budget_recall_info(frames, within=within))

# %% [markdown]
# ## Per problem
#
# Where the chosen surrogate ranks well and where it does not (pairwise accuracy excludes pairs closer than twice the
# problem's measured noise).

# %%
comparison.per_problem(detail).round(3)
