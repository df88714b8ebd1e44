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
# # 04 · Suite benchmark
#
# Per problem of the built-in suite: the best sampled candidate of the offline proposer (best by quick timing over
# its sampled pool), taken through full timing on the NVIDIA H200 against the eager PyTorch reference and
# torch.compile (default mode) in the same run, and the roofline floor (measured copy bandwidth and GEMM rates). From
# the shipped dataset: `results/dataset/full.parquet` and `problems.parquet`.

# %% tags=["parameters"]
problems = []  # problem names to show (all when empty)
sort_by = "speedup_vs_eager"  # problem, speedup_vs_eager, speedup_vs_compile, floor_fraction
data = ""  # a dataset directory (default: the shipped results/dataset)

# %%
from workbench import reports, viz

# %%
full, problem_table = reports.suite_data(data)
suite = viz.get_suite_info(full, problem_table, only=problems, sort_by=sort_by)
print(suite.text())

# %% [markdown]
# ## Table
#
# Times in ms; `floor_fraction` = floor / time of the best candidate (likewise for eager and torch.compile).

# %%
suite.frame()

# %% [markdown]
# ## Speedups against eager and torch.compile

# %%
viz.plot_suite_speedups(suite)

# %% [markdown]
# ## How close to the roofline floor
#
# Above 100 % the floor's ceiling is not a bound for that kernel: a read-mostly reduction streams faster than a copy,
# and tf32x3 (three tf32 tensor-core products at fp32 accuracy) beats the fp32 SIMT rate.

# %%
viz.plot_floor_fraction(suite)
