"""The search tree: one node per proposed candidate, with its outcome and the statistics tree policies need."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.events import NodeStatus, best_key

# A failed candidate's reward: below any plausible slowdown (log2 speedup of -2 is 4x slower than eager).
FAIL_REWARD = -3.0


@dataclasses.dataclass
class Node:
    nid: int
    parent: int | None
    move: str
    choice: Any  # the offline proposer's point (OfflineProposer Choice); None for an LLM-written candidate
    candidate: str  # content hash
    depth: int = 0
    status: NodeStatus = NodeStatus.PENDING
    stage: str = ""  # last stage reached
    reason: str = ""
    speedup: float | None = None  # vs eager (full timing when reached, else quick)
    speedup_vs_compile: float | None = None
    candidate_ms: float | None = None
    fidelity: str = ""
    visits: int = 0
    value_sum: float = 0.0
    children: list[int] = dataclasses.field(default_factory=list)
    dead: bool = False
    forecast: dict[str, Any] | None = None  # the surrogate's forecast when the search screens (kept for calibration)
    source: str | None = None  # an LLM-written candidate's module (choice is None then)
    findings: list[dict[str, Any]] | None = None  # profiler findings (Finding dicts), when the search reads them

    @property
    def payload(self) -> Any:
        """What the node was built from: its choice (offline) or its source (LLM)."""
        return self.choice if self.choice is not None else self.source

    @property
    def reward(self) -> float | None:
        if self.status == NodeStatus.MEASURED and self.speedup:
            return math.log2(self.speedup)
        if self.status == NodeStatus.FAILED:
            return FAIL_REWARD
        return None  # refused / skipped / pending: nothing learned

    @property
    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def best_key(self) -> tuple[bool, float] | None:
        """Its rank for "best" (`core.events.best_key`), None when it cannot be best."""
        return best_key(self.status, self.fidelity, self.speedup)

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("choice", "children", "source")}
        out["status"] = str(self.status)  # a plain string in frames and parquet
        return out


def payload_key(payload: Any) -> Any:
    """What makes two proposals the same: a choice itself; an LLM-written candidate (anything with a content `hash`,
    e.g. a `Candidate`) its source's content hash, whatever its origin."""
    h = getattr(payload, "hash", None)
    return ("candidate", h) if isinstance(h, str) else payload


class Tree:
    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.by_choice: dict[Any, int] = {}  # payload_key -> first node (choices, and ("candidate", hash) for sources)

    def add(self, parent: int | None, move: str, choice: Any, candidate: str, source: str | None = None) -> Node:
        nid = len(self.nodes)
        depth = self.nodes[parent].depth + 1 if parent is not None else 0
        node = Node(nid, parent, move, choice, candidate, depth, source=source)
        self.nodes[nid] = node
        self.by_choice.setdefault(choice if choice is not None else ("candidate", candidate), nid)
        if parent is not None:
            self.nodes[parent].children.append(nid)
        return node

    @property
    def root(self) -> Node | None:
        return self.nodes.get(0)

    def seen(self, choice: Any) -> bool:
        """Whether a proposal (a choice, or a candidate with a content hash) is already in the tree."""
        return payload_key(choice) in self.by_choice

    def measured(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.best_key is not None]

    def best(self) -> Node | None:
        """The best node by `core.events.best_key` (full timing before quick, then the highest speedup)."""
        m = self.measured()
        return max(m, key=lambda n: n.best_key) if m else None

    def ranked(self) -> list[Node]:
        return sorted(self.measured(), key=lambda n: -n.speedup)

    def path(self, nid: int) -> list[Node]:
        out = []
        cur: int | None = nid
        while cur is not None:
            out.append(self.nodes[cur])
            cur = self.nodes[cur].parent
        return out

    def backpropagate(self, node: Node) -> None:
        r = node.reward
        if r is None:
            return
        for n in self.path(node.nid):
            n.visits += 1
            n.value_sum += r
        self._prune(node)

    def _prune(self, node: Node) -> None:
        """A subtree that only fails is a dead end: a failed node whose children are all dead is dead."""
        for n in self.path(node.nid):
            kids = [self.nodes[c] for c in n.children]
            if n.status == NodeStatus.FAILED and all(k.dead for k in kids):
                n.dead = True

    def to_frame(self):
        import pandas as pd  # only a notebook asks for a frame

        frame = pd.DataFrame([n.summary() for n in self.nodes.values()])
        if "parent" in frame:  # a root's parent is missing: nullable integers, not floats
            frame["parent"] = frame["parent"].astype("Int64")
        return frame
