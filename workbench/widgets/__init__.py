"""Notebook views of a live search: `SearchWidget` (ipywidgets + plotly FigureWidgets, updated from the search's
listeners) and `display_static` (figures and HTML for headless runs such as papermill); the helpers notebooks call so
they hold no logic (`open_device`, `open_search` with a surrogate and findings, `unscreened_twin`); figures that
survive an executed notebook (`setup_figures`); progress (`StepProgress`, `ItemProgress`, `progress_iter`); tables
(`as_table`, `node_table`, `runs_table`). The core packages never import this one; it imports `workbench.viz`.
Needs the `widgets` extra."""
from .figures import figure_bundle, setup_figures, show_figure
from .notebook import (
    ScreeningComparison,
    all_findings,
    compare_screening,
    compare_surrogates,
    device_note,
    open_device,
    open_findings,
    open_screening,
    open_search,
    show,
    unscreened_twin,
)
from .progress import ItemProgress, StepProgress, progress_iter, step_line
from .search_widget import SearchWidget, StaticView, display_static
from .tables import as_table, node_table, runs_table

__all__ = ["ItemProgress", "ScreeningComparison", "SearchWidget", "StaticView", "StepProgress", "all_findings",
           "as_table",
           "compare_screening", "compare_surrogates", "device_note", "display_static",
           "figure_bundle", "node_table", "open_device", "open_findings", "open_screening", "open_search",
           "progress_iter", "runs_table", "setup_figures", "show", "show_figure", "step_line", "unscreened_twin"]
