"""A KernelBench run (`workbench kernelbench`, its report.json): fast_p curves over p against eager and torch.compile
per level, and per-file speedup bars. `get_kernelbench_info` computes plain data from the report (no plotly);
`plot_fast_p` and `plot_file_speedups` draw it.

fast_p(p) = fraction of the files that are correct and faster than p times the baseline (KernelBench's metric, the
rule of `workbench.lab.kernelbench_report`, applied here to the report's plain rows: viz sits below lab); a run
without timing (the CPU device) has no curves, and the info says so.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ._plotly import graph_objects, layout

BASELINE_KEYS = {"eager": "speedup_vs_eager", "compile": "speedup_vs_compile"}
DEFAULT_P = tuple(round(0.1 * i, 2) for i in range(31))  # 0 .. 3 by 0.1


@dataclasses.dataclass
class KernelBenchInfo:
    """`curves[baseline][level]`: fast_p at each of `p` (levels in order, then "overall"); empty when untimed.
    Per-file lists are parallel, in the report's file order; a speedup is None where no correct timed candidate."""
    run: str
    timed: bool
    p: list[float]
    curves: dict[str, dict[str, list[float]]]
    files: list[str]
    levels: list[str]
    correct: list[bool]
    generated: list[bool]
    speedup_vs_eager: list[float | None]
    speedup_vs_compile: list[float | None]
    reasons: list[str]

    def __len__(self) -> int:
        return len(self.files)

    def text(self) -> str:
        n = len(self)
        if not n:
            return f"run {self.run}: no files"
        correct, kernel = sum(self.correct), sum(c and g for c, g in zip(self.correct, self.generated))
        head = (f"run {self.run}: {n} files, {correct} correct ({correct / n:.0%}), {kernel} with a correct "
                f"generated kernel ({kernel / n:.0%})")
        if not self.timed:
            return head + "; timing not measured (CPU device): no fast_p curves or speedups."
        overall = {b: dict(zip(self.p, self.curves[b]["overall"])) for b in self.curves}
        return head + "; " + ", ".join(f"fast_1 vs {b} {overall[b].get(1.0, float('nan')):.0%}" for b in overall)


def _speedup(row: dict[str, Any], key: str) -> float | None:
    """A row's speedup where it counts: correct, timed, positive and finite."""
    s = row.get(key)
    ok = row.get("correct") and row.get("timed") and s is not None and s > 0 and math.isfinite(s)
    return s if ok else None


def _fast_p(rows: list[dict[str, Any]], key: str, p: float) -> float:
    return sum(1 for r in rows if (_speedup(r, key) or 0.0) > p) / len(rows) if rows else 0.0


def get_kernelbench_info(report: dict[str, Any], p: Sequence[float] = DEFAULT_P,
                         levels: Sequence[str] = ()) -> KernelBenchInfo:
    """`report`: a run's report.json as a dict (`workbench.lab.kernelbench_report.load_report`); `levels`: keep these
    levels only (all when empty)."""
    rows = list(report.get("files", []))
    if levels:
        rows = [r for r in rows if r["level"] in set(levels)]
    timed = any(r.get("timed") for r in rows)
    level_names = sorted({r["level"] for r in rows})
    curves: dict[str, dict[str, list[float]]] = {}
    if timed:
        for base, key in BASELINE_KEYS.items():
            groups = {lv: [r for r in rows if r["level"] == lv] for lv in level_names}
            groups["overall"] = rows
            curves[base] = {lv: [_fast_p(g, key, x) for x in p] for lv, g in groups.items()}
    return KernelBenchInfo(report.get("run", {}).get("name", ""), timed, list(p), curves, [r["file"] for r in rows],
                           [r["level"] for r in rows], [bool(r.get("correct")) for r in rows],
                           [bool(r.get("generated")) for r in rows],
                           [_speedup(r, "speedup_vs_eager") for r in rows],
                           [_speedup(r, "speedup_vs_compile") for r in rows], [r.get("reason", "") for r in rows])


def plot_fast_p(info: KernelBenchInfo, title: str | None = None):
    """fast_p against p: one line per level (and overall, thicker), solid vs eager, dashed vs torch.compile."""
    go = graph_objects()
    fig = go.Figure()
    colours = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    for base, dash in (("eager", "solid"), ("compile", "dash")):
        for i, (level, ys) in enumerate(info.curves.get(base, {}).items()):
            overall = level == "overall"
            fig.add_trace(go.Scatter(
                x=info.p, y=ys, mode="lines", name=f"{level} vs {base}",
                line=dict(dash=dash, width=4 if overall else 2, color="#000000" if overall else colours[i % 5]),
                hovertemplate=f"{level} vs {base}<br>p %{{x}}: %{{y:.0%}}<extra></extra>"))
    fig.add_vline(x=1.0, line_dash="dot", line_color="grey")
    layout(fig, title or (f"fast_p over p ({info.run})" if info.timed else
                          f"fast_p over p ({info.run}): timing not measured"), height=460,
           xaxis_title="p (speedup threshold)", yaxis_title="fast_p", yaxis_tickformat=".0%", yaxis_range=[0, 1])
    return fig


def plot_file_speedups(info: KernelBenchInfo, title: str | None = None):
    """Grouped bars per file: speedup vs eager and vs torch.compile (log y, 1x dotted); a file with no correct timed
    candidate gets no bar (its hover text in the x labels' order says why)."""
    go = graph_objects()
    fig = go.Figure()
    for name, ys, colour in (("vs eager", info.speedup_vs_eager, "#1f77b4"),
                             ("vs torch.compile", info.speedup_vs_compile, "#ff7f0e")):
        fig.add_trace(go.Bar(x=info.files, y=[y if y is not None else None for y in ys], name=name,
                             marker_color=colour, customdata=info.reasons,
                             hovertemplate=f"%{{x}}<br>{name}: %{{y:.3g}}x<br>%{{customdata}}<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    layout(fig, title or (f"per-file speedup ({info.run})" if info.timed else
                          f"per-file speedup ({info.run}): timing not measured"), height=max(460, 12 * len(info.files)),
           barmode="group", yaxis_title="speedup (log)", yaxis_type="log", xaxis_tickangle=-45)
    return fig
