"""Views of searches, sweeps, surrogates and the suite, in the Optuna pattern: `get_*_info()` functions compute plain
data (no plotly imported) and `plot_*()` functions turn it into a `plotly.graph_objects.Figure` (plotly comes with
the `widgets` extra).

- `get_search_tree_info` / `plot_search_tree`: the tree as an icicle (or treemap), coloured by log2 speedup.
- `get_budget_curve_info` / `plot_budget_curve`: best speedup against GPU-seconds spent, for one or more runs.
- `get_node_detail_info` / `render_node_detail`: one node's source, its diff against the parent, its last stage.
- `get_findings_info` / `plot_findings`: profiler findings as a table.
- `get_sweep_curves_info` / `plot_sweep_curves`: a sweep's best-speedup curves, median and band across seeds.
- `get_reliability_info` / `plot_reliability`, `get_risk_coverage_info` / `plot_risk_coverage`,
  `get_budget_recall_info` / `plot_budget_recall`: surrogates side by side.
- `get_suite_info` / `plot_suite_speedups`, `plot_floor_fraction`: the suite against eager, torch.compile and the
  roofline floor.
"""
from .budget import BudgetCurveInfo, get_budget_curve_info, plot_budget_curve
from .calibration import (
    BudgetRecallInfo,
    ReliabilityInfo,
    RiskCoverageInfo,
    get_budget_recall_info,
    get_reliability_info,
    get_risk_coverage_info,
    plot_budget_recall,
    plot_reliability,
    plot_risk_coverage,
)
from .findings import FindingsInfo, get_findings_info, plot_findings
from .node import NodeDetailInfo, get_node_detail_info, render_node_detail
from .search_tree import SearchTreeInfo, get_search_tree_info, node_events, plot_search_tree
from .suite import SuiteInfo, get_suite_info, plot_floor_fraction, plot_suite_speedups
from .sweep import CurveInfo, SweepCurvesInfo, get_sweep_curves_info, plot_sweep_curves

__all__ = ["BudgetCurveInfo", "BudgetRecallInfo", "CurveInfo", "FindingsInfo", "NodeDetailInfo", "ReliabilityInfo",
           "RiskCoverageInfo", "SearchTreeInfo", "SuiteInfo", "SweepCurvesInfo", "get_budget_curve_info",
           "get_budget_recall_info", "get_findings_info", "get_node_detail_info", "get_reliability_info",
           "get_risk_coverage_info", "get_search_tree_info", "get_suite_info", "get_sweep_curves_info",
           "node_events", "plot_budget_curve", "plot_budget_recall", "plot_findings", "plot_floor_fraction",
           "plot_reliability", "plot_risk_coverage", "plot_search_tree", "plot_suite_speedups", "plot_sweep_curves",
           "render_node_detail"]
