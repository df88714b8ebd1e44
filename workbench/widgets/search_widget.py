"""`SearchWidget`: a live view of a search in JupyterLab, and `display_static`, the same view for headless runs.

The widget: the controls (steps per click, strategy, seed, the GPU-seconds budget; Step, Stop and New search buttons)
and a progress bar over the click's steps; a summary line; the tree (full width; speedup and status on every tile,
the colour key as a colour bar and legend; click a tile to select the node, a filter to hide skipped or failed nodes
or keep only the best node's path); the budget curve; and the selected node's panel (its facts, the surrogate's
forecast against the measured outcome and the policy's decision, the profiler's findings, the diff against its
parent coloured, the full source). It listens to the search (`search.listeners`), so steps run from code in another
cell grow it too.

Step runs its steps in a thread of its own (`background=True`, the default), so the kernel stays free to handle the
Stop button's click: Stop sets a flag the loop reads between steps, so the step under way finishes and is recorded
(its events, nodes and budget) and no further one starts. The budget box is the current search's GPU-seconds limit
(raise it and a search the budget stopped goes on; empty: no limit); strategy and seed decide which candidates a
search proposes, so they take effect through New search, which builds a fresh search (same problem, device,
screening and findings, `make_search`) and shows it; `searches` keeps the earlier ones. A search bound to a search
id keeps the budget it was created with (its id is bound to it): New search gives it another.
"""
from __future__ import annotations

import dataclasses
import html
import threading
import time
from typing import Any, Callable

from .. import viz
from ..harness.budget import Budget
from ..search.search import make_search
from ..search.strategies import STRATEGIES
from ..surrogates.selective import SelectivePolicy
from ..viz.export import figure_html
from .figures import figure_bundle, include_plotlyjs
from .fit_width import figure_widget

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


def parse_budget(text: str) -> float | None:
    """The budget box's text as GPU-seconds: empty (or "none") is no limit; else a number >= 0 (ValueError)."""
    t = (text or "").strip().lower()
    if t in ("", "none", "no limit"):
        return None
    value = float(t)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"the budget must be empty (no limit) or a number of GPU-seconds >= 0, got {text!r}")
    return value


def _budget_text(limit: float | None) -> str:
    return "" if limit is None else f"{limit:g}"


def new_search_like(search, strategy: str, seed: int, budget_gpu_s: float | None):
    """A fresh search on `search`'s problem, device, store, per-step count, screening (its policy's tau with the new
    seed) and findings, with another strategy, seed and budget (what the widget's New search builds). A search of
    the LLM proposer needs its client: pass `SearchWidget(..., new_search=...)` for those."""
    if search.llm is not None:
        raise ValueError("New search rebuilds offline-proposer searches only; for an LLM search pass "
                         "SearchWidget(search, new_search=lambda strategy, seed, budget_gpu_s: ...)")
    screening = search.screening
    if screening is not None:
        p = screening.selective
        screening = dataclasses.replace(screening, selective=SelectivePolicy(p.tau, explore=p.explore, seed=seed,
                                                                            min_gain=p.min_gain))
    return make_search(search.problem, search.device, strategy=strategy, seed=seed, budget=Budget(budget_gpu_s),
                       store=search.store, per_step=search.per_step, promotion=search.ladder.policy,
                       screening=screening, findings=search.findings)


def _filtered(info: viz.SearchTreeInfo, name: str) -> viz.SearchTreeInfo:
    spec = dict(FILTERS.get(name, {}))
    if spec.get("path_to") == "best":
        if info.best is None:
            return info
        spec["path_to"] = info.best
    return viz.filter_tree(info, **spec) if spec else info


