"""One node of a search in detail: its source, its parent's, the diff between them, and its last stage record."""
from __future__ import annotations

import dataclasses
import difflib
import json
from typing import TYPE_CHECKING, Any

from ..core.records import StageRecord

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
    event = next((e for e in search.events if e.get("type") == "node" and e.get("nid") == nid), None)
    last = event.get("last_stage") if event else None
    choice = node.choice.to_dict() if hasattr(node.choice, "to_dict") else dict(node.choice or {})
    return NodeDetailInfo(nid, node.parent, node.move, node.candidate, node.status, node.stage, node.reason,
                          node.fidelity, node.speedup, node.speedup_vs_compile, node.candidate_ms,
                          parent.speedup if parent is not None else None, choice, source, parent_source, diff,
                          StageRecord.from_dict(last) if last else None)


def _source(search: Search, node: Node) -> str:
    return node.source if node.source is not None else search.proposer.render(node.choice).source


def _x(v: float | None) -> str:
    return f"{v:.3g}x" if v else "—"


def render_node_detail(info: NodeDetailInfo, max_lines: int = 200) -> str:
    """Markdown (readable as plain text): the facts, the last stage, then the diff against the parent (the root shows
    its source), cut at `max_lines` lines."""
    lines = [f"### node #{info.nid} ({info.candidate})",
             "",
             f"- move: {info.move}" + (f" from #{info.parent}" if info.parent is not None else ""),
             f"- status: {info.status} at {info.stage or '—'}" + (f": {info.reason}" if info.reason else ""),
             f"- fidelity: {info.fidelity or '—'}",
             f"- speedup vs eager: {_x(info.speedup)} (parent {_x(info.parent_speedup)}), "
             f"vs torch.compile: {_x(info.speedup_vs_compile)}"
             + (f", {info.candidate_ms:.4g} ms" if info.candidate_ms else ""),
             f"- point: `{json.dumps(info.choice, sort_keys=True)}`"]
    if info.last_stage is not None:
        ls = info.last_stage
        data = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in ls.data.items())
        lines += [f"- last stage: {ls.name} {ls.verdict} ({ls.gpu_s:.3g} GPU-s)" + (f"; {data}" if data else "")]
    body, lang, what = (info.diff, "diff", "diff against the parent") if info.parent_source is not None else \
        (info.source, "python", "source")
    text = body.splitlines() or ["(no difference)"]
    if len(text) > max_lines:
        text = text[:max_lines] + [f"... {len(text) - max_lines} more lines"]
    lines += ["", f"{what}:", f"```{lang}", *text, "```"]
    return "\n".join(lines)
