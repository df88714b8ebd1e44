"""The search tree as data (`get_search_tree_info`) and as a plotly icicle or treemap (`plot_search_tree`).

The info is computed from the search's node events, so a live `Search`, a list of events, or the events a store
holds for a finished search (`Store.search_events`) all give the same picture; what an event means (status, "best")
is `workbench.core.events`'s.
"""
from __future__ import annotations

import dataclasses
import html
import math
from typing import TYPE_CHECKING, Any, Iterable

from ..core import events as ev
from ._plotly import graph_objects, layout, sample_colorscale

if TYPE_CHECKING:  # a Search loads torch and triton; the views only read its events
    from ..search.search import Search

LABEL_WIDTH = 48
FAILED_COLOUR = "#9e9e9e"  # failed nodes: grey
SKIPPED_COLOUR = "#cbb8e8"  # kept off the GPU by the surrogate: lavender (never measured, so never a speedup)
UNMEASURED_COLOUR = "#e6e6e6"  # passed / refused / pending: nothing timed
# deferred: the surrogate was unsure and left the node to the GPU. Its fill stays its measured speedup (or failed
# grey), so the mark and a dark outline are what set it apart from a node the policy measured on a confident forecast
DEFERRED_COLOUR = "#4a2c7a"
DEFERRED_MARK = "◇"
COLOUR_SCALE = "RdBu"
# the tiles' key, besides the speedup scale (status, or "deferred" for the decision -> (legend text, colour))
STATUS_KEY = {"failed": ("failed", FAILED_COLOUR), "skipped": ("skipped by the surrogate", SKIPPED_COLOUR),
              "deferred": (f"{DEFERRED_MARK} deferred: the surrogate was unsure, the GPU decided", DEFERRED_COLOUR),
              "untimed": ("not timed (refused / passed)", UNMEASURED_COLOUR)}
TILE_SIZE_NOTE = ("Tile size: how many leaves (the latest or abandoned proposals) grew from a node, i.e. its share "
                  "of the search; not its speed or cost.")
MAX_DEPTH = 8  # levels drawn at once; deeper ones appear when a tile is clicked (the icicle zooms into it)


@dataclasses.dataclass
class SearchTreeInfo:
    """One entry per node, in evaluation order (lists are parallel)."""
    ids: list[int]
    parents: list[int | None]
    labels: list[str]  # "#<nid> <what changed>", e.g. "#1 g0:ROWS_PER_PROGRAM=1" (the root lists its full config)
    moves: list[str]
    status: list[str]  # measured, failed, refused, passed, skipped (`core.events.NodeStatus`)
    stage: list[str]  # last stage reached
    reason: list[str]
    fidelity: list[str]
    speedup: list[float | None]  # vs eager; None where nothing was timed
    candidates: list[str]
    decision: list[str] = dataclasses.field(default_factory=list)  # the policy's decision ("" when not screened)
    confidence: list[float | None] = dataclasses.field(default_factory=list)  # the forecast's, None when none
    findings: list[int] = dataclasses.field(default_factory=list)  # how many profiler findings the node has

    def __len__(self) -> int:
        return len(self.ids)

    def deferred(self, i: int) -> bool:
        """Whether the screening policy deferred node i to the GPU (an unsure forecast)."""
        return bool(self.decision) and self.decision[i] == "defer"

    def tile_text(self, i: int) -> str:
        """What a tile says first: its speedup when timed, else its status; `DEFERRED_MARK` after it when the
        surrogate deferred the node."""
        s, st = self.speedup[i], self.status[i]
        text = f"{s:.3g}x" if s else st
        return f"{text} {DEFERRED_MARK}" if self.deferred(i) else text

    @property
    def depth(self) -> list[int]:
        """Each node's depth (the root 0)."""
        index = {n: i for i, n in enumerate(self.ids)}
        out: list[int] = []
        for p in self.parents:
            out.append(0 if p is None or p not in index else out[index[p]] + 1)
        return out

    @property
    def leaves(self) -> list[int]:
        """Each node's number of leaves below it (itself, for a leaf): the tile's share of its ancestors' extent."""
        index = {n: i for i, n in enumerate(self.ids)}
        kids = [0] * len(self.ids)
        for p in self.parents:
            if p is not None and p in index:
                kids[index[p]] += 1
        out = [1 if k == 0 else 0 for k in kids]
        for i in range(len(self.ids) - 1, -1, -1):  # children come after their parent
            p = self.parents[i]
            if p is not None and p in index:
                out[index[p]] += out[i]
        return out

    @property
    def log2_speedup(self) -> list[float | None]:
        return [math.log2(s) if s else None for s in self.speedup]

    @property
    def best(self) -> int | None:
        """The node `Tree.best` picks (`core.events.best_key`)."""
        keys = [(k, i) for i, k in enumerate(map(ev.best_key, self.status, self.fidelity, self.speedup))
                if k is not None]
        return self.ids[max(keys, key=lambda ki: ki[0])[1]] if keys else None


