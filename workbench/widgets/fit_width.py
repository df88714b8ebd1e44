"""Plotly FigureWidgets that fill the width of the notebook's output area: `figure_widget(fig)`.

Why: since plotly 6 a `FigureWidget` is an anywidget. anywidget calls the view's `render(el)` while `el` is not yet
in the page and passes on none of Lumino's messages, so the `after-attach` / `resize` handling that plotly's view has
(`FigureView.autosizeFigure`, which calls `Plotly.Plots.resize`) never runs: plotly autosizes once, measures a
detached element of width 0, falls back to its 700 px default and keeps it, however wide the output area or the
ipywidgets Box around it (plotly/plotly.py#5208, #4027). And in a Box (a flex row) the element itself, having no
width of its own, shrinks to that 700 px figure (measured in JupyterLab: the Box 1320 px wide, the element 700), so
even a fresh measure finds 700. `fig.layout.autosize = True` sent from Python after the display redraws at the
element's width only if it is in the page by the time the message arrives, and never again when the notebook is
resized.

What: a subclass whose front-end module (`_esm`) is plotly's own module, loaded unchanged from a string, with its
exported `FigureView` given an element that fills its container (`width: 100%`, `min-width: 0`, unless the element
already has a width) and made to watch it with a `ResizeObserver`: whenever the element's width changes to a
non-zero value (attached to the page, the browser window or JupyterLab's panels resized, a hidden output shown) the
view calls its own `autosizeFigure()`, which redraws at the element's width and reports the new size to Python, as
plotly's Lumino path would. A figure with an explicit `layout.width` keeps it (`autosizeFigure` leaves those alone).
Where the installed plotly's module no longer exports `FigureView` with `perform_render` and `autosizeFigure`, or
the browser has no `ResizeObserver`, the module is plotly's unchanged and the figure draws as before.
"""
from __future__ import annotations

import functools
import json
from typing import Any

PLOTLY_SOURCE = "__WORKBENCH_PLOTLY_WIDGET_SOURCE__"  # where plotly's module text goes (as a JSON string literal)

FIT_WIDTH_ESM = """\
// workbench.widgets.fit_width: plotly's FigureWidget module, unchanged, with each view redrawn at its element's
// width whenever that width changes (anywidget passes no Lumino after-attach / resize messages to plotly's view).
const source = __WORKBENCH_PLOTLY_WIDGET_SOURCE__;
const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
let plotly;
try {
  plotly = await import(url);
} finally {
  URL.revokeObjectURL(url);
}
const View = plotly.FigureView;
const proto = View && View.prototype;
if (typeof ResizeObserver === "function" && proto && !proto._workbenchFitWidth
    && typeof proto.perform_render === "function" && typeof proto.autosizeFigure === "function") {
  const performRender = proto.perform_render;
  const remove = proto.remove;
  proto._workbenchFitWidth = true;
  proto.perform_render = function (...args) {
    // the element fills its container, also as a flex item (an ipywidgets Box or HBox lays its children out in a
    // row, where an element of no width shrinks to the 700 px figure it holds), and may shrink below its figure
    if (!this.el.style.width) this.el.style.width = "100%";
    if (!this.el.style.minWidth) this.el.style.minWidth = "0";
    const out = performRender.apply(this, args);
    let width = 0;
    this._workbenchObserver = new ResizeObserver((entries) => {
      const w = Math.round(entries[entries.length - 1].contentRect.width);
      if (w > 0 && w !== width) {  // 0: not in the page or hidden, where there is nothing to measure
        width = w;
        this.autosizeFigure();
      }
    });
    this._workbenchObserver.observe(this.el);
    return out;
  };
  proto.remove = function (...args) {
    if (this._workbenchObserver) this._workbenchObserver.disconnect();
    return typeof remove === "function" ? remove.apply(this, args) : undefined;
  };
}
export const FigureModel = plotly.FigureModel;
export const FigureView = View;
export default plotly.default;
"""


def fit_width_esm(plotly_esm: str) -> str:
    """The front-end module of `figure_widget`'s class: `plotly_esm` (plotly's FigureWidget module text) imported
    unchanged, its `FigureView` resized to its element's width."""
    return FIT_WIDTH_ESM.replace(PLOTLY_SOURCE, json.dumps(plotly_esm))


@functools.cache
def figure_widget_class() -> type:
    """`FitWidthFigureWidget`, a `plotly.graph_objects.FigureWidget` whose figure follows its element's width
    (built on first use: plotly is in the `widgets` extra)."""
    import plotly.graph_objects as go

    class FitWidthFigureWidget(go.FigureWidget):
        """A FigureWidget that redraws at its element's width whenever that width changes (the module's doc)."""

        _esm = fit_width_esm(str(go.FigureWidget._esm))

    FitWidthFigureWidget.__qualname__ = "FitWidthFigureWidget"
    return FitWidthFigureWidget


def figure_widget(fig: Any = None, **kwargs: Any):
    """`fig` (a plotly Figure or its dict) as a FigureWidget that fills the width of its output area in JupyterLab
    and follows it when it changes: a figure that sets no width is given `autosize=True` (one with a width keeps
    it)."""
    w = figure_widget_class()(fig, **kwargs)
    if w.layout.width is None:
        w.layout.autosize = True
    return w
