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
problem = "softmax_rows"
overrides = ["batch_size=8", "dim=100"]
strategy = "greedy"
steps = 3
seed = 0
device = "auto"
replay_data = ""  # a store file recorded on a GPU (or several, comma-separated): replay its measurements
interactive = True  # False for headless runs (papermill): static figures instead of the live widget

# %%
from IPython.display import Markdown, display

from workbench import viz
from workbench.problems import Problem
from workbench.search import Search
from workbench.widgets import device_note, open_device, show

# %% [markdown]
# ## Problem and device
#
# **Without a GPU** the `auto` device is the CPU device (Triton's interpreter). It runs the static, compile and
# correctness stages but refuses the timing stages, so the search then records correctness only: no speedups, every
# node "refused" (correct, not timed) or "failed", the tree pale/grey and the budget curve empty. The notebook still
# runs end to end; run it on a GPU machine, or give `replay_data` (measurements recorded on one), for speedups.

# %%
prob = Problem.load(problem, overrides)
dev = open_device(device, replay_data)
print(prob.key, "|", device_note(dev))

# %%
search = Search(prob, dev, strategy=strategy, seed=seed)

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

# %%
dev.close()