def node_events(search_or_events: Search | Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node events (stored dicts) of a search, or among a list of events."""
    events = search_or_events.events if hasattr(search_or_events, "events") else search_or_events
    return [e for e in events if e.get("type") == ev.NodeEvent.type]


def _short(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def choice_label(choice: dict[str, Any], parent: dict[str, Any] | None = None, width: int = LABEL_WIDTH) -> str:
    """What a point changes against its parent's: fusion flips, then each changed group's changed keys (all of them
    for the root). Cut to `width` characters with an ellipsis."""
    parts = []
    pf = (parent or {}).get("fuse", {})
    for p, v in choice.get("fuse", {}).items():
        if parent is not None and pf.get(p) != v:
            parts.append(f"fuse:{p}={'on' if v else 'off'}")
    pc = (parent or {}).get("configs", {})
    for gid, cfg in choice.get("configs", {}).items():
        old = pc.get(gid) if parent is not None else None
        if old == cfg:
            continue
        keys = [k for k in cfg if old is None or old.get(k) != cfg[k]]
        parts.append(f"{gid}:" + ",".join(f"{k}={_short(cfg[k])}" for k in keys))
    text = " ".join(parts) or ("(same point)" if parent is not None else "(default)")
    return text if len(text) <= width else text[:width - 1] + "…"


def _label(e: ev.NodeEvent, parent_choice: dict[str, Any] | None) -> str:
    """An offline point's change against its parent's; an LLM-written module's move (it has no point)."""
    return f"#{e.nid} " + (choice_label(e.choice, parent_choice) if e.choice is not None else f"({e.move})")


def get_search_tree_info(search_or_events: Search | Iterable[dict[str, Any]]) -> SearchTreeInfo:
    events = ev.node_events(node_events(search_or_events))
    choices = {e.nid: e.choice for e in events}
    cols: dict[str, list] = {f.name: [] for f in dataclasses.fields(SearchTreeInfo)}
    for e in events:
        last = e.last_stage
        cols["ids"].append(e.nid)
        cols["parents"].append(e.parent)
        cols["labels"].append(_label(e, choices.get(e.parent) if e.parent is not None else None))
        cols["moves"].append(e.move)
        cols["status"].append(str(e.status))
        cols["stage"].append(last["name"] if last else "")
        cols["reason"].append(last["reason"] if last else ev.skip_reason(e.forecast) if e.skipped else "")
        cols["fidelity"].append(e.fidelity)
        cols["speedup"].append(e.speedup)
        cols["candidates"].append(e.candidate)
        cols["decision"].append(str((e.forecast or {}).get("decision") or ""))
        conf = (e.forecast or {}).get("confidence")
        cols["confidence"].append(float(conf) if conf is not None else None)
        cols["findings"].append(len(e.findings or []))
    return SearchTreeInfo(**cols)


def filter_tree(info: SearchTreeInfo, hide: Iterable[str] = (), path_to: int | None = None) -> SearchTreeInfo:
    """A smaller tree: nodes whose status is in `hide` left out (e.g. `("skipped", "failed")`), and with `path_to`
    only that node's ancestors and its own subtree. A kept node's ancestors are always kept (the tree stays
    connected), so a hidden status can still show on the path to a kept node."""
    hide = set(hide)
    index = {n: i for i, n in enumerate(info.ids)}
    keep = {n for n, st in zip(info.ids, info.status) if st not in hide}
    if path_to is not None:
        if path_to not in index:
            raise KeyError(f"no node {path_to} in this tree")
        below, above = {path_to}, set()
        for n, p in zip(info.ids, info.parents):  # parents come first: one pass finds the subtree
            if p in below:
                below.add(n)
        p = info.parents[index[path_to]]
        while p is not None:
            above.add(p)
            p = info.parents[index[p]] if p in index else None
        keep &= below
        keep |= above | {path_to}
    for n in list(keep):  # ancestors of every kept node
        p = info.parents[index[n]]
        while p is not None and p in index and p not in keep:
            keep.add(p)
            p = info.parents[index[p]]
    rows = [i for i, n in enumerate(info.ids) if n in keep]
    return SearchTreeInfo(**{f.name: [getattr(info, f.name)[i] for i in rows] if getattr(info, f.name) else []
                             for f in dataclasses.fields(SearchTreeInfo)})


def _span(info: SearchTreeInfo) -> float:
    """Half the colour scale's range in log2 units: symmetric, at least 2x either way."""
    return max([1.0] + [abs(v) for v in info.log2_speedup if v is not None])


def node_colours(info: SearchTreeInfo, scale: str = COLOUR_SCALE) -> list[str]:
    """A colour per node: log2 speedup on a diverging scale centred on 1x (blue faster, red slower; the range is
    symmetric, at least 2x either way), failed nodes grey, nodes the surrogate skipped lavender, other untimed nodes
    pale (`STATUS_KEY`)."""
    span = _span(info)
    out = []
    for st, v in zip(info.status, info.log2_speedup):
        if st == "failed":
            out.append(FAILED_COLOUR)
        elif st == "skipped":
            out.append(SKIPPED_COLOUR)
        elif v is None:
            out.append(UNMEASURED_COLOUR)
        else:
            out.append(sample_colorscale(scale, [0.5 + 0.5 * v / span])[0])
    return out


def _hover(info: SearchTreeInfo, i: int) -> str:
    """The hover text of node i (plain text with plotly's <br>)."""
    s = info.speedup[i]
    lines = [f"move: {info.moves[i]}", f"status: {info.status[i]}" + (f" ({info.stage[i]})" if info.stage[i] else ""),
             f"speedup vs eager: {s:.3g}x ({info.fidelity[i]})" if s else "speedup vs eager: —"]
    if info.decision and info.decision[i]:
        conf = info.confidence[i]
        lines.append(f"surrogate: {info.decision[i]}" + (f" (confidence {conf:.2f})" if conf is not None else ""))
    if info.findings and info.findings[i]:
        lines.append(f"findings: {info.findings[i]}")
    reason = (info.reason[i] or "")[:160]
    if reason:
        lines.append("reason: " + html.escape(reason))
    return "<br>".join(lines)


def _legend(fig, info: SearchTreeInfo, go) -> None:
    """The colour key as legend entries (one per untimed status present) and a colour bar in speedup units; the
    traces carrying them draw nothing, so the tree trace stays `fig.data[0]`."""
    span = _span(info)
    ticks = [t for t in range(-int(span), int(span) + 1)]
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="markers", name="speedup vs eager", showlegend=False, hoverinfo="skip",
        marker=dict(colorscale=COLOUR_SCALE, cmin=-span, cmax=span, color=[0.0], showscale=True,
                    colorbar=dict(title=dict(text="speedup<br>vs eager", side="top"), tickvals=ticks,
                                  ticktext=[f"{2.0 ** t:g}x" for t in ticks], thickness=14, len=0.8))))
    present = set(info.status) | ({"deferred"} if any(map(info.deferred, range(len(info)))) else set())
    untimed = any(s is None and st not in ("failed", "skipped") for s, st in zip(info.speedup, info.status))
    for key, (name, colour) in STATUS_KEY.items():
        if key in present or (key == "untimed" and untimed):
            marker = (dict(color=colour, size=13, symbol="square-open", line=dict(width=3)) if key == "deferred"
                      else dict(color=colour, size=13, symbol="square", line=dict(color="#666666", width=1)))
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                                     marker=marker))
    fig.update_layout(xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="rgba(0,0,0,0)",
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom", itemclick=False,
                                  itemdoubleclick=False))