class SearchWidget:
    """`SearchWidget(search)`; display it as the last expression of a cell (or `display(w.widget)`)."""

    def __init__(self, search, steps_per_click: int = 1, kind: str = "auto", refresh_s: float = 0.5,
                 background: bool = True,
                 new_search: Callable[[str, int, float | None], Any] | None = None):
        """`background`: Step runs in a thread so Stop can be clicked (False: in the caller, as tests do);
        `new_search(strategy, seed, budget_gpu_s)`: what New search builds (default `new_search_like`)."""
        try:
            import anywidget  # noqa: F401 - plotly's FigureWidget is one
            import ipywidgets as W
            import plotly.graph_objects  # noqa: F401 - the figures are built by fit_width.figure_widget
        except ImportError as e:  # pragma: no cover - only where the extra is missing
            raise ImportError("SearchWidget needs ipywidgets and plotly (and anywidget for plotly's FigureWidget), "
                              "the 'widgets' extra: pip install 'workbench[widgets]'") from e
        self.search = search
        self.searches: list[Any] = []  # the searches New search replaced, oldest first
        self.kind = kind
        self.refresh_s = refresh_s
        self.background = background
        self._new_search = new_search or (lambda st, sd, b: new_search_like(self.search, st, sd, b))
        self._last_refresh = 0.0
        self.stop_requested = threading.Event()
        self.thread: threading.Thread | None = None
        self.note = ""  # the last control message (a stop, a refused value), shown after the summary
        full = W.Layout(width="100%")
        self.step_button = W.Button(description="Step", button_style="primary", icon="play",
                                    tooltip="run search.step() this many times")
        self.stop_button = W.Button(description="Stop", button_style="warning", icon="stop", disabled=True,
                                    tooltip="stop after the step under way (it is recorded)",
                                    layout=W.Layout(width="90px"))
        self.steps_box = W.BoundedIntText(value=max(1, steps_per_click), min=1, max=1000, description="steps",
                                          layout=W.Layout(width="150px"))
        strategies = list(STRATEGIES) if search.strategy.name in STRATEGIES else [search.strategy.name,
                                                                                  *STRATEGIES]
        self.strategy_box = W.Dropdown(options=strategies, value=search.strategy.name, description="strategy",
                                       layout=W.Layout(width="210px"))
        self.seed_box = W.IntText(value=int(search.seed), description="seed", layout=W.Layout(width="150px"))
        self.budget_box = W.Text(value=_budget_text(search.budget.gpu_seconds), placeholder="no limit",
                                 description="GPU-s", layout=W.Layout(width="170px"),
                                 tooltip="the search's GPU-seconds limit (empty: none)")
        self.new_button = W.Button(description="New search", icon="refresh",
                                   tooltip="a fresh search with this strategy, seed and budget",
                                   layout=W.Layout(width="120px"))
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="200px"))
        self.filter = W.Dropdown(options=list(FILTERS), value="all nodes", description="show",
                                 layout=W.Layout(width="260px"))
        self.summary = W.HTML(value=html.escape(_summary(search)), layout=full)
        self.tree_info = viz.get_search_tree_info(search)
        self.shown = self.tree_info
        # FigureWidgets that fill the output area's width (plotly's own stay at 700 px in JupyterLab: fit_width)
        self.figure = figure_widget(viz.plot_search_tree(self.tree_info, kind=kind))
        self.budget_figure = figure_widget(self._budget_plot())
        self.node_selector = W.Dropdown(options=_node_options(self.tree_info), description="node", layout=full)
        self.detail = W.HTML(value="", layout=full)
        self.step_button.on_click(self.on_step)
        self.stop_button.on_click(self.on_stop)
        self.new_button.on_click(self.on_new_search)
        self.budget_box.observe(self._on_budget, names="value")
        self.node_selector.observe(self._on_select, names="value")
        self.filter.observe(lambda _change: self.refresh_tree(force=True), names="value")
        self._watch_clicks()
        controls = W.HBox([self.step_button, self.stop_button, self.steps_box, self.progress], layout=full)
        settings = W.HBox([self.strategy_box, self.seed_box, self.budget_box, self.new_button, self.filter],
                          layout=full)
        self.widget = W.VBox([controls, settings, self.summary,
                              W.Box([self.figure], layout=full), W.Box([self.budget_figure], layout=full),
                              self.node_selector, self.detail], layout=full)
        search.listeners.append(self.on_event)
        if self.tree_info.best is not None:
            self.node_selector.value = self.tree_info.best
        self.show_node(self.node_selector.value)

    @property
    def steps_per_click(self) -> int:
        return int(self.steps_box.value)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _set_running(self, running: bool) -> None:
        for w in (self.step_button, self.new_button, self.strategy_box, self.seed_box):
            w.disabled = running
        self.stop_button.disabled = not running

    def _show_summary(self) -> None:
        self.summary.value = html.escape(_summary(self.search) + (f" | {self.note}" if self.note else ""))

    # ---- callbacks ----
    def on_step(self, _button: Any = None) -> None:
        """The Step button: `steps_per_click` calls of `search.step()`, in a thread when `background` (then
        `wait()` joins it); stops early when the search stops or Stop is clicked."""
        if self.running:
            return
        self.stop_requested.clear()
        self.note = ""
        self._set_running(True)
        if self.background:
            self.thread = threading.Thread(target=self.run_steps, args=(self.steps_per_click,),
                                           name="SearchWidget.step", daemon=True)
            self.thread.start()
        else:
            self.run_steps(self.steps_per_click)

    def run_steps(self, n: int) -> int:
        """Up to `n` search steps, the stop flag read before each; returns how many ran."""
        self.progress.max, self.progress.value, self.progress.bar_style = max(n, 1), 0, "info"
        done = 0
        try:
            for _ in range(n):
                if self.stop_requested.is_set():
                    break
                report = self.search.step()
                done += 1
                self.progress.value = done
                if report.stopped:
                    break
            if self.stop_requested.is_set():
                self.note = f"stopped by the Stop button after {done} of {n} steps (each recorded)"
            self.progress.bar_style = "warning" if self.stop_requested.is_set() else "success"
        except BaseException as e:
            self.progress.bar_style = "danger"
            self.note = f"the step raised {type(e).__name__}: {e}"
            if not self.background:
                raise
        finally:
            self._set_running(False)
            self.refresh_tree(force=True)
            self._show_summary()
        return done

    def on_stop(self, _button: Any = None) -> None:
        """The Stop button: no further step starts; the one under way finishes and is recorded."""
        self.stop_requested.set()
        self.note = "stopping after the step under way"
        self._show_summary()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the Step button's thread (if one runs)."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _on_budget(self, change: dict[str, Any]) -> None:
        try:
            limit = parse_budget(change["new"])
        except ValueError as e:
            self.note = str(e)
        else:
            if self.search.search_id:
                self.note = (f"search id {self.search.search_id!r} is bound to its budget "
                             f"({_budget_text(self.search.budget.gpu_seconds) or 'no limit'}): New search uses "
                             "the new one")
            else:
                self.search.budget.gpu_seconds = limit
                self.note = f"budget: {'no limit' if limit is None else f'{limit:g} GPU-s'}"
        self._show_summary()

    def on_new_search(self, _button: Any = None):
        """The New search button: a fresh search with the strategy, seed and budget boxes' values; the widget
        follows it (the old one is kept in `searches`). Returns it (None when a value was refused)."""
        if self.running:
            return None
        try:
            search = self._new_search(self.strategy_box.value, int(self.seed_box.value),
                                      parse_budget(self.budget_box.value))
        except ValueError as e:
            self.note = str(e)
            self._show_summary()
            return None
        if self.on_event in self.search.listeners:
            self.search.listeners.remove(self.on_event)
        self.searches.append(self.search)
        self.search = search
        search.listeners.append(self.on_event)
        self.note = f"new search: {search.strategy.name}, seed {search.seed}"
        self.node_selector.options = []
        self.refresh_tree(force=True)
        self._show_summary()
        return search

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "node":
            self.refresh_tree()
        elif event.get("type") == "step":
            self._show_summary()
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
        elif self.tree_info.ids:
            self.node_selector.value = (self.tree_info.best if self.tree_info.best is not None
                                        else self.tree_info.ids[-1])

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
        """Stop a running Step (after its step), stop listening to the search and close the widgets."""
        self.stop_requested.set()
        self.wait()
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
