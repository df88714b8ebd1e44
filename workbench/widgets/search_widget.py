"""`SearchWidget`: a live view of a search in JupyterLab, and `display_static`, the same view for headless runs.

The widget: a Step button with a steps-per-click box and a progress bar over the click's steps; a summary line; the
tree (full width; speedup and status on every tile, the colour key as a colour bar and legend; click a tile to
select the node, a filter to hide skipped or failed nodes or keep only the best node's path); the budget curve;
and the selected node's panel (its facts, the surrogate's forecast against the measured outcome and the policy's
decision, the profiler's findings, the diff against its parent coloured, the full source). It listens to the search
(`search.listeners`), so steps run from code in another cell grow it too.

The widget runs in the kernel, so while a step runs no click is handled: there is no stop button; the budget (or
the kernel's interrupt) stops a long `search.run`.
"""
from __future__ import annotations

import html
import time
from typing import Any

from .. import viz
from ..viz.export import figure_html
from .figures import figure_bundle, include_plotlyjs

FILTERS = {"all nodes": {}, "hide skipped": {"hide": ("skipped",)},
           "hide skipped and failed": {"hide": ("skipped", "failed")}, "best path": {"path_to": "best"}}


def _summary(search) -> str:
    r = search.report()
    best = r["best"]
    best_txt = (f"best #{best['nid']} at {best['speedup_vs_eager']:.3g}x eager ({best['fidelity']})" if best
                else "nothing timed yet")
    counts = ", ".join(f"{k} {v}" for k, v in r["by_status"].items()) or "no candidates yet"
    stopped = search.budget.exhausted()
    screen = f", screened by {r['surrogate']}" if r.get("surrogate") else ""
    return (f"{r['problem']} on {r['device']}, {r['strategy']}{screen}: step {r['steps']}, {r['candidates']} "
            f"candidates ({counts}); {best_txt}; {r['gpu_seconds']:.3g} GPU-s"
            + (f"; stopped: {stopped}" if stopped else ""))


def _node_options(info: viz.SearchTreeInfo) -> list[tuple[str, int]]:
    return [(f"{label} [{st}" + (f" {s:.3g}x" if s else "") + "]", nid)
            for nid, label, st, s in zip(info.ids, info.labels, info.status, info.speedup)]


def _pre(text: str) -> str:
    return f"<pre style='white-space: pre-wrap; font-size: 12px'>{html.escape(text)}</pre>"


def _filtered(info: viz.SearchTreeInfo, name: str) -> viz.SearchTreeInfo:
    spec = dict(FILTERS.get(name, {}))
    if spec.get("path_to") == "best":
        if info.best is None:
            return info
        spec["path_to"] = info.best
    return viz.filter_tree(info, **spec) if spec else info


