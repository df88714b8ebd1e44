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
# # 05 · KernelBench
#
# A `workbench kernelbench DIR` run: per KernelBench file, a search under a per-problem GPU budget and the best
# candidate's full timing against eager PyTorch and torch.compile in the same run. KernelBench's metrics per level:
# correctness rate, fast_p (correct and faster than p times the baseline) and geo-mean speedups (a file with no
# correct candidate counts as 1.0x). A run on the CPU device has correctness only (no timing): the curves and bars
# are then empty and say so.

# %% tags=["parameters"]
results_dir = "results/kernelbench/cpu_devset"  # a run's directory (its report.json, or files/*.json)
# levels to show, e.g. ["level1"] (all when empty)
levels = []

# %%
from workbench.lab import kernelbench_report
from workbench.viz import kernelbench as kb_viz
from workbench.widgets import setup_figures

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %%
report = kernelbench_report.load_report(results_dir)
info = kb_viz.get_kernelbench_info(report, levels=levels)
print(info.text())
for line in kernelbench_report.summary_lines(report):
    print(line)

# %% [markdown]
# ## fast_p over p
#
# Solid: against eager; dashed: against torch.compile; black: all levels. At p = 0 the curve is the share of files
# correct and timed; p = 1 is "faster than the baseline".

# %%
kb_viz.plot_fast_p(info)

# %% [markdown]
# ## Per file: speedup against eager and torch.compile

# %%
kb_viz.plot_file_speedups(info)

# %% [markdown]
# ## The per-file table (why each fell short)

# %%
import pandas as pd  # noqa: E402

pd.DataFrame(report["files"])[["level", "file", "status", "correct", "generated", "families", "coverage_flops",
                               "speedup_vs_eager", "speedup_vs_compile", "reason"]]
