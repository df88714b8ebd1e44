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
# # 01 · Explore a search
#
# Build a problem, a device and a `Search`, step it cell by cell, look at the tree, one node's source and diff, and
# the report. With a `surrogate` the search is **screened**: each step the strategy over-generates, the surrogate
# forecasts every proposal (a probability over 9 speedup outcomes and a confidence) and the selective policy decides
# which the GPU measures; the rest become *skipped* nodes, kept with their forecast. With `findings` the profiler's
# expert tools read every node and their advice steers the proposer. Every cell only calls the package
# (`workbench.search`, `workbench.viz`, `workbench.widgets`); the parameters below are what papermill overrides
# (`-p steps 1 -p interactive False`, see `notebooks/README.md`).

# %% tags=["parameters"]
problem = "cross_entropy"
# small sizes for the CPU device, e.g. ["batch_size=8", "dim=100"] (replay needs the recorded sizes: none)
overrides = []
strategy = "greedy"
steps = 3
seed = 0
budget_gpu_s = None  # a GPU-seconds limit (None: none; 0 allows no GPU work, as in the CLI)
surrogate = "none"  # none, roofline or learned (or llm): screen every step's proposals
tau = -1.0  # the selective policy's confidence threshold; below 0: the surrogate's own
findings = "none"  # none, static (expert tools on compile records, no GPU time) or ncu (counters, on a GPU)
compare = True  # a screened search: also run it unscreened on the same GPU-seconds and compare the two
device = "auto"  # auto: the GPU when one is visible, else replay of the shipped H200 measurements; cuda, cpu, replay
replay_data = ""  # a store file recorded on a GPU (or several, comma-separated): replay its measurements
interactive = True  # False for headless runs (papermill): static figures instead of the live widget
out_dir = ""  # where a sweep wants this run's events, nodes, trajectory and report (workbench.lab.runs.save_run)

# %%
from IPython.display import HTML

from workbench import viz
from workbench.lab import runs
from workbench.problems import Problem
from workbench.widgets import (
                               StepProgress,
                               all_findings,
                               as_table,
                               compare_screening,
                               device_note,
                               node_table,
                               open_device,
                               open_search,
                               setup_figures,
                               show,
                               unscreened_twin,
)

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %% [markdown]
# ## Problem and device
#
# **Without a GPU** the `auto` device replays the real NVIDIA H200 measurements shipped in `results/dataset`: every
# speedup and GPU-second is one measured there, and the search walks the measured points of the problem's space (the
# problem must be at its recorded sizes, so no `overrides`). `device = "cpu"` is Triton's interpreter instead: it runs
# the static, compile and correctness stages at small sizes but refuses the timing stages, so that search records
# correctness only (nodes "refused" or "failed", no speedups).

# %%
prob = Problem.load(problem, overrides)
dev = open_device(device, replay_data)
print(prob.key, "|", device_note(dev))

# %%
search = open_search(prob, dev, strategy=strategy, seed=seed, budget_gpu_s=budget_gpu_s, surrogate=surrogate,
                     tau=tau, findings=findings)

# %% [markdown]
# ## Step by step
#
# The first step evaluates the proposer's default point (the root); each later step evaluates the strategy's
# proposals. One line per step: the nodes it added by status, the GPU-seconds spent, the best so far.

# %%
progress = StepProgress(steps, interactive)
progress(search.step())

# %%
_best = search.run(steps=steps - 1, progress=progress)  # the tree below shows it

# %% [markdown]
# ## The tree
#
# Interactive: a Step button (with steps per click), a summary, the tree and the budget curve, which grow as the
# search steps (from the button or from code in another cell), and the selected node's panel. Each tile shows the
# node's speedup (or its status), its id and what it changed; the colour is log2 speedup vs eager (colour bar), with
# failed nodes grey, nodes the surrogate **skipped** lavender and other untimed nodes pale (legend). Click a tile to
# select its node (and zoom into its subtree); *show* hides skipped or failed nodes or keeps the best node's path.
# Headless: the same figures, static.

# %%
view = show(search, interactive=interactive)
view

# %%
node_table(search)

# %% [markdown]
# ## One node: forecast, findings, source and diff against its parent
#
# The best node (or the latest one when nothing was timed): its facts, the surrogate's forecast against the measured
# outcome and the policy's decision (a screened search), the profiler's findings (with `findings`), the diff against
# its parent and its full source.

# %%
HTML(viz.render_node_detail_html(viz.get_node_detail_info(search)))

# %% [markdown]
# ## Screened against unscreened
#
# With a `surrogate` (and `compare`): the same search without screening, run on the GPU-seconds the screened one
# spent: both budget curves (the skipped nodes as ticks under the screened one's, at the spend when they were
# skipped: they cost no GPU time) and a side-by-side table.

# %%
twin = unscreened_twin(search, interactive) if compare else None
compare_screening(search, twin)

# %% [markdown]
# ## Profiler findings
#
# With `findings`: every node's findings, most severe first (severity, what was found, the advice, the move it
# suggests).

# %%
viz.plot_findings(all_findings(search), title=f"findings ({findings})")

# %% [markdown]
# ## Report

# %%
as_table(search.report())

# %% [markdown]
# ## Saved for a sweep
#
# With `out_dir` (a sweep passes each run's directory) the events, nodes, trajectory and report are written there,
# where notebook 03 and `workbench report` read them; without it nothing is written.

# %%
runs.save_run(search, out_dir)
dev.close()
