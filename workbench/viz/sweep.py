"""Best speedup against GPU-seconds across a sweep: one curve per configuration, the median over its seeds and a band
between two quantiles (min-max by default), from the trajectory rows `workbench.lab.runs.load_runs` reads.

Each run is a step function: its best-so-far after each evaluated node, held until the next. A configuration's
curve is evaluated at every x where one of its runs changes; at a given x only the runs that have timed something
by then count (`n` says how many), and a run that has ended holds its final best.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from ._plotly import DASHES, graph_objects, layout, padded_range


@dataclasses.dataclass
class CurveInfo:
    label: str
    config: dict[str, Any]
    runs: list[str]
    x: list[float]
    median: list[float]
    lo: list[float]
    hi: list[float]
    n: list[int]  # runs with a timed result at each x
    final: list[float | None]  # each run's final best (None: it never timed anything), in `runs` order


@dataclasses.dataclass
class SweepCurvesInfo:
    x: str  # "gpu_s" or "measured"
    quantiles: tuple[float, float]
    curves: list[CurveInfo]

    def __len__(self) -> int:
        return len(self.curves)

    def curve(self, label: str) -> CurveInfo:
        for c in self.curves:
            if c.label == label:
                return c
        raise KeyError(f"no curve {label!r}; the curves are {[c.label for c in self.curves]}")


X_TITLES = {"gpu_s": "GPU-seconds spent", "measured": "GPU measurements"}


def _label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "all runs"


def _step_values(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The step function (xs ascending, ys best-so-far with NaN before the first timed result) at each grid x."""
    idx = np.searchsorted(xs, grid, side="right") - 1
    out = np.full(grid.shape, np.nan)
    ok = idx >= 0
    out[ok] = ys[idx[ok]]
    return out


def get_sweep_curves_info(trajectories, by: Sequence[str] = (), x: str = "gpu_s",
                          quantiles: Sequence[float] = (0.0, 1.0), run: str = "run_id") -> SweepCurvesInfo:
    """`trajectories`: a DataFrame with a row per evaluated node of each run: the `run` id, `x` (cumulative
    "gpu_s" or "measured"), `best` (best-so-far, NaN/None before anything was timed) and the configuration columns
    `by` (e.g. ["strategy"]; the seed is not among them: seeds are what the band spans)."""
    if x not in X_TITLES:
        raise ValueError(f"x must be one of {list(X_TITLES)}, not {x!r}")
    q_lo, q_hi = (float(q) for q in quantiles)
    if not 0 <= q_lo <= q_hi <= 1:
        raise ValueError(f"quantiles must satisfy 0 <= lo <= hi <= 1, got {tuple(quantiles)}")
    by = list(by)
    missing = [c for c in [run, x, "best", *by] if c not in trajectories.columns]
    if missing:
        raise ValueError(f"trajectories lack column(s) {missing}")
    curves = []
    groups = trajectories.groupby(by, sort=False, dropna=False) if by else [((), trajectories)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        config = dict(zip(by, key))
        runs, steps = [], []
        for rid, r in g.groupby(run, sort=False):
            r = r.sort_values([x, "seq"] if "seq" in r.columns else [x], kind="stable")
            xs = r[x].to_numpy(float)
            ys = r["best"].astype(float).to_numpy()
            ys = np.fmax.accumulate(ys) if ys.size else ys  # best-so-far, NaN until the first timed result
            runs.append(str(rid))
            steps.append((xs, ys))
        grid = np.unique(np.concatenate([s[0] for s in steps])) if steps else np.array([])
        vals = np.vstack([_step_values(xs, ys, grid) for xs, ys in steps]) if steps else np.empty((0, 0))
        med, lo, hi, n = [], [], [], []
        for j in range(grid.size):
            col = vals[:, j][np.isfinite(vals[:, j])]
            n.append(int(col.size))
            if col.size:
                med.append(float(np.median(col)))
                lo.append(float(np.quantile(col, q_lo)))
                hi.append(float(np.quantile(col, q_hi)))
            else:
                med.append(float("nan"))
                lo.append(float("nan"))
                hi.append(float("nan"))
        final = [float(ys[-1]) if ys.size and np.isfinite(ys[-1]) else None for _, ys in steps]
        curves.append(CurveInfo(_label(config), config, runs, [float(v) for v in grid], med, lo, hi, n, final))
    return SweepCurvesInfo(x, (q_lo, q_hi), curves)


_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22"]


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def plot_sweep_curves(info: SweepCurvesInfo, title: str | None = None):
    """Per configuration: the median best speedup as a step line and the seed band (between the info's quantiles)
    as a shaded area; x is GPU-seconds or GPU measurements. Points where no run had timed anything are left out."""
    go = graph_objects()
    fig = go.Figure()
    band = ("min-max" if info.quantiles == (0.0, 1.0) else
            f"{info.quantiles[0]:.0%}-{info.quantiles[1]:.0%}")
    for i, c in enumerate(info.curves):
        colour = _COLOURS[i % len(_COLOURS)]
        pts = [(x, m, lo, hi, n) for x, m, lo, hi, n in zip(c.x, c.median, c.lo, c.hi, c.n) if n]
        xs = [p[0] for p in pts]
        fig.add_trace(go.Scatter(x=xs, y=[p[3] for p in pts], mode="lines", line=dict(width=0, shape="hv"),
                                 showlegend=False, hoverinfo="skip", legendgroup=c.label))
        fig.add_trace(go.Scatter(x=xs, y=[p[2] for p in pts], mode="lines", line=dict(width=0, shape="hv"),
                                 fill="tonexty", fillcolor=_rgba(colour, 0.2), showlegend=False, hoverinfo="skip",
                                 legendgroup=c.label))
        fig.add_trace(go.Scatter(x=xs, y=[p[1] for p in pts], mode="lines",
                                 line=dict(color=colour, shape="hv", dash=DASHES[i % len(DASHES)], width=2.5),
                                 name=f"{c.label} ({len(c.runs)} runs)", legendgroup=c.label,
                                 customdata=[[p[2], p[3], p[4]] for p in pts],
                                 hovertemplate=(f"{c.label}<br>%{{x:.3g}}: median best %{{y:.3g}}x "
                                                f"({band} %{{customdata[0]:.3g}}-%{{customdata[1]:.3g}}x over "
                                                "%{customdata[2]} runs)<extra></extra>")))
    ys = [v for c in info.curves for v, n in zip(c.lo + c.hi + c.median, c.n * 3) if n]
    y_range = padded_range(ys, include=1.0)
    if y_range is None or y_range[0] <= 1.0 <= y_range[1]:
        fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    layout(fig, title or f"best speedup vs {X_TITLES[info.x]}: median over seeds, {band} band", height=460,
           xaxis_title=X_TITLES[info.x], yaxis_title="best speedup vs eager")
    if y_range is not None:
        fig.update_yaxes(range=y_range)  # fit the data: the range where configurations differ is not squashed
    return fig
