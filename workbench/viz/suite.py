"""The suite benchmark: per problem, the best sampled candidate's full timing against eager, torch.compile and the
roofline floor, from the shipped dataset (`full.parquet` + `problems.parquet`, `workbench.store.dataset.load`).

The suite benchmark's rows (`results/suite/rows.jsonl`, `workbench.lab.reports.suite_benchmark_data`) come in the same
shape, with a max-autotune column.

`full` holds one row per full timing (a problem may have several: a later slice with a larger pool may have found a
better best): the latest (`t`) per problem key stands, the rule of the dataset's SUMMARY.md. The floor is
`problems.parquet`'s roofline floor on the H200 (measured copy bandwidth and GEMM rates), falling back to the one
stored with the full timing. "Fraction of floor" = floor_ms / time: 1 at the floor; above 1 the ceiling is not a
bound for that kernel (a read-mostly reduction streams faster than a copy; tf32x3 beats the fp32 SIMT rate).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from ._plotly import graph_objects, layout

SORT_KEYS = ("problem", "speedup_vs_eager", "speedup_vs_compile", "floor_fraction")


@dataclasses.dataclass
class SuiteInfo:
    """Parallel lists, one entry per problem whose full timing succeeded, in the chosen order."""
    problems: list[str]
    bound: list[str]  # "memory" / "compute" (the floor's dominant term), "" when unknown
    candidate_ms: list[float]
    eager_ms: list[float]
    compile_ms: list[float]
    floor_ms: list[float]
    speedup_vs_eager: list[float]
    speedup_vs_compile: list[float]
    floor_fraction: list[float]  # floor / candidate
    eager_floor_fraction: list[float]  # floor / eager
    compile_floor_fraction: list[float]  # floor / torch.compile
    failed: list[str]  # problems whose latest full timing failed
    # vs torch.compile(mode="max-autotune"), where the timing had that reference (the suite benchmark's rows)
    speedup_vs_max_autotune: list[float] | None = None

    def __len__(self) -> int:
        return len(self.problems)

    @staticmethod
    def _geo(xs: list[float]) -> float:
        xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    @property
    def geomean_vs_eager(self) -> float:
        return self._geo(self.speedup_vs_eager)

    @property
    def geomean_vs_compile(self) -> float:
        return self._geo(self.speedup_vs_compile)

    @property
    def geomean_vs_max_autotune(self) -> float | None:
        return self._geo(self.speedup_vs_max_autotune) if self.speedup_vs_max_autotune else None

    def text(self) -> str:
        """One paragraph: how many problems, the geo-means, where the floor is reached."""
        near = sum(f >= 0.9 for f in self.floor_fraction)
        return (f"{len(self)} problems with a full timing ({len(self.failed)} failed: "
                f"{', '.join(self.failed) or 'none'}). Geo-mean speedup of the best sampled candidate: "
                f"{self.geomean_vs_eager:.3g}x vs eager, {self.geomean_vs_compile:.3g}x vs torch.compile"
                + (f", {self.geomean_vs_max_autotune:.3g}x vs max-autotune" if self.speedup_vs_max_autotune else "")
                + "; "
                f"{sum(s > 1 for s in self.speedup_vs_compile)} problems beat torch.compile, {near} are within 90 % "
                "of the roofline floor or past it.")

    def frame(self):
        import pandas as pd

        cols = [f.name for f in dataclasses.fields(self) if f.name != "failed" and getattr(self, f.name) is not None]
        return pd.DataFrame({c: getattr(self, c) for c in cols})


def get_suite_info(full, problems=None, only: Sequence[str] = (), sort_by: str = "speedup_vs_eager") -> SuiteInfo:
    """`full`, `problems`: the dataset's DataFrames (`load("full")`, `load("problems")`); `only`: problem names to
    keep (all when empty); `sort_by`: one of SORT_KEYS (descending for the numbers)."""
    if sort_by not in SORT_KEYS:
        raise ValueError(f"sort_by must be one of {SORT_KEYS}, not {sort_by!r}")
    f = full.sort_values("t", kind="stable").groupby("problem_key", as_index=False).last()
    if only:
        unknown = sorted(set(only) - set(f["problem"]))
        if unknown:
            raise ValueError(f"no full timing of {unknown}; the dataset has {sorted(f['problem'])}")
        f = f[f["problem"].isin(list(only))]
    if problems is not None:
        f = f.merge(problems[["problem_key", "floor_ms", "floor_bound"]], on="problem_key", how="left",
                    suffixes=("", "_p"))
        f["floor_ms"] = f["floor_ms_p"].where(f["floor_ms_p"].notna(), f["floor_ms"])
        if "floor_bound_p" in f:  # the rows carry their own bound: the problems table's wins where it has one
            f["floor_bound"] = f["floor_bound_p"].where(f["floor_bound_p"].notna(), f["floor_bound"])
    else:
        f["floor_bound"] = ""
    failed = sorted(f.loc[~f["ok"].astype(bool), "problem"])
    f = f[f["ok"].astype(bool)].copy()
    f["floor_fraction"] = f["floor_ms"] / f["candidate_ms"]
    f["eager_floor_fraction"] = f["floor_ms"] / f["eager_ms"]
    f["compile_floor_fraction"] = f["floor_ms"] / f["compile_ms"]
    f = f.sort_values(sort_by, ascending=sort_by == "problem", kind="stable")
    col = lambda c: [float(v) for v in f[c]]  # noqa: E731
    autotune = col("speedup_vs_max_autotune") if "speedup_vs_max_autotune" in f and \
        f["speedup_vs_max_autotune"].notna().any() else None
    return SuiteInfo(list(f["problem"]), [str(b) if isinstance(b, str) else "" for b in f["floor_bound"]],
                     col("candidate_ms"), col("eager_ms"), col("compile_ms"), col("floor_ms"),
                     col("speedup_vs_eager"), col("speedup_vs_compile"), col("floor_fraction"),
                     col("eager_floor_fraction"), col("compile_floor_fraction"), failed, autotune)


def plot_suite_speedups(info: SuiteInfo, title: str | None = None):
    """Grouped bars per problem: the best candidate's speedup vs eager and vs torch.compile (log y, 1x dotted)."""
    go = graph_objects()
    fig = go.Figure()
    series = [("vs eager", info.speedup_vs_eager, "#1f77b4"), ("vs torch.compile", info.speedup_vs_compile, "#ff7f0e")]
    if info.speedup_vs_max_autotune:
        series.append(("vs max-autotune", info.speedup_vs_max_autotune, "#2ca02c"))
    # hatched bars: compute-bound problems (the roofline floor's dominant term); plain: memory-bound
    pattern = ["/" if b == "compute" else "" for b in info.bound]
    for name, ys, colour in series:
        fig.add_trace(go.Bar(x=info.problems, y=ys, name=name, marker=dict(color=colour, pattern_shape=pattern),
                             customdata=[b or "?" for b in info.bound],
                             hovertemplate=f"%{{x}} (%{{customdata}}-bound)<br>{name}: %{{y:.3g}}x<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    layout(fig, title or (
        f"best sampled candidate per problem (full timing, H200): geo-mean {info.geomean_vs_eager:.3g}x eager, "
        f"{info.geomean_vs_compile:.3g}x torch.compile; hatched: compute-bound"), height=max(480, 14 * len(info)),
        barmode="group", yaxis_title="speedup (log)", yaxis_type="log", xaxis_tickangle=-45)
    fig.update_yaxes(dtick="D2")  # log minor ticks labelled 2 and 5 only
    return fig


def plot_floor_fraction(info: SuiteInfo, title: str | None = None):
    """Per problem, the fraction of the roofline floor reached (floor / time) by the best candidate, torch.compile
    and eager; 100 % dotted. Markers: circle memory-bound, diamond compute-bound."""
    go = graph_objects()
    fig = go.Figure()
    symbols = ["diamond" if b == "compute" else "circle" for b in info.bound]
    for name, ys, colour in (("best candidate", info.floor_fraction, "#1f77b4"),
                             ("torch.compile", info.compile_floor_fraction, "#ff7f0e"),
                             ("eager", info.eager_floor_fraction, "#7f7f7f")):
        fig.add_trace(go.Scatter(x=info.problems, y=ys, mode="markers", name=name,
                                 marker=dict(color=colour, size=10, symbol=symbols), customdata=info.bound,
                                 hovertemplate=f"%{{x}} (%{{customdata}}-bound)<br>{name}: %{{y:.0%}} of the floor"
                                               "<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    layout(fig, title or "fraction of the roofline floor reached (floor / time); circle: memory-bound, diamond: "
                         "compute-bound", height=480, yaxis_title="floor / time", yaxis_tickformat=".0%",
           xaxis_tickangle=-45)
    return fig
