"""Views of searches, sweeps, surrogates and the suite, in the Optuna pattern: `get_*_info()` functions compute plain
data (no plotly imported) and `plot_*()` functions turn it into a `plotly.graph_objects.Figure` (plotly comes with
the `widgets` extra).

- `get_search_tree_info` / `plot_search_tree`: the tree as an icicle or treemap, coloured by log2 speedup (failed,
  skipped and untimed nodes in their own colours, with a legend); `filter_tree` hides statuses or keeps one path.
- `get_budget_curve_info` / `plot_budget_curve`: best speedup against GPU-seconds spent, for one or more runs.
- `get_node_detail_info` / `render_node_detail` (Markdown) / `render_node_detail_html`: one node's source, its diff
  against the parent, its last stage, its forecast and findings; `get_forecast_info` / `plot_forecast`: the
  forecast's outcome distribution against the measured outcome.
- `get_findings_info` / `plot_findings`: profiler findings as a table.
- `get_sweep_curves_info` / `plot_sweep_curves`: a sweep's best-speedup curves, median and band across seeds.
- `get_reliability_info` / `plot_reliability`, `get_risk_coverage_info` / `plot_risk_coverage`,
  `get_budget_recall_info` / `plot_budget_recall`: surrogates side by side.
- `get_suite_info` / `plot_suite_speedups`, `plot_floor_fraction`: the suite against eager, torch.compile and the
  roofline floor.
- `save_figure`: any of these figures to .png / .svg / .pdf (kaleido) or .html / .json (always).
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
from .export import save_figure, static_export_available
from .findings import FindingsInfo, get_findings_info, plot_findings
from .node import (
    ForecastInfo,
    NodeDetailInfo,
    get_forecast_info,
    get_node_detail_info,
    plot_forecast,
    render_node_detail,
    render_node_detail_html,
)
from .search_tree import SearchTreeInfo, filter_tree, get_search_tree_info, node_events, plot_search_tree
from .suite import SuiteInfo, get_suite_info, plot_floor_fraction, plot_suite_speedups
from .sweep import CurveInfo, SweepCurvesInfo, get_sweep_curves_info, plot_sweep_curves

__all__ = ["BudgetCurveInfo", "BudgetRecallInfo", "CurveInfo", "FindingsInfo", "ForecastInfo", "NodeDetailInfo",
           "ReliabilityInfo", "RiskCoverageInfo", "SearchTreeInfo", "SuiteInfo", "SweepCurvesInfo", "filter_tree",
           "get_budget_curve_info", "get_budget_recall_info", "get_findings_info", "get_forecast_info",
           "get_node_detail_info", "get_reliability_info", "get_risk_coverage_info", "get_search_tree_info",
           "get_suite_info", "get_sweep_curves_info", "node_events", "plot_budget_curve", "plot_budget_recall",
           "plot_findings", "plot_floor_fraction", "plot_forecast", "plot_reliability", "plot_risk_coverage",
           "plot_search_tree", "plot_suite_speedups", "plot_sweep_curves", "render_node_detail",
           "render_node_detail_html", "save_figure", "static_export_available"]