def _outlines(info: SearchTreeInfo) -> dict[str, list]:
    """Tile borders: white, a thick dark one around a deferred node."""
    flags = [info.deferred(i) for i in range(len(info))]
    return dict(color=[DEFERRED_COLOUR if d else "white" for d in flags], width=[3 if d else 1 for d in flags])


def tree_height(info: SearchTreeInfo, kind: str = "icicle") -> int:
    """A figure height at which most tiles of the widest view get a readable line of text."""
    leaves = info.leaves[0] if len(info) else 1
    if kind == "treemap":
        return int(min(900, max(460, 9 * leaves + 300)))
    return int(min(1000, max(420, 16 * leaves + 120)))


AUTO_TREEMAP_LEAVES = 24  # kind="auto": an icicle up to this many leaves, a treemap (2-D tiles) beyond


def _templates(info: SearchTreeInfo, kind: str, height: int) -> list[str]:
    """Per tile: the speedup (or status), the node id, and what it changed where the tile has room."""
    total = info.leaves[0] if len(info) else 1
    has_kids = set(p for p in info.parents if p is not None)
    out = []
    for n, lv in zip(info.ids, info.leaves):
        if kind == "treemap":
            out.append("<b>%{customdata[1]}</b> %{text}  %{customdata[2]}" if n in has_kids
                       else "<b>%{text}</b><br>%{customdata[1]}" + ("<br>%{customdata[2]}" if lv / total > 0.15
                                                                  else ""))
        else:
            tall = (lv / total) * (height - 120) >= 34
            out.append("<b>%{text}</b><br>%{label}" if tall else "<b>%{text}</b> %{label}")
    return out


