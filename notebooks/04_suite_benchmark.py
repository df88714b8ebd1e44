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
# # 04 · Suite benchmark
#
# Per problem of the built-in suite: the best candidate of the offline proposer, taken through full timing on the
# NVIDIA H200 against the eager PyTorch reference, torch.compile (default mode) and, in the suite benchmark,
# torch.compile(mode="max-autotune"), all in the same run, and the roofline floor (measured copy bandwidth and GEMM
# rates). `source = "benchmark"`: the suite benchmark (`results/suite/rows.jsonl`, `experiments/bench_suite.py`;
# its README says how the pool was chosen and why the worst fall short); `"dataset"`: the dataset's own full timing
# of each problem's best sampled candidate (`results/dataset/full.parquet`).

# %% tags=["parameters"]
problems = []  # problem names to show (all when empty)
sort_by = "speedup_vs_eager"  # problem, speedup_vs_eager, speedup_vs_compile, floor_fraction
source = "benchmark"  # benchmark (results/suite) or dataset (results/dataset/full.parquet)
data = ""  # the rows file or dataset directory (default: the shipped one)

# %%
from workbench import viz
from workbench.lab import suite
from workbench.widgets import setup_figures

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %%
full, problem_table = suite.suite_benchmark_data(data) if source == "benchmark" else suite.suite_data(data)
suite = viz.get_suite_info(full, problem_table, only=problems, sort_by=sort_by)
print(suite.text())

# %% [markdown]
# ## Table
#
# Times in ms; `floor_fraction` = floor / time of the best candidate (likewise for eager and torch.compile).

# %%
suite.frame().round(4)

# %% [markdown]
# ## Speedups against eager, torch.compile (and max-autotune)
#
# max-autotune turns on CUDA graphs, which copy every non-parameter input on each call: on memory-bound problems
# that extra pass, not tuning, is most of why it is slower than default torch.compile (results/suite/README.md).

# %%
viz.plot_suite_speedups(suite)

# %% [markdown]
# ## How close to the roofline floor
#
# Above 100 % the floor's ceiling is not a bound for that kernel: a read-mostly reduction streams faster than a copy,
# and tf32x3 (three tf32 tensor-core products at fp32 accuracy) beats the fp32 SIMT rate.

# %%
viz.plot_floor_fraction(suite)
