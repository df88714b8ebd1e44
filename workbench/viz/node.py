"""One node of a search in detail: its source, its parent's, the diff between them, its last stage record, the
surrogate's forecast for it (the outcome distribution, its confidence, the selective policy's decision) and the
profiler's findings on it. `render_node_detail` gives Markdown, `render_node_detail_html` HTML (a widget's panel),
`get_forecast_info` / `plot_forecast` the forecast against the measured outcome."""
from __future__ import annotations

import dataclasses
import difflib
import html
import json
import math
from typing import TYPE_CHECKING, Any

from ..core.outcomes import BINS, EDGES, FAILS, outcome_index
from ..core.records import StageRecord
from ._plotly import graph_objects, layout

if TYPE_CHECKING:  # a Search loads torch and triton; this view only reads one
    from ..search.search import Search
    from ..search.tree import Node


@dataclasses.dataclass
class NodeDetailInfo:
    nid: int
    parent: int | None
    move: str
    candidate: str  # content hash
    status: str
    stage: str
    reason: str
    fidelity: str
    speedup: float | None  # vs eager
    speedup_vs_compile: float | None
    candidate_ms: float | None
    parent_speedup: float | None
    choice: dict[str, Any]
    source: str
    parent_source: str | None
    diff: str  # unified diff against the parent ("" for the root)
    last_stage: StageRecord | None
    forecast: dict[str, Any] | None = None  # probs (9 outcomes vs eager), point, confidence, decision; None unscreened
    findings: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # Finding dicts, most severe first
    skipped: bool = False  # kept off the GPU by the surrogate

    @property
    def status_line(self) -> str:
        """The status in words, without contradicting itself: a node timed at quick timing whose full timing was
        not run says so, rather than "measured at full_timing: not measured"."""
        ls = self.last_stage
        if self.skipped:
            return self.reason or "skipped by the surrogate"
        if self.status == "measured" and ls is not None and self.fidelity and ls.name != self.fidelity:
            return (f"measured at {self.fidelity}; {ls.name} {ls.verdict}" + (f": {ls.reason}" if ls.reason else "")
                    + (" (may be retried)" if ls.retry else ""))
        return f"{self.status} at {self.stage or '—'}" + (f": {self.reason}" if self.reason else "")


def get_node_detail_info(search: Search, nid: int | None = None) -> NodeDetailInfo:
    """Node `nid` (default: the best node, else the latest). Sources are rendered again from the node's point by the
    search's proposer (rendering is deterministic, so this is the text that was evaluated), or are the node's own
    for an LLM-written module; the last stage record comes from the node's event."""
    if nid is None:
        if not search.tree.nodes:
            raise KeyError("the search has no nodes yet: step it first")
        nid = search.best.nid if search.best is not None else max(search.tree.nodes)
    if nid not in search.tree.nodes:
        raise KeyError(f"no node {nid} in this search (it has {len(search.tree.nodes)} nodes)")
    node = search.tree.nodes[nid]
    source = _source(search, node)
    parent = search.tree.nodes[node.parent] if node.parent is not None else None
    parent_source = _source(search, parent) if parent is not None else None
    diff = ""
    if parent_source is not None:
        diff = "".join(difflib.unified_diff(parent_source.splitlines(keepends=True), source.splitlines(keepends=True),
                                            fromfile=f"#{parent.nid} {parent.candidate}",
                                            tofile=f"#{nid} {node.candidate}"))
    event = next((e for e in search.events if e.get("type") == "node" and e.get("nid") == nid), None) or {}
    last = event.get("last_stage")
    choice = node.choice.to_dict() if hasattr(node.choice, "to_dict") else dict(node.choice or {})
    findings = event.get("findings") or getattr(node, "findings", None) or []
    return NodeDetailInfo(nid, node.parent, node.move, node.candidate, str(node.status), node.stage, node.reason,
                          node.fidelity, node.speedup, node.speedup_vs_compile, node.candidate_ms,
                          parent.speedup if parent is not None else None, choice, source, parent_source, diff,
                          StageRecord.from_dict(last) if last else None,
                          event.get("forecast") or getattr(node, "forecast", None), _sorted_findings(findings),
                          bool(event.get("skipped")) or str(node.status) == "skipped")