class SearchWidget:
    """`SearchWidget(search)`; display it as the last expression of a cell (or `display(w.widget)`)."""

    def __init__(self, search, steps_per_click: int = 1, kind: str = "auto", refresh_s: float = 0.5):
        try:
            import ipywidgets as W
            import plotly.graph_objects as go
        except ImportError as e:  # pragma: no cover - only where the extra is missing
            raise ImportError("SearchWidget needs ipywidgets and plotly (and anywidget for plotly's FigureWidget), "
                              "the 'widgets' extra: pip install 'workbench[widgets]'") from e
        self.search = search
        self.kind = kind
        self.refresh_s = refresh_s
        self._last_refresh = 0.0
        full = W.Layout(width="100%")
        self.step_button = W.Button(description="Step", button_style="primary", icon="play",
                                    tooltip="run search.step() this many times")
        self.steps_box = W.BoundedIntText(value=max(1, steps_per_click), min=1, max=1000, description="x",
                                          layout=W.Layout(width="110px"))
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="200px"))
        self.filter = W.Dropdown(options=list(FILTERS), value="all nodes", description="show",
                                 layout=W.Layout(width="260px"))
        self.summary = W.HTML(value=html.escape(_summary(search)), layout=full)
        self.tree_info = viz.get_search_tree_info(search)
        self.shown = self.tree_info
        self.figure = go.FigureWidget(viz.plot_search_tree(self.tree_info, kind=kind))
        self.budget_figure = go.FigureWidget(self._budget_plot())
        self.node_selector = W.Dropdown(options=_node_options(self.tree_info), description="node", layout=full)
        self.detail = W.HTML(value="", layout=full)
        self.step_button.on_click(self.on_step)
        self.node_selector.observe(self._on_select, names="value")
        self.filter.observe(lambda _change: self.refresh_tree(force=True), names="value")
        self._watch_clicks()
        self.widget = W.VBox([W.HBox([self.step_button, self.steps_box, self.progress, self.filter]), self.summary,
                              W.Box([self.figure], layout=full), W.Box([self.budget_figure], layout=full),
                              self.node_selector, self.detail], layout=full)
        search.listeners.append(self.on_event)
        if self.tree_info.best is not None:
            self.node_selector.value = self.tree_info.best
        self.show_node(self.node_selector.value)

    @property
    def steps_per_click(self) -> int:
        return int(self.steps_box.value)

    # ---- callbacks ----
    def on_step(self, _button: Any = None) -> None:
        """The Step button: `steps_per_click` calls of `search.step()` (stops early when the search stops)."""
        n = self.steps_per_click
        self.step_button.disabled = True
        self.progress.max, self.progress.value, self.progress.bar_style = n, 0, "info"
        try:
            for i in range(n):
                report = self.search.step()
                self.progress.value = i + 1
                if report.stopped:
                    self.summary.value = html.escape(_summary(self.search))
                    break
            self.progress.bar_style = "success"
        finally:
            self.step_button.disabled = False
            self.refresh_tree(force=True)

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "node":
            self.refresh_tree()
        elif event.get("type") == "step":
            self.summary.value = html.escape(_summary(self.search))
            self.refresh_tree(force=True)

    def _budget_plot(self):
        info = viz.get_budget_curve_info(self.search)
        return viz.plot_budget_curve({self.search.strategy.name: info})

    def _watch_clicks(self) -> None:
        if self.figure.data:
            self.figure.data[0].on_click(self._on_click)

    def _on_click(self, _trace, points, _state=None) -> None:
        """A tile clicked: select its node."""
        inds = list(getattr(points, "point_inds", []) or [])
        if inds and 0 <= inds[0] < len(self.shown.ids):
            self.select(self.shown.ids[inds[0]])

    def select(self, nid: int) -> None:
        """Select node `nid` (as a click on its tile does)."""
        self.node_selector.value = nid

    @staticmethod
    def _replace(target, fresh) -> None:
        """Put `fresh`'s traces and layout into the FigureWidget `target`."""
        target.data = []
        target.add_traces(list(fresh.data))
        target.layout = fresh.layout

    def refresh_tree(self, force: bool = False) -> None:
        """Redraw the tree, the budget curve and the node list (at most every `refresh_s` seconds unless
        `force`)."""
        now = time.monotonic()
        if not force and now - self._last_refresh < self.refresh_s:
            return
        self._last_refresh = now
        self.tree_info = viz.get_search_tree_info(self.search)
        self.shown = _filtered(self.tree_info, self.filter.value)
        self._replace(self.figure, viz.plot_search_tree(self.shown, kind=self.kind))
        self._watch_clicks()
        self._replace(self.budget_figure, self._budget_plot())
        selected = self.node_selector.value
        self.node_selector.options = _node_options(self.tree_info)
        if selected is not None and selected in self.tree_info.ids:
            self.node_selector.value = selected

    def _on_select(self, change: dict[str, Any]) -> None:
        self.show_node(change["new"])

    def show_node(self, nid: int | None) -> str:
        """Show node `nid` in the panel; returns its Markdown detail."""
        if nid is None:
            self.detail.value = ""
            return ""
        info = viz.get_node_detail_info(self.search, nid)
        self.detail.value = viz.render_node_detail_html(info)
        return viz.render_node_detail(info)

    def close(self) -> None:
        """Stop listening to the search and close the widgets."""
        if self.on_event in self.search.listeners:
            self.search.listeners.remove(self.on_event)
        self.widget.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


class StaticView:
    """What `display_static` returns: plain plotly figures, the summary, the node's detail (Markdown and HTML).
    Displayed in a notebook, each figure carries plotly's JSON, inline HTML (plotly.js inlined once per notebook)
    and, where `setup_figures(static=True)` found kaleido, a PNG; `html` is all of it as one self-contained page."""

    def __init__(self, tree, budget, summary: str, detail: str, detail_html: str, include_plotlyjs: bool | str):
        self.tree, self.budget, self.summary, self.detail, self.detail_html = tree, budget, summary, detail, detail_html
        self.include_plotlyjs = include_plotlyjs

    @property
    def html(self) -> str:
        """One HTML page: the summary, both figures (plotly.js inlined, or as `include_plotlyjs` says), the detail."""
        return "\n".join([f"<p>{html.escape(self.summary)}</p>",
                          figure_html(self.tree, self.include_plotlyjs, full_html=False),
                          figure_html(self.budget, False, full_html=False), self.detail_html])

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        include_plotlyjs()
        display(HTML(f"<p>{html.escape(self.summary)}</p>"))
        for fig in (self.tree, self.budget):
            display(figure_bundle(fig), raw=True)
        display(HTML(self.detail_html))

    def __repr__(self) -> str:
        return f"StaticView({self.summary})"


def display_static(search, nid: int | None = None, kind: str = "auto", include_plotlyjs: bool | str = True) \
        -> StaticView:
    """The headless view (papermill, nbconvert, scripts): the tree and budget figures, a summary line and the detail
    of node `nid` (default the best, else the latest). Nothing interactive; every figure survives offline."""
    tree_info = viz.get_search_tree_info(search)
    tree = viz.plot_search_tree(tree_info, kind=kind)
    budget = viz.plot_budget_curve({search.strategy.name: viz.get_budget_curve_info(search)})
    if nid is None:
        nid = tree_info.best if tree_info.best is not None else (tree_info.ids[-1] if tree_info.ids else None)
    if nid is not None:
        info = viz.get_node_detail_info(search, nid)
        detail, detail_html = viz.render_node_detail(info), viz.render_node_detail_html(info)
    else:
        detail = "no nodes yet"
        detail_html = _pre(detail)
    return StaticView(tree, budget, _summary(search), detail, detail_html, include_plotlyjs)
