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
