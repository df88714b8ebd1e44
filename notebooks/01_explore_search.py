# ---
# jupyter:
#   jupytext:
#     formats: py:percent
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
# the report. Every cell only calls the package (`workbench.search`, `workbench.viz`, `workbench.widgets`); the
# parameters below are what papermill overrides (`-p steps 1 -p interactive False`, see `notebooks/README.md`).

# %% tags=["parameters"]
problem = "cross_entropy"
overrides = []  # e.g. ["batch_size=8", "dim=100"]: small sizes for the CPU device (replay needs the recorded sizes)
strategy = "greedy"
steps = 3
seed = 0
budget_gpu_s = 0.0  # a GPU-seconds limit (0: none); a sweep on replay stops each search here
device = "auto"  # auto: the GPU when one is visible, else replay of the shipped H200 measurements; cuda, cpu, replay
replay_data = ""  # a store file recorded on a GPU (or several, comma-separated): replay its measurements
interactive = True  # False for headless runs (papermill): static figures instead of the live widget
out_dir = ""  # where a sweep wants this run's events, nodes, trajectory and report (workbench.lab.runs.save_run)

# %%
from IPython.display import Markdown, display

from workbench import viz
from workbench.lab import runs
from workbench.problems import Problem
from workbench.widgets import device_note, open_device, open_search, show

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
search = open_search(prob, dev, strategy=strategy, seed=seed, budget_gpu_s=budget_gpu_s)

# %% [markdown]
# ## Step by step
#
# The first step evaluates the proposer's default point (the root); each later step evaluates the strategy's
# proposals.

# %%
search.step()

# %%
search.run(steps=steps - 1, progress=print)

# %% [markdown]
# ## The tree
#
# Interactive: a Step button, a summary, the tree (coloured by log2 speedup vs eager, failed nodes grey; hover for
# the move, status and reason) and a node selector. Headless: the same figures, static.

# %%
view = show(search, interactive=interactive)
view

# %%
search.table()

# %% [markdown]
# ## One node: source and diff against its parent
#
# The best node (or the latest one when nothing was timed).

# %%
display(Markdown(viz.render_node_detail(viz.get_node_detail_info(search))))

# %% [markdown]
# ## Report

# %%
search.report()

# %% [markdown]
# ## Saved for a sweep
#
# With `out_dir` (a sweep passes each run's directory) the events, nodes, trajectory and report are written there,
# where notebook 03 and `workbench report` read them; without it nothing is written.

# %%
runs.save_run(search, out_dir)
dev.close()