_SEVERITY = {"critical": 0, "warning": 1, "info": 2}


def _sorted_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(findings, key=lambda f: _SEVERITY.get(f.get("severity", "info"), 3))


def _source(search: Search, node: Node) -> str:
    return node.source if node.source is not None else search.proposer.render(node.choice).source


def _x(v: float | None) -> str:
    return f"{v:.3g}x" if v else "—"


# ---------------------------------------------------------------------------------------------- the forecast


def outcome_labels() -> list[str]:
    """The 9 outcomes in speedup terms (the bins' log2 edges as speedups), then "fails"."""
    sp = [f"{2.0 ** e:.2g}" for e in EDGES]
    return [f"<{sp[0]}x"] + [f"{a}-{b}x" for a, b in zip(sp, sp[1:])] + [f">={sp[-1]}x", BINS[FAILS]]


@dataclasses.dataclass
class ForecastInfo:
    """A node's forecast against what was measured. `measured`: the outcome index the measurement fell in (a
    speedup bin, or "fails"), None where nothing decided it (skipped, or not timed)."""
    labels: list[str]
    probs: list[float]
    confidence: float
    decision: str
    point: float | None  # expected log2 speedup given no failure
    measured: int | None
    measured_speedup: float | None

    @property
    def top(self) -> int:
        return max(range(len(self.probs)), key=self.probs.__getitem__)

    @property
    def hit(self) -> bool | None:
        """The most likely outcome was the measured one (None when nothing was measured)."""
        return None if self.measured is None else self.top == self.measured

    def words(self) -> str:
        """One sentence: what the surrogate expected, how sure it was, what the policy did, what happened."""
        top = self.top
        exp = f", expected {2.0 ** self.point:.3g}x if it runs" if self.point is not None else ""
        text = (f"forecast: most likely {self.labels[top]} (p={self.probs[top]:.2f}), p(fails)={self.probs[FAILS]:.2f}"
                f"{exp}; confidence {self.confidence:.2f}; the policy decided **{self.decision or '—'}**")
        if self.measured is not None:
            got = self.labels[self.measured] + (f" ({self.measured_speedup:.3g}x)" if self.measured_speedup else "")
            text += f"; measured: {got}, " + ("as forecast" if self.hit else
                                              f"which it gave p={self.probs[self.measured]:.2f}")
        return text


def get_forecast_info(info: NodeDetailInfo) -> ForecastInfo | None:
    """The node's forecast (None when the search did not screen it)."""
    f = info.forecast
    if not f or not f.get("probs"):
        return None
    if info.status == "measured" and info.speedup:
        measured = outcome_index(info.speedup)
    elif info.status == "failed":
        measured = FAILS
    else:
        measured = None
    point = f.get("point")
    return ForecastInfo(outcome_labels(), [float(p) for p in f["probs"]], float(f.get("confidence") or 0.0),
                        str(f.get("decision") or ""), float(point) if point is not None and math.isfinite(point)
                        else None, measured, info.speedup if measured is not None else None)


