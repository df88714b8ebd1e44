"""One-call figure export: `save_figure(fig, "tree.png")` (or .svg, .pdf, .html, .json), and whether a static image
can be made here (`static_export_available`).

HTML is always available: one self-contained file with plotly.js inlined (opens with no network). PNG, SVG and PDF
need kaleido 1.x (in the `widgets` and `test` extras), which drives a Chrome or Chromium it finds on the machine
(`apt-get install chromium`; `BROWSER_PATH` names another); where either is missing `save_figure` and
`image_bytes` say which, `static_export_available()` is False, and the notebooks keep their HTML fallback.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
from pathlib import Path

from ._plotly import graph_objects

STATIC_FORMATS = ("png", "svg", "pdf", "jpeg", "webp")
FORMATS = ("html", "json") + STATIC_FORMATS
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def _browser() -> str | None:
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if Path(env).exists() else None
    return next((p for p in map(shutil.which, _BROWSERS) if p), None)


@functools.lru_cache(maxsize=1)
def static_export_available() -> bool:
    """kaleido is installed and a Chrome/Chromium is there for it to draw with (nothing is started to check)."""
    return importlib.util.find_spec("kaleido") is not None and _browser() is not None


def static_export_missing() -> str:
    """Why a static image cannot be made here ("" when it can)."""
    if importlib.util.find_spec("kaleido") is None:
        return "kaleido is not installed (pip install 'kaleido>=1.3,<2', or the widgets extra)"
    if _browser() is None:
        return "kaleido found no Chrome or Chromium (apt-get install chromium, or set BROWSER_PATH)"
    return ""


def figure_html(fig, include_plotlyjs: bool | str = True, full_html: bool = True, div_id: str | None = None) -> str:
    """The figure (a plotly figure or its dict) as HTML that needs no network: plotly.js inlined
    (`include_plotlyjs=True`) or left to an earlier script on the page (False); no MathJax from a CDN; the width
    follows the page."""
    import plotly.io as pio

    graph_objects()
    return pio.to_html(fig, include_plotlyjs=include_plotlyjs, full_html=full_html, include_mathjax=False,
                       default_width="100%", div_id=div_id, validate=False,
                       config={"responsive": True, "displaylogo": False})


def save_figure(fig, path: str | Path, width: int | None = None, height: int | None = None, scale: float = 2.0) \
        -> Path:
    """Write `fig` (a plotly figure) to `path`, in the format its suffix names: .html (self-contained), .json
    (plotly's), or .png / .svg / .pdf / .jpeg / .webp (kaleido). `width` / `height` in pixels for the static
    formats (default: the figure's, else 1100 x its height); `scale` multiplies a PNG's resolution. Returns the
    path; raises ValueError for an unknown suffix and RuntimeError where a static image cannot be made here."""
    graph_objects()  # plotly must be there
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "jpg":
        fmt = "jpeg"
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the format from '{path.name}': use one of "
                         + ", ".join(f".{f}" for f in FORMATS))
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        path.write_text(figure_html(fig), encoding="utf-8")
    elif fmt == "json":
        path.write_text(fig.to_json(), encoding="utf-8")
    else:
        path.write_bytes(image_bytes(fig, fmt, width, height, scale, what=path.name))
    return path


def image_bytes(fig, fmt: str = "png", width: int | None = None, height: int | None = None, scale: float = 2.0,
                what: str = "a static image") -> bytes:
    """`fig` drawn by kaleido as `fmt` (png, svg, pdf, jpeg, webp); `width` / `height` in pixels (default: the
    figure's, else 1100 x 500), `scale` for PNG only. RuntimeError naming what is missing where kaleido or a
    Chromium is not there."""
    missing = static_export_missing()
    if missing:
        raise RuntimeError(f"cannot write {what}: {missing}; save it as .html instead (self-contained)")
    if os.environ.get("BROWSER_PATH") is None:
        os.environ["BROWSER_PATH"] = _browser()  # kaleido's own search may miss a distribution's chromium
    w = width or fig.layout.width or 1100
    h = height or fig.layout.height or 500
    return fig.to_image(format=fmt, width=w, height=h, scale=scale if fmt == "png" else 1)
