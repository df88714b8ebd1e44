"""Views of a search, in the Optuna pattern: `get_*_info()` functions compute plain data (no plotly imported) and
`plot_*()` functions turn it into a `plotly.graph_objects.Figure` (plotly comes with the `widgets` extra).

- `get_search_tree_info` / `plot_search_tree`: the tree as an icicle (or treemap), coloured by log2 speedup.
- `get_budget_curve_info` / `plot_budget_curve`: best speedup against GPU-seconds spent, for one or more runs.
- `get_node_detail_info` / `render_node_detail`: one node's source, its diff against the parent, its last stage.
- `get_findings_info` / `plot_findings`: profiler findings as a table.
"""
from .budget import BudgetCurveInfo, get_budget_curve_info, plot_budget_curve
from .findings import FindingsInfo, get_findings_info, plot_findings
from .node import NodeDetailInfo, get_node_detail_info, render_node_detail
from .search_tree import SearchTreeInfo, get_search_tree_info, node_events, plot_search_tree

__all__ = ["BudgetCurveInfo", "FindingsInfo", "NodeDetailInfo", "SearchTreeInfo", "get_budget_curve_info",
           "get_findings_info", "get_node_detail_info", "get_search_tree_info", "node_events", "plot_budget_curve",
           "plot_findings", "plot_search_tree", "render_node_detail"]
