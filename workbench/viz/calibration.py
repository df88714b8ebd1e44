"""Surrogates side by side: reliability diagrams, risk-coverage curves and budget-recall curves.

Every `get_*_info` takes a mapping `{surrogate name: DataFrame}` of plain per-candidate columns, so held-out
predictions from `workbench.surrogates.evaluate`, the roofline surrogate on dataset rows or anything else can feed
it:

- reliability: `confidence` (the top outcome probability) and `correct` (1 when that outcome was the measured one);
- risk-coverage: `confidence` and `error` (the loss if the forecast is accepted, e.g. 1 - correct);
- budget recall: `problem` (the pool), `score` (higher: measure first) and `speedup` (measured; NaN or <= 0 for a
  candidate that failed).

The numbers come from `workbench.metrics` (pure numpy/pandas); only `plot_*` import plotly.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..metrics import aurc, budget_recall, expected_calibration_error, reliability_table, risk_coverage
from ._plotly import DASHES, graph_objects, layout


def _need(frames: Mapping[str, Any], cols: Sequence[str]) -> None:
    if not frames:
        raise ValueError("no surrogates given")
    for name, df in frames.items():
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{name}: missing column(s) {missing} (have {list(df.columns)})")


@dataclasses.dataclass
class ReliabilityInfo:
    """Per surrogate: the reliability table's rows (mean confidence, accuracy and count per confidence bin, empty
    bins dropped) and its expected calibration error."""
    n_bins: int
    binning: str
    names: list[str]
    confidence: dict[str, list[float]]
    accuracy: dict[str, list[float]]
    count: dict[str, list[int]]
    ece: dict[str, float]


def get_reliability_info(frames: Mapping[str, Any], n_bins: int = 15, binning: str = "width") -> ReliabilityInfo:
    _need(frames, ["confidence", "correct"])
    conf, acc, cnt, ece = {}, {}, {}, {}
    for name, df in frames.items():
        # the binning argument only when asked for: "width" is what every version of the metric does
        extra = {} if binning == "width" else {"binning": binning}
        t = reliability_table(df["confidence"], df["correct"], n_bins, **extra)
        t = t[t["count"] > 0]
        conf[name] = t["confidence"].astype(float).tolist()
        acc[name] = t["accuracy"].astype(float).tolist()
        cnt[name] = t["count"].astype(int).tolist()
        ece[name] = expected_calibration_error(df["confidence"], df["correct"], n_bins, **extra)
    return ReliabilityInfo(n_bins, binning, list(frames), conf, acc, cnt, ece)


@dataclasses.dataclass
class RiskCoverageInfo:
    """Per surrogate: coverage (fraction accepted, most confident first) and risk (mean error of the accepted), thinned
    to at most `max_points` points, the full curve's area (AURC) and the error rate at full coverage."""
    names: list[str]
    coverage: dict[str, list[float]]
    risk: dict[str, list[float]]
    aurc: dict[str, float]
    full_risk: dict[str, float]


def get_risk_coverage_info(frames: Mapping[str, Any], max_points: int = 200) -> RiskCoverageInfo:
    _need(frames, ["confidence", "error"])
    cov, risk, area, full = {}, {}, {}, {}
    for name, df in frames.items():
        rc = risk_coverage(df["confidence"], df["error"])
        step = max(1, math.ceil(len(rc) / max_points))
        keep = sorted(set(range(step - 1, len(rc), step)) | ({len(rc) - 1} if len(rc) else set()))
        cov[name] = rc["coverage"].iloc[keep].astype(float).tolist()
        risk[name] = rc["risk"].iloc[keep].astype(float).tolist()
        area[name] = aurc(df["confidence"], df["error"])
        full[name] = float(rc["risk"].iloc[-1]) if len(rc) else float("nan")
    return RiskCoverageInfo(list(frames), cov, risk, area, full)


DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1.0)


@dataclasses.dataclass
class BudgetRecallInfo:
    """Per surrogate and budget (a fraction of each problem's pool measured in score order, at least one
    candidate): the fraction of problems where that finds a kernel within `within` of the pool's best (`hit_rate`)
    and the mean of best-found / pool-best (`mean_ratio`). Problems with no working candidate are left out."""
    within: float
    fractions: list[float]
    problems: int
    names: list[str]
    hit_rate: dict[str, list[float]]
    mean_ratio: dict[str, list[float]]


