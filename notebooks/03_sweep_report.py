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
# # 03 · Sweep report
#
# Read a sweep's run directories (`results/runs/<sweep>/<run>/`: `manifest.json`, `report.json`, `events.jsonl`,
# `trajectory.parquet`, written by `workbench sweep` running notebook 01) and compare configurations: the best speedup
# found against GPU-seconds (or GPU measurements), as the median over seeds with a band across them; a table per
# configuration; the runs that failed and why; and the search tree of the best run.
#
# Make one first, e.g. `workbench sweep experiments/replay_sweep.yaml` (replays the shipped H200 measurements when
# no GPU is visible), or here: set `sweep_config` and the sweep runs in the next cells, with a progress bar (a line
# per run, headless), before its runs are read. `workbench report RUNS_DIR` writes the same curves and tables as one
# HTML file.

# %% tags=["parameters"]
runs_dir = "results/runs/replay"
x = "gpu_s"  # gpu_s (GPU-seconds spent) or measured (GPU measurements)
band = [0.0, 1.0]  # quantiles across seeds for the band: [0.0, 1.0] is min-max, [0.25, 0.75] the inter-quartile range
# a sweep config to run first, e.g. "experiments/replay_sweep.yaml" (runs already finished are skipped); its runs go
# to sweep_out/<its name>/ and are the ones read below. Empty: read runs_dir as it is
sweep_config = ""
sweep_out = "results/runs"
interactive = True  # False for headless runs (papermill): progress as lines, not a bar

# %%
from workbench import viz
from workbench.lab import runs
from workbench.lab.sweep import run_sweep
from workbench.widgets import ItemProgress, as_table, runs_table, setup_figures

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %% [markdown]
# ## Running the sweep (with `sweep_config`)
#
# One papermill process per run of the config's notebook, as `workbench sweep` does; the bar moves as each run
# ends. Without `sweep_config` nothing runs here.

# %%
ran = run_sweep(sweep_config, out_root=sweep_out,
                progress=ItemProgress(None, interactive, "sweep")) if sweep_config else None

# %%
sweep = runs.load_runs(ran.root if ran else runs_dir)
as_table(sweep.environment())

# %% [markdown]
# ## Runs
#
# One row per run: the parameters that vary, its status, best speedup, GPU-seconds (`sweep.runs` has every field).

# %%
runs_table(sweep)

# %% [markdown]
# ## Best speedup against budget
#
# One line per configuration (the parameters that vary, the seed excepted): the median best-so-far over its seeds,
# the band between the `band` quantiles.

# %%
curves = viz.get_sweep_curves_info(sweep.ok_trajectories, by=sweep.config_params, x=x, quantiles=band)
viz.plot_sweep_curves(curves)

# %%
sweep.summary().round(3)

# %% [markdown]
# ## Failures

# %%
sweep.failed[["run_id", "status", "error"]]

# %% [markdown]
# ## The best run's tree

# %%
best = sweep.best_run()
as_table(best)

# %%
viz.plot_search_tree(viz.get_search_tree_info(sweep.events(best["run_id"])))
