"""Best speedup against GPU-seconds spent: how fast a search (or each of several runs and seeds) finds its best."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable

from ..core import events as ev
from ._plotly import graph_objects
from .search_tree import node_events

if TYPE_CHECKING:  # a Search loads torch and triton; the views only read its events
    from ..search.search import Search


@dataclasses.dataclass
class BudgetCurveInfo:
    """A step function, one point per node event: cumulative GPU-seconds after the node, and the best speedup vs
    eager so far (`core.events.best_key`, the rule of `Tree.best`: full-timing results before quick ones). `best` is
    None until a node was timed; on a device that refuses timing (the CPU) it stays None."""
    gpu_seconds: list[float]
    best: list[float | None]
    nids: list[int]
    best_nid: list[int | None]

    def __len__(self) -> int:
        return len(self.gpu_seconds)

    @property
    def final(self) -> float | None:
        return self.best[-1] if self.best else None


def get_budget_curve_info(search_or_events: Search | Iterable[dict[str, Any]]) -> BudgetCurveInfo:
    xs, ys, nids, bests = [], [], [], []
    key, best, best_nid = None, None, None
    for e in ev.node_events(node_events(search_or_events)):
        k = e.best_key
        if k is not None and (key is None or k > key):
            key, best, best_nid = k, e.speedup, e.nid
        xs.append(e.gpu_seconds)
        ys.append(best)
        nids.append(e.nid)
        bests.append(best_nid)
    return BudgetCurveInfo(xs, ys, nids, bests)


def plot_budget_curve(infos: BudgetCurveInfo | dict[str, BudgetCurveInfo], title: str = "best speedup vs GPU budget"):
    """One step line per run (`{label: info}`, e.g. one per strategy or seed); a single info is drawn alone. Points
    before anything was timed are left out, so a run that timed nothing draws an empty trace."""
    go = graph_objects()
    if isinstance(infos, BudgetCurveInfo):
        infos = {"search": infos}
    fig = go.Figure()
    for label, info in infos.items():
        pts = [(x, y, n) for x, y, n in zip(info.gpu_seconds, info.best, info.best_nid) if y is not None]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], customdata=[p[2] for p in pts],
                                 name=label, mode="lines+markers", line_shape="hv",
                                 hovertemplate=f"{label}<br>%{{x:.3g}} GPU-s: best %{{y:.3g}}x (node #%{{customdata}})"
                                               "<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(title=title, xaxis_title="GPU-seconds spent", yaxis_title="best speedup vs eager",
                      margin=dict(t=40, l=10, r=10, b=10))
    return fig
