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
# are then empty and say so. With `kernelbench_dir` set, the files under it are checked here first, with a progress
# bar (a line per file, headless), and their report read.

# %% tags=["parameters"]
results_dir = "results/kernelbench/cpu_devset"  # a run's directory (its report.json, or files/*.json)
# levels to show, e.g. ["level1"] (all when empty)
levels = []
# a KernelBench directory (its level*/ folders, or a flat folder) to check first on the CPU device at small sizes,
# correctness only, as `workbench kernelbench DIR --device cpu --out results_dir`; rows already under results_dir
# are reused. Empty: read results_dir as it is
kernelbench_dir = ""
# comma-separated file names or glob patterns within kernelbench_dir, e.g. "19_ReLU*" (all when empty)
only = ""
jobs = 1  # files checked at once, each in its own process
interactive = True  # False for headless runs (papermill): progress as lines, not a bar

# %%
from pathlib import Path

from workbench.lab import kernelbench, kernelbench_report
from workbench.viz import kernelbench as kb_viz
from workbench.widgets import ItemProgress, setup_figures

setup_figures()  # figures that survive: interactive in Lab, inline HTML (plotly.js once, here) for HTML exports

# %% [markdown]
# ## Checking the files (with `kernelbench_dir`)
#
# Each file: loaded and checked in a process of its own, the offline proposer's default candidate rendered and run
# through static, compile and correctness on Triton's interpreter (seconds to minutes a file). The bar moves as each
# file ends. Without `kernelbench_dir` nothing runs here.

# %%
files = kernelbench.discover(kernelbench_dir, only=only or None) if kernelbench_dir else []
rows = kernelbench.run_files(files, Path(results_dir), kernelbench.RunConfig(device="cpu", jobs=jobs),
                             progress=ItemProgress(len(files), interactive, "kernelbench")) if files else []
_ = kernelbench_report.write_report(Path(results_dir), rows, {"name": Path(results_dir).name, "dir": kernelbench_dir,
                                                             "device": "cpu", "only": only}) if files else None

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
