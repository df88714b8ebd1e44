"""Plotly is an optional dependency (the `widgets` extra): only the plot functions import it, through here."""
from __future__ import annotations


def graph_objects():
    """`plotly.graph_objects`, or an ImportError that says how to get it."""
    try:
        import plotly.graph_objects as go
    except ImportError as e:  # pragma: no cover - exercised only where plotly is missing
        raise ImportError("workbench.viz plots need plotly, which is in the 'widgets' extra: "
                          "pip install 'workbench[widgets]' (or pip install plotly)") from e
    return go


def sample_colorscale(scale: str, points: list[float]) -> list[str]:
    from plotly.colors import sample_colorscale as sample

    return sample(scale, points)


# Shared layout: the title on its own line at the top left, clear of plotly's toolbar (top right); the legend in one
# row under the title, so it covers no data; axis titles kept inside the figure (automargin); a height that suits a
# notebook cell; the width follows the cell (autosize).
TITLE_WIDTH = 90  # characters per title line before it wraps
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # so coinciding lines stay visible


def wrap_title(title: str, width: int = TITLE_WIDTH) -> str:
    """`title` broken into lines of at most `width` characters at spaces (plotly's `<br>`)."""
    lines, line = [], ""
    for word in title.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join(lines + [line])


def layout(fig, title: str, height: int = 460, legend: bool = True, **kw) -> None:
    """Apply the shared layout to `fig` (keyword arguments go to `update_layout` last)."""
    wrapped = wrap_title(title)
    top = 50 + 18 * wrapped.count("<br>") + (30 if legend else 0)
    fig.update_layout(title=dict(text=wrapped, x=0.01, xanchor="left", y=0.99, yanchor="top", font=dict(size=15)),
                      height=height, autosize=True, margin=dict(t=top, l=60, r=20, b=50),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"),
                      **kw)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)


def padded_range(values, log: bool = False, pad: float = 0.06, include: float | None = None) -> list[float] | None:
    """An axis range that fits `values` (None and non-finite left out) with `pad` of the span either side, so
    differences are not squashed against a reference line far away; `include` is kept in range only when it lies
    within one span of the data. None when there is nothing to fit."""
    import math

    vs = [float(v) for v in values if v is not None and math.isfinite(float(v)) and (not log or float(v) > 0)]
    if not vs:
        return None
    if log:
        vs = [math.log10(v) for v in vs]
    lo, hi = min(vs), max(vs)
    span = hi - lo or max(abs(hi), 1.0) * 0.1
    if include is not None:
        inc = math.log10(include) if log else include
        if lo - span <= inc <= hi + span:
            lo, hi = min(lo, inc), max(hi, inc)
            span = hi - lo
    return [lo - pad * span, hi + pad * span]