def plot_forecast(info: ForecastInfo | NodeDetailInfo, title: str | None = None):
    """The forecast's 9 outcome probabilities as bars; the measured outcome's bar outlined and marked."""
    go = graph_objects()
    if isinstance(info, NodeDetailInfo):
        nid, info = info.nid, get_forecast_info(info)
        if info is None:
            raise ValueError(f"node #{nid} has no forecast (the search did not screen)")
    colours = ["#9e9e9e" if i == FAILS else "#4a7fb5" for i in range(len(info.labels))]
    widths = [3 if i == info.measured else 0 for i in range(len(info.labels))]
    fig = go.Figure(go.Bar(x=info.labels, y=info.probs, marker=dict(color=colours, line=dict(color="#d62728",
                                                                                                width=widths)),
                           hovertemplate="%{x}: p=%{y:.3f}<extra></extra>", name="forecast"))
    if info.measured is not None:
        fig.add_annotation(x=info.labels[info.measured], y=info.probs[info.measured], text="measured",
                           showarrow=True, arrowhead=2, ay=-30, font=dict(color="#d62728"))
    layout(fig, title or f"forecast vs eager: confidence {info.confidence:.2f}, decision {info.decision or '—'}",
           height=300, legend=False, showlegend=False, yaxis_title="probability", xaxis_title="speedup vs eager")
    fig.update_yaxes(range=[0, max(info.probs + [0.1]) * 1.2])
    return fig


# ---------------------------------------------------------------------------------------------- rendering


def _finding_line(f: dict[str, Any]) -> str:
    kernel = f" [{f['kernel']}]" if f.get("kernel") else ""
    move = f" (move: {f['move']})" if f.get("move") else ""
    return f"**{f.get('severity', 'info')}** {f.get('title', '')}{kernel}: {f.get('advice', '')}{move}"


def _body(info: NodeDetailInfo, max_lines: int) -> tuple[str, str, list[str]]:
    body, lang, what = (info.diff, "diff", "diff against the parent") if info.parent_source is not None else \
        (info.source, "python", "source")
    text = body.splitlines() or ["(no difference)"]
    if len(text) > max_lines:
        text = text[:max_lines] + [f"... {len(text) - max_lines} more lines"]
    return what, lang, text


def render_node_detail(info: NodeDetailInfo, max_lines: int = 200) -> str:
    """Markdown (readable as plain text): the facts, the forecast and the policy's decision, the findings, the last
    stage, then the diff against the parent (the root shows its source), cut at `max_lines` lines."""
    lines = [f"### node #{info.nid} ({info.candidate})",
             "",
             f"- move: {info.move}" + (f" from #{info.parent}" if info.parent is not None else ""),
             f"- status: {info.status_line}",
             f"- fidelity: {info.fidelity or '—'}",
             f"- speedup vs eager: {_x(info.speedup)} (parent {_x(info.parent_speedup)}), "
             f"vs torch.compile: {_x(info.speedup_vs_compile)}"
             + (f", {info.candidate_ms:.4g} ms" if info.candidate_ms else ""),
             f"- point: `{json.dumps(info.choice, sort_keys=True)}`"]
    fc = get_forecast_info(info)
    if fc is not None:
        lines.append(f"- {fc.words()}")
    if info.last_stage is not None:
        ls = info.last_stage
        data = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in ls.data.items()
                         if not isinstance(v, (dict, list)))
        lines += [f"- last stage: {ls.name} {ls.verdict} ({ls.gpu_s:.3g} GPU-s)" + (f"; {data}" if data else "")]
    if info.findings:
        lines += ["", f"findings ({len(info.findings)}):", *[f"- {_finding_line(f)}" for f in info.findings]]
    what, lang, text = _body(info, max_lines)
    lines += ["", f"{what}:", f"```{lang}", *text, "```"]
    return "\n".join(lines)


_DIFF_STYLE = {"+": "background:#e6ffec;color:#116329", "-": "background:#ffebe9;color:#82071e",
               "@": "color:#0550ae;background:#ddf4ff"}
_PRE = "margin:4px 0;padding:6px;font-size:12px;line-height:1.35;background:#f6f8fa;overflow-x:auto;white-space:pre"


def _diff_html(lines: list[str]) -> str:
    out = []
    for line in lines:
        style = _DIFF_STYLE.get(line[:1], "") if not line.startswith(("+++", "---")) else "color:#57606a"
        out.append(f"<span style='display:block;{style}'>{html.escape(line) or ' '}</span>")
    return f"<pre style='{_PRE}'>{''.join(out)}</pre>"