def plot_search_tree(info: SearchTreeInfo, kind: str = "auto", title: str | None = None,
                     height: int | None = None, max_depth: int = MAX_DEPTH):
    """The tree as an icicle (`kind="icicle"`, levels left to right) or a treemap (`"treemap"`, each node's
    children tiled inside it); `"auto"` picks the icicle for small trees and the treemap beyond
    `AUTO_TREEMAP_LEAVES` leaves, where an icicle's tiles get too thin to read. One tile per node, coloured by log2
    speedup (key: the colour bar and the legend: failed grey, skipped by the surrogate lavender, untimed pale; a
    node the surrogate deferred to the GPU is marked `DEFERRED_MARK` and outlined); each tile shows the speedup (or
    the status), the node id and what it changed; a tile's extent is its share of the leaves below it (the note
    under the figure says so). Tiles too small for readable text stay blank (hover them); clicking a tile zooms into its
    subtree, and at most `max_depth` levels are drawn at once. Hover shows the move, status and stage, the speedup,
    the surrogate's decision and the reason."""
    go = graph_objects()
    if kind == "auto":
        kind = "treemap" if len(info) and info.leaves[0] > AUTO_TREEMAP_LEAVES else "icicle"
    if kind not in ("icicle", "treemap"):
        raise ValueError(f"kind must be 'auto', 'icicle' or 'treemap', got '{kind}'")
    height = height or tree_height(info, kind)
    changes = [lab.split(" ", 1)[1] if " " in lab else "" for lab in info.labels]
    trace = dict(ids=[str(i) for i in info.ids], parents=["" if p is None else str(p) for p in info.parents],
                 labels=info.labels, text=[info.tile_text(i) for i in range(len(info))],
                 texttemplate=_templates(info, kind, height),
                 marker=dict(colors=node_colours(info), line=_outlines(info)),
                 customdata=[[_hover(info, i), f"#{n}", c] for i, (n, c) in enumerate(zip(info.ids, changes))],
                 hovertemplate="<b>%{label}</b><br>%{customdata[0]}<extra></extra>",
                 maxdepth=max_depth if max(info.depth or [0]) >= max_depth else -1, sort=False)
    fig = go.Figure(go.Icicle(**trace, tiling=dict(orientation="h")) if kind == "icicle"
                    else go.Treemap(**trace, tiling=dict(pad=3)))
    _legend(fig, info, go)
    fig.add_annotation(text=TILE_SIZE_NOTE, showarrow=False, xref="paper", yref="paper", x=0, y=0, xanchor="left",
                       yanchor="top", yshift=-6, font=dict(size=11, color="#555555"))
    best = info.best
    layout(fig, title or (f"search tree: {len(info)} nodes" + (f", best #{best} at "
                                                               f"{info.speedup[info.ids.index(best)]:.3g}x"
                                                               if best is not None else ", nothing timed")),
           height=height, uniformtext=dict(minsize=10, mode="hide"))
    return fig
