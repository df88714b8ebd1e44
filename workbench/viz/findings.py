"""Profiler findings (`workbench.profiling.findings.Finding`) as a table: most severe first."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from ..profiling.findings import Finding, sort_findings
from ._plotly import graph_objects

SEVERITY_COLOURS = {"critical": "#f8d0d0", "warning": "#fdf0c8", "info": "#ffffff"}


@dataclasses.dataclass
class FindingsInfo:
    severity: list[str]
    title: list[str]
    advice: list[str]
    move: list[str]
    kernel: list[str]
    tool: list[str]

    def __len__(self) -> int:
        return len(self.title)


def get_findings_info(findings: Iterable[Finding | dict[str, Any]]) -> FindingsInfo:
    fs = sort_findings(f if isinstance(f, Finding) else Finding.from_dict(f) for f in findings)
    return FindingsInfo([f.severity for f in fs], [f.title for f in fs], [f.advice for f in fs],
                        [f.move or "" for f in fs], [f.kernel or "" for f in fs], [f.tool for f in fs])


def plot_findings(findings: Iterable[Finding | dict[str, Any]] | FindingsInfo, title: str = "findings"):
    """A table figure (one `Table` trace, a row per finding): severity, title, advice, move."""
    go = graph_objects()
    info = findings if isinstance(findings, FindingsInfo) else get_findings_info(findings)
    fill = [[SEVERITY_COLOURS.get(s, "#ffffff") for s in info.severity]]
    fig = go.Figure(go.Table(
        columnwidth=[1, 3, 5, 2],
        header=dict(values=["severity", "title", "advice", "move"], align="left", fill_color="#dddddd"),
        cells=dict(values=[info.severity, [t + (f" [{k}]" if k else "") for t, k in zip(info.title, info.kernel)],
                           info.advice, info.move], align="left", fill_color=fill)))
    fig.update_layout(title=title if len(info) else f"{title}: none", margin=dict(t=40, l=10, r=10, b=10))
    return fig