def _source_html(source: str) -> str:
    """The source with Python syntax colours (pygments, which IPython brings) or plain."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:  # pragma: no cover - pygments comes with IPython
        return f"<pre style='{_PRE}'>{html.escape(source)}</pre>"
    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nowrap=False,
                                                           cssstyles=_PRE, prestyles="margin:0"))


def _forecast_html(fc: ForecastInfo) -> str:
    cells = []
    for i, (label, p) in enumerate(zip(fc.labels, fc.probs)):
        w = int(round(60 * p))
        mark = "outline:2px solid #d62728;" if i == fc.measured else ""
        colour = "#9e9e9e" if i == FAILS else "#4a7fb5"
        cells.append(f"<tr><td style='padding:0 6px;text-align:right;{mark}'>{html.escape(label)}</td>"
                     f"<td style='padding:0 6px'><span style='display:inline-block;height:9px;width:{w}px;"
                     f"background:{colour}'></span> {p:.2f}" + (" ← measured" if i == fc.measured else "")
                     + "</td></tr>")
    words = html.escape(fc.words()).replace("**", "")
    return (f"<p style='margin:4px 0'>{words}</p><table style='font-size:12px;border-collapse:collapse'>"
            f"{''.join(cells)}</table>")


def render_node_detail_html(info: NodeDetailInfo, max_lines: int = 200, full_source: bool = True) -> str:
    """HTML for a widget's node panel: a facts table, the forecast as bars against the measured outcome, the
    findings in words, the diff against the parent coloured line by line, and the full source (syntax-coloured,
    folded) below it."""
    e = html.escape
    rows = [("move", info.move + (f" from #{info.parent}" if info.parent is not None else "")),
            ("status", info.status_line), ("fidelity", info.fidelity or "—"),
            ("speedup vs eager", f"{_x(info.speedup)} (parent {_x(info.parent_speedup)})"),
            ("vs torch.compile", _x(info.speedup_vs_compile)),
            ("time", f"{info.candidate_ms:.4g} ms" if info.candidate_ms else "—")]
    if info.last_stage is not None:
        ls = info.last_stage
        rows.append(("last stage", f"{ls.name} {ls.verdict} ({ls.gpu_s:.3g} GPU-s)"))
    rows.append(("point", json.dumps(info.choice, sort_keys=True)))
    table = "".join(f"<tr><th style='text-align:left;padding:1px 8px 1px 0;vertical-align:top'>{e(k)}</th>"
                    f"<td style='padding:1px 0'>{e(str(v))}</td></tr>" for k, v in rows)
    parts = [f"<div style='font-size:13px'><h4 style='margin:6px 0'>node #{info.nid} "
             f"<code>{e(info.candidate)}</code></h4><table style='border-collapse:collapse'>{table}</table>"]
    fc = get_forecast_info(info)
    if fc is not None:
        parts.append(f"<h5 style='margin:8px 0 2px'>surrogate</h5>{_forecast_html(fc)}")
    if info.findings:
        items = "".join("<li>" + e(_finding_line(f)).replace("**", "") + "</li>" for f in info.findings)
        parts.append(f"<h5 style='margin:8px 0 2px'>findings ({len(info.findings)})</h5>"
                     f"<ul style='margin:0;padding-left:18px'>{items}</ul>")
    what, _, text = _body(info, max_lines)
    body = _diff_html(text) if info.parent_source is not None else _source_html("\n".join(text))
    parts.append(f"<h5 style='margin:8px 0 2px'>{e(what)}</h5>{body}")
    if full_source and info.parent_source is not None:
        parts.append(f"<details><summary>full source ({len(info.source.splitlines())} lines)</summary>"
                     f"{_source_html(info.source)}</details>")
    parts.append("</div>")
    return "".join(parts)
