"""The search tree as data (`get_search_tree_info`) and as a plotly icicle or treemap (`plot_search_tree`).

The info is computed from the search's node events, so a live `Search`, a list of events, or the events a store
holds for a finished search (`Store.search_events`) all give the same picture; what an event means (status, "best")
is `workbench.core.events`'s.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Iterable

from ..core import events as ev
from ._plotly import graph_objects, sample_colorscale

if TYPE_CHECKING:  # a Search loads torch and triton; the views only read its events
    from ..search.search import Search

LABEL_WIDTH = 48
FAILED_COLOUR = "#9e9e9e"  # failed nodes: grey
UNMEASURED_COLOUR = "#e6e6e6"  # passed / refused / pending: nothing timed


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

    def __len__(self) -> int:
        return len(self.ids)

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
    return SearchTreeInfo(**cols)


def node_colours(info: SearchTreeInfo, scale: str = "RdBu") -> list[str]:
    """A colour per node: log2 speedup on a diverging scale centred on 1x (blue faster, red slower; the range is
    symmetric, at least 2x either way), failed nodes grey, untimed nodes pale."""
    logs = [v for v in info.log2_speedup if v is not None]
    span = max([1.0] + [abs(v) for v in logs])
    out = []
    for st, v in zip(info.status, info.log2_speedup):
        if st == "failed":
            out.append(FAILED_COLOUR)
        elif v is None:
            out.append(UNMEASURED_COLOUR)
        else:
            out.append(sample_colorscale(scale, [0.5 + 0.5 * v / span])[0])
    return out


def plot_search_tree(info: SearchTreeInfo, kind: str = "icicle", title: str | None = None):
    """An icicle (or `kind="treemap"`) of the tree: one point per node, coloured by log2 speedup (failed grey);
    hovering shows the move, status, stage and reason, and the speedup."""
    go = graph_objects()
    if kind not in ("icicle", "treemap"):
        raise ValueError(f"kind must be 'icicle' or 'treemap', got '{kind}'")
    custom = [[m, st, sg, (r or "")[:200], f"{s:.3g}x" if s else "—", fid]
              for m, st, sg, r, s, fid in zip(info.moves, info.status, info.stage, info.reason, info.speedup,
                                              info.fidelity)]
    trace = dict(ids=[str(i) for i in info.ids], parents=["" if p is None else str(p) for p in info.parents],
                 labels=info.labels, marker=dict(colors=node_colours(info)), customdata=custom,
                 hovertemplate=("<b>%{label}</b><br>move: %{customdata[0]}<br>status: %{customdata[1]} "
                                "(%{customdata[2]})<br>reason: %{customdata[3]}<br>speedup vs eager: "
                                "%{customdata[4]} (%{customdata[5]})<extra></extra>"))
    fig = go.Figure(go.Icicle(**trace) if kind == "icicle" else go.Treemap(**trace))
    best = info.best
    fig.update_layout(title=title or (f"search tree: {len(info)} nodes" + (f", best #{best}" if best is not None
                                                                             else ", nothing timed")),
                      margin=dict(t=40, l=10, r=10, b=10))
    return fig
