"""Best speedup against GPU-seconds spent: how fast a search (or each of several runs and seeds) finds its best."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable

from ..core import events as ev
from ._plotly import COLOURS, DASHES, graph_objects, layout, padded_range
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
    skipped: list[bool] = dataclasses.field(default_factory=list)  # the node was kept off the GPU by the surrogate

    def __len__(self) -> int:
        return len(self.gpu_seconds)

    @property
    def final(self) -> float | None:
        return self.best[-1] if self.best else None


def get_budget_curve_info(search_or_events: Search | Iterable[dict[str, Any]]) -> BudgetCurveInfo:
    xs, ys, nids, bests, skipped = [], [], [], [], []
    key, best, best_nid = None, None, None
    for e in ev.node_events(node_events(search_or_events)):
        k = e.best_key
        if k is not None and (key is None or k > key):
            key, best, best_nid = k, e.speedup, e.nid
        xs.append(e.gpu_seconds)
        ys.append(best)
        nids.append(e.nid)
        bests.append(best_nid)
        skipped.append(e.skipped)
    return BudgetCurveInfo(xs, ys, nids, bests, skipped)


def plot_budget_curve(infos: BudgetCurveInfo | dict[str, BudgetCurveInfo], title: str = "best speedup vs GPU budget",
                      show_skipped: bool = True):
    """One step line per run (`{label: info}`, e.g. one per strategy or seed, or a screened and an unscreened
    search); a single info is drawn alone. Points before anything was timed are left out, so a run that timed
    nothing draws an empty trace. With `show_skipped`, the nodes a surrogate kept off the GPU are ticks under each
    run's line, at the GPU-seconds spent when they were skipped (they cost none). Lines of different runs get
    different dashes, so coinciding runs stay visible; the y range fits the data."""
    go = graph_objects()
    if isinstance(infos, BudgetCurveInfo):
        infos = {"search": infos}
    fig = go.Figure()
    ys_all = []
    for i, (label, info) in enumerate(infos.items()):
        pts = [(x, y, n) for x, y, n in zip(info.gpu_seconds, info.best, info.best_nid) if y is not None]
        ys_all += [p[1] for p in pts]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], customdata=[p[2] for p in pts],
                                 name=label, mode="lines+markers", line=dict(shape="hv", dash=DASHES[i % len(DASHES)],
                                                                          color=COLOURS[i % len(COLOURS)]),
                                 legendgroup=label, marker=dict(size=5),
                                 hovertemplate=f"{label}<br>%{{x:.3g}} GPU-s: best %{{y:.3g}}x (node #%{{customdata}})"
                                               "<extra></extra>"))
    y_range = padded_range(ys_all, include=1.0)
    if show_skipped:
        for i, (label, info) in enumerate(infos.items()):
            sk = [(x, n) for x, n, s in zip(info.gpu_seconds, info.nids, info.skipped or []) if s]
            if not sk or y_range is None:
                continue
            y0 = y_range[0] + (0.02 + 0.03 * i) * (y_range[1] - y_range[0])
            fig.add_trace(go.Scatter(x=[s[0] for s in sk], y=[y0] * len(sk), customdata=[s[1] for s in sk],
                                     mode="markers", marker=dict(symbol="line-ns-open", size=10,
                                                                 color=COLOURS[i % len(COLOURS)]),
                                     name=f"{label}: {len(sk)} skipped", legendgroup=label,
                                     hovertemplate=f"{label}: node #%{{customdata}} skipped at %{{x:.3g}} GPU-s"
                                                   "<extra></extra>"))
    if y_range is None or y_range[0] <= 1.0 <= y_range[1]:
        fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    layout(fig, title, height=420, xaxis_title="GPU-seconds spent", yaxis_title="best speedup vs eager")
    if y_range is not None:
        fig.update_yaxes(range=y_range)
    return fig
