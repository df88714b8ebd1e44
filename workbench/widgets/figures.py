"""Figures that survive the notebook: `setup_figures()` (the first cell of every notebook calls it) makes each plotly
figure a notebook shows carry three representations:

- plotly's JSON mimetype (`application/vnd.plotly.v1+json`), which JupyterLab and VS Code draw interactively, trusted
  or not;
- an HTML `<div>` that draws the figure with plotly.js, for `jupyter nbconvert --to html`, nbviewer and any other
  HTML view: plotly.js itself is inlined once per notebook (in the output of the cell that called
  `setup_figures`), never loaded from a CDN, so an executed notebook opened offline shows its figures;
- with `static=True` and kaleido available (`workbench.viz.static_export_available`: kaleido 1.x, in the widgets
  and test extras, and a Chrome/Chromium for it to drive), a PNG, for viewers that run no scripts (a code host's
  notebook preview). Off by default: kaleido starts a browser, about a second per figure; where kaleido or Chromium
  is missing the HTML fallback stays and `setup_figures` says which one is missing.

`figure_bundle(fig)` is the same bundle for code that displays figures itself (`display_static`).
"""
from __future__ import annotations

import html
from typing import Any

from ..viz.export import figure_html, image_bytes, static_export_available, static_export_missing

RENDERER = "workbench_html"
PNG_RENDERER = "workbench_png"
PNG_WIDTH = 1100  # pixels, for a figure that sets no width (it follows the cell width when drawn interactively)
_state: dict[str, Any] = {"plotlyjs": False, "static": False}


def plotlyjs_script() -> str:
    """plotly.js, inlined (about 4.7 MB), as the script tags an HTML output needs before any figure div."""
    from plotly.offline import get_plotlyjs

    return ("<script type='text/javascript'>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
            f"<script type='text/javascript'>{get_plotlyjs()}</script>")


def include_plotlyjs(force: bool = False) -> bool:
    """Display plotly.js inline once in this kernel (again with `force`); True when it was displayed now."""
    if _state["plotlyjs"] and not force:
        return False
    from IPython.display import HTML, display

    display(HTML(plotlyjs_script()), metadata={"workbench": "plotly.js"})
    _state["plotlyjs"] = True
    return True


def _html_renderer():
    from plotly.io._base_renderers import MimetypeRenderer

    class OfflineHTMLRenderer(MimetypeRenderer):
        """text/html for a figure: a div drawn by the plotly.js that `include_plotlyjs` put on the page."""

        def activate(self) -> None:
            include_plotlyjs()

        def to_mimebundle(self, fig_dict):
            return {"text/html": figure_html(fig_dict, include_plotlyjs=False, full_html=False)}

    return OfflineHTMLRenderer()


def _png(fig) -> str:
    """The figure as a base64 PNG, drawn by kaleido (`viz.export.image_bytes`) at its own size or PNG_WIDTH."""
    import base64

    return base64.b64encode(image_bytes(fig, "png", width=fig.layout.width or PNG_WIDTH, scale=1.0)).decode()


def _png_renderer():
    from plotly.io._base_renderers import MimetypeRenderer

    class StaticPNGRenderer(MimetypeRenderer):
        """image/png for a figure, through the same kaleido call as `save_figure` (plotly's own "png" renderer
        draws at kaleido's 700 x 500 default)."""

        def to_mimebundle(self, fig_dict):
            from plotly import graph_objects as go

            return {"image/png": _png(go.Figure(fig_dict, skip_invalid=True))}

    return StaticPNGRenderer()


def setup_figures(static: bool = False) -> None:
    """Make every figure the notebook displays from here on carry the JSON mimetype and inline-HTML fallback (and a
    PNG with `static` where kaleido can draw one), and inline plotly.js once, in this cell's output (plotly's
    default renderer becomes `"plotly_mimetype+workbench_html"`, with `"+workbench_png"` when static)."""
    import plotly.io as pio

    pio.renderers[RENDERER] = _html_renderer()
    pio.renderers[PNG_RENDERER] = _png_renderer()
    names = ["plotly_mimetype", RENDERER]
    _state["static"] = bool(static) and static_export_available()
    if _state["static"]:
        names.append(PNG_RENDERER)
    pio.renderers.default = "+".join(names)
    include_plotlyjs(force=True)
    if static and not _state["static"]:
        from IPython.display import HTML, display

        display(HTML(f"<p>No static images: {html.escape(static_export_missing())}. Figures are kept as "
                     "interactive JSON and inline HTML.</p>"))


def figure_bundle(fig) -> dict[str, Any]:
    """The mime bundle `setup_figures` gives a figure (JSON mimetype, inline HTML, PNG when static is on); plotly.js
    is displayed first if this kernel has not shown it yet."""
    import json

    include_plotlyjs()
    bundle: dict[str, Any] = {"application/vnd.plotly.v1+json": json.loads(fig.to_json()),
                              "text/html": figure_html(fig, include_plotlyjs=False, full_html=False),
                              "text/plain": f"<{type(fig).__name__}: {_title(fig)}>"}
    if _state["static"]:
        bundle["image/png"] = _png(fig)
    return bundle


def _title(fig) -> str:
    t = fig.layout.title.text if fig.layout.title is not None else None
    return (t or "figure").replace("<br>", " ")


def show_figure(fig) -> None:
    """Display `fig` with `figure_bundle`."""
    from IPython.display import display

    display(figure_bundle(fig), raw=True)