def get_budget_recall_info(frames: Mapping[str, Any], fractions: Sequence[float] = DEFAULT_FRACTIONS,
                           within: float = 0.05) -> BudgetRecallInfo:
    _need(frames, ["problem", "score", "speedup"])
    fr = [float(f) for f in fractions]
    if any(not 0 < f <= 1 for f in fr):
        raise ValueError("fractions must be in (0, 1]")
    hits, ratios, n_problems = {}, {}, None
    for name, df in frames.items():
        per = []
        for _, g in df.groupby("problem", sort=True):
            speed = g["speedup"].to_numpy(float)
            if not (np.isfinite(speed) & (speed > 0)).any():
                continue
            ks = [max(1, math.ceil(f * len(g))) for f in fr]
            per.append(budget_recall(g["score"].to_numpy(float), speed, ks, within=within))
        if n_problems is not None and len(per) != n_problems:
            raise ValueError(f"{name}: {len(per)} problems with a working candidate, others have {n_problems}")
        n_problems = len(per)
        hits[name] = [float(np.mean([p["hit"].iloc[j] for p in per])) if per else float("nan")
                      for j in range(len(fr))]
        ratios[name] = [float(np.mean([p["ratio"].iloc[j] for p in per])) if per else float("nan")
                        for j in range(len(fr))]
    return BudgetRecallInfo(within, fr, n_problems or 0, list(frames), hits, ratios)


# ---------------------------------------------------------------------------------------------- figures

_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


def _layout(fig, title: str, x: str, y: str) -> None:
    layout(fig, title, height=480, xaxis_title=x, yaxis_title=y)


def plot_reliability(info: ReliabilityInfo, title: str | None = None):
    """Accuracy against mean confidence per bin, one line per surrogate (marker size ~ count), and the diagonal
    a calibrated forecaster would lie on."""
    go = graph_objects()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="grey"),
                             name="calibrated", hoverinfo="skip"))
    for i, name in enumerate(info.names):
        cnt = info.count[name]
        total = max(sum(cnt), 1)
        fig.add_trace(go.Scatter(
            x=info.confidence[name], y=info.accuracy[name], mode="lines+markers", name=f"{name} (ECE "
            f"{info.ece[name]:.3f})", line=dict(color=_COLOURS[i % len(_COLOURS)], dash=DASHES[i % len(DASHES)]),
            customdata=cnt,
            marker=dict(size=[6 + 24 * math.sqrt(c / total) for c in cnt]),
            hovertemplate=f"{name}<br>confidence %{{x:.3f}}<br>accuracy %{{y:.3f}}<br>%{{customdata}} candidates"
                          "<extra></extra>"))
    _layout(fig, title or f"reliability ({info.n_bins} equal-{'width' if info.binning == 'width' else 'mass'} bins; "
                          "marker area: candidates in the bin)",
            "mean confidence (top outcome probability)", "accuracy of the top outcome")
    fig.update_xaxes(range=[0, 1])
    fig.update_yaxes(range=[0, 1])
    return fig


def plot_risk_coverage(info: RiskCoverageInfo, title: str | None = None):
    """Risk (mean error of the accepted forecasts) against coverage (fraction accepted, most confident first)."""
    go = graph_objects()
    fig = go.Figure()
    for i, name in enumerate(info.names):
        fig.add_trace(go.Scatter(x=info.coverage[name], y=info.risk[name], mode="lines",
                                 name=f"{name} (AURC {info.aurc[name]:.3f})",
                                 line=dict(color=_COLOURS[i % len(_COLOURS)], dash=DASHES[i % len(DASHES)]),
                                 hovertemplate=f"{name}<br>coverage %{{x:.3f}}<br>risk %{{y:.3f}}<extra></extra>"))
    _layout(fig, title or "risk-coverage (lower is better)", "coverage (fraction of forecasts accepted)",
            "risk (error rate of the accepted)")
    fig.update_xaxes(range=[0, 1])
    return fig


def plot_budget_recall(info: BudgetRecallInfo, title: str | None = None):
    """Fraction of problems where measuring the top fraction of the pool by score finds a kernel within `within` of
    the pool's best, against that fraction (log x)."""
    go = graph_objects()
    fig = go.Figure()
    for i, name in enumerate(info.names):
        fig.add_trace(go.Scatter(x=info.fractions, y=info.hit_rate[name], mode="lines+markers", name=name,
                                 line=dict(color=_COLOURS[i % len(_COLOURS)], dash=DASHES[i % len(DASHES)]),
                                 customdata=info.mean_ratio[name],
                                 hovertemplate=(f"{name}<br>%{{x:.0%}} of each pool measured<br>%{{y:.0%}} of "
                                                f"problems within {info.within:.0%} of the best<br>mean best-found/"
                                                "best %{customdata:.3f}<extra></extra>")))
    _layout(fig, title or f"budget recall over {info.problems} problems: within {info.within:.0%} of each pool's best",
            "fraction of each pool measured, in score order", "fraction of problems")
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[0, 1.05])
    return fig
