"""`SearchWidget`: a Step button, a summary line, the live tree figure and a node selector with the node's detail.

The widget listens to the search (`search.listeners`): every node event redraws the tree and refreshes the node
list, every step event the summary, whether the step came from the button or from code in another cell.
"""
from __future__ import annotations

import dataclasses
import html
from typing import Any

from .. import viz


def _summary(search) -> str:
    r = search.report()
    best = r["best"]
    best_txt = (f"best #{best['nid']} at {best['speedup_vs_eager']:.3g}x eager ({best['fidelity']})" if best
                else "nothing timed yet")
    counts = ", ".join(f"{k} {v}" for k, v in r["by_status"].items()) or "no candidates yet"
    stopped = search.budget.exhausted()
    return (f"{r['problem']} on {r['device']}, {r['strategy']}: step {r['steps']}, {r['candidates']} candidates "
            f"({counts}); {best_txt}; {r['gpu_seconds']:.3g} GPU-s" + (f"; stopped: {stopped}" if stopped else ""))


def _node_options(info: viz.SearchTreeInfo) -> list[tuple[str, int]]:
    return [(f"{label} [{st}]", nid) for nid, label, st in zip(info.ids, info.labels, info.status)]


def _pre(text: str) -> str:
    return f"<pre style='white-space: pre-wrap; font-size: 12px'>{html.escape(text)}</pre>"


class SearchWidget:
    """`SearchWidget(search)`; display it as the last expression of a cell (or `display(w.widget)`)."""

    def __init__(self, search, steps_per_click: int = 1, kind: str = "icicle"):
        try:
            import ipywidgets as W
            import plotly.graph_objects as go
        except ImportError as e:  # pragma: no cover - only where the extra is missing
            raise ImportError("SearchWidget needs ipywidgets and plotly (and anywidget for plotly's FigureWidget), "
                              "the 'widgets' extra: pip install 'workbench[widgets]'") from e
        self.search = search
        self.steps_per_click = steps_per_click
        self.kind = kind
        self.step_button = W.Button(description=f"Step x{steps_per_click}", button_style="primary",
                                    tooltip="run search.step()")
        self.summary = W.HTML(value=html.escape(_summary(search)))
        self.progress = W.IntProgress(value=0, min=0, max=max(steps_per_click, 1), description="step")
        self.tree_info = viz.get_search_tree_info(search)
        self.figure = go.FigureWidget(viz.plot_search_tree(self.tree_info, kind=kind))
        self.node_selector = W.Dropdown(options=_node_options(self.tree_info), description="node",
                                        layout=W.Layout(width="95%"))
        self.detail = W.HTML(value="")
        self.step_button.on_click(self.on_step)
        self.node_selector.observe(self._on_select, names="value")
        self.widget = W.VBox([W.HBox([self.step_button, self.progress]), self.summary, self.figure,
                              self.node_selector, self.detail])
        search.listeners.append(self.on_event)
        if self.tree_info.best is not None:
            self.node_selector.value = self.tree_info.best
        self.show_node(self.node_selector.value)

    # ---- callbacks ----
    def on_step(self, _button: Any = None) -> None:
        """The Step button: `steps_per_click` calls of `search.step()` (stops early when the search stops)."""
        self.step_button.disabled = True
        try:
            for i in range(self.steps_per_click):
                self.progress.value = i
                report = self.search.step()
                if report.stopped:
                    self.summary.value = html.escape(_summary(self.search))
                    break
            self.progress.value = self.progress.max
        finally:
            self.step_button.disabled = False

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "node":
            self.refresh_tree()
        elif event.get("type") == "step":
            self.summary.value = html.escape(_summary(self.search))

    def refresh_tree(self) -> None:
        self.tree_info = viz.get_search_tree_info(self.search)
        fresh = viz.plot_search_tree(self.tree_info, kind=self.kind)
        with self.figure.batch_update():
            t, src = self.figure.data[0], fresh.data[0]
            t.ids, t.parents, t.labels, t.customdata = src.ids, src.parents, src.labels, src.customdata
            t.marker.colors = src.marker.colors
            self.figure.layout.title = fresh.layout.title
        selected = self.node_selector.value
        self.node_selector.options = _node_options(self.tree_info)
        if selected is not None:
            self.node_selector.value = selected

    def _on_select(self, change: dict[str, Any]) -> None:
        self.show_node(change["new"])

    def show_node(self, nid: int | None) -> str:
        text = "" if nid is None else viz.render_node_detail(viz.get_node_detail_info(self.search, nid))
        self.detail.value = _pre(text) if text else ""
        return text

    def close(self) -> None:
        """Stop listening to the search and close the widgets."""
        if self.on_event in self.search.listeners:
            self.search.listeners.remove(self.on_event)
        self.widget.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


@dataclasses.dataclass
class StaticView:
    """What `display_static` returns: plain plotly figures, the summary, the best node's detail and one HTML page."""
    tree: Any  # plotly Figure
    budget: Any  # plotly Figure
    summary: str
    detail: str
    html: str

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"StaticView({self.summary})"


def display_static(search, nid: int | None = None, kind: str = "icicle", include_plotlyjs: str | bool = "cdn") \
        -> StaticView:
    """The headless view (papermill, nbconvert, scripts): the tree and budget figures, a summary line and the detail
    of node `nid` (default the best, else the latest), and all of it as one HTML string. Nothing interactive."""
    tree_info = viz.get_search_tree_info(search)
    tree = viz.plot_search_tree(tree_info, kind=kind)
    budget = viz.plot_budget_curve({search.strategy.name: viz.get_budget_curve_info(search)})
    if nid is None:
        nid = tree_info.best if tree_info.best is not None else (tree_info.ids[-1] if tree_info.ids else None)
    detail = viz.render_node_detail(viz.get_node_detail_info(search, nid)) if nid is not None else "no nodes yet"
    summary = _summary(search)
    page = "\n".join([f"<p>{html.escape(summary)}</p>",
                      tree.to_html(full_html=False, include_plotlyjs=include_plotlyjs),
                      budget.to_html(full_html=False, include_plotlyjs=False), _pre(detail)])
    return StaticView(tree, budget, summary, detail, page)
