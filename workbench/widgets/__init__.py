"""Notebook views of a live search: `SearchWidget` (ipywidgets + a plotly FigureWidget, updated from the search's
listeners) and `display_static` (plain figures and HTML for headless runs such as papermill). The core packages never
import this one; it imports `workbench.viz`. Needs the `widgets` extra."""
from .notebook import device_note, open_device, open_search, show
from .search_widget import SearchWidget, StaticView, display_static

__all__ = ["SearchWidget", "StaticView", "device_note", "display_static", "open_device", "open_search", "show"]
