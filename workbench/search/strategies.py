"""Search strategies behind one interface: `propose(view, k)` returns up to k `Proposal`s (parent node id, move,
payload) and `observe(view, node)` learns from a told node. A strategy sees the search only through a `SearchView`
(its tree, seeded RNG, proposer, memory, problem and where children come from), and all its randomness comes from
that RNG.

- greedy: expand the best measured node;
- beam: expand the `width` best measured nodes, round robin;
- evolutionary: tournament selection from the best `population`, crossover of configurations between parents with
  the same fusion pattern, else mutation;
- mcts: PUCT over the tree with a uniform prior over a node's evaluated children, progressive widening (a node with
  N visits may have ceil(c * N^alpha) children), log2-speedup rewards, dead subtrees never selected.

Children come from `view.child_moves(parent, k)`: the offline proposer's moves over its space, or LLM-written
candidates (`llm.moves.LLMMoves`, move "llm"). Proposals are compared by `tree.payload_key` (an LLM candidate by its
source's content hash). Crossover needs two offline choices: with LLM moves, evolutionary always mutates.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import TYPE_CHECKING, Any, Callable

from ..core.candidate import Candidate
from ..core.events import Decision, NodeStatus
from .memory import SearchMemory
from .tree import Node, Tree, payload_key

if TYPE_CHECKING:
    from ..problems.problem import Problem
    from ..proposers.offline import Choice, OfflineProposer


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A point the search proposes: a child of node `parent` (None for the root) reached by `move`, built from
    `payload` (an offline `Choice`, or an LLM-written `Candidate`). `Search.ask` adds the rendered `candidate` and,
    when the search screens, the surrogate's `forecast` (a dict, kept on the node) and the policy's `decision`."""

    parent: int | None
    move: str
    payload: Choice | Candidate
    candidate: Candidate | None = None
    forecast: dict[str, Any] | None = None
    decision: Decision = Decision.MEASURE

    @property
    def measure(self) -> bool:
        """Whether it goes to the device (everything but a surrogate's skip)."""
        return self.decision != Decision.SKIP


@dataclasses.dataclass(frozen=True)
class SearchView:
    """What a strategy reads of a search. `child_moves(parent, k)` gives candidate (move, payload) children of a node;
    `supports_crossover` is False when children are LLM-written (no configurations to cross)."""

    tree: Tree
    rng: random.Random
    proposer: OfflineProposer
    memory: SearchMemory
    problem: Problem
    child_moves: Callable[[Node, int], list[tuple[str, Any]]]
    supports_crossover: bool


def _new(payload: Any, out: list[Proposal]) -> bool:
    """Whether `payload` is not already proposed in `out`."""
    key = payload_key(payload)
    return all(payload_key(o.payload) != key for o in out)


class Strategy:
    name = "base"

    def propose(self, view: SearchView, k: int) -> list[Proposal]:
        raise NotImplementedError

    def observe(self, view: SearchView, node: Node) -> None:
        view.tree.backpropagate(node)

    def _children_of(self, view: SearchView, parent: Node, k: int) -> list[Proposal]:
        out: list[Proposal] = []
        for move, payload in view.child_moves(parent, k):
            if not view.tree.seen(payload) and _new(payload, out):
                out.append(Proposal(parent.nid, move, payload))
            if len(out) >= k:
                break
        return out


class Greedy(Strategy):
    name = "greedy"

    def propose(self, view, k):
        parent = view.tree.best() or view.tree.root
        return self._children_of(view, parent, k) if parent else []


class Beam(Strategy):
    name = "beam"

    def __init__(self, width: int = 3):
        self.width = width

    def propose(self, view, k):
        parents = view.tree.ranked()[: self.width] or [view.tree.root]
        out: list[Proposal] = []
        per = max(1, math.ceil(k / len(parents)))
        for p in parents:
            out += [c for c in self._children_of(view, p, per) if _new(c.payload, out)]
        return out[:k]


class Evolutionary(Strategy):
    name = "evolutionary"

    def __init__(self, population: int = 6, crossover_rate: float = 0.4, tournament: int = 3):
        self.population, self.crossover_rate, self.tournament = population, crossover_rate, tournament

    def _select(self, view: SearchView, pool: list[Node]) -> Node:
        picks = [view.rng.choice(pool) for _ in range(min(self.tournament, len(pool)))]
        return max(picks, key=lambda n: n.speedup)

    def propose(self, view, k):
        pool = view.tree.ranked()[: self.population]
        if not pool:
            return self._children_of(view, view.tree.root, k) if view.tree.root else []
        out: list[Proposal] = []
        for _ in range(4 * k):
            if len(out) >= k:
                break
            a = self._select(view, pool)
            if len(pool) > 1 and view.supports_crossover and view.rng.random() < self.crossover_rate:
                b = self._select(view, [n for n in pool if n is not a] or pool)
                child = view.proposer.crossover(a.choice, b.choice, view.rng)
                if child is not None and not view.tree.seen(child) and _new(child, out):
                    out.append(Proposal(a.nid, "crossover", child))
                    continue
            out += [c for c in self._children_of(view, a, 1) if _new(c.payload, out)]
        return out[:k]


class MCTS(Strategy):
    name = "mcts"

    def __init__(self, c_puct: float = 1.5, widen_c: float = 1.0, widen_alpha: float = 0.5):
        self.c_puct, self.widen_c, self.widen_alpha = c_puct, widen_c, widen_alpha

    def _allowed_children(self, node: Node) -> int:
        return max(1, math.ceil(self.widen_c * (node.visits + 1) ** self.widen_alpha))

    def _score(self, parent: Node, child: Node, siblings: int) -> float:
        """PUCT with a uniform prior (1 / the evaluated siblings)."""
        explore = self.c_puct * (1.0 / siblings) * math.sqrt(parent.visits + 1) / (1 + child.visits)
        return child.q + explore

    def propose(self, view, k):
        tree = view.tree
        if tree.root is None:
            return []
        out: list[Proposal] = []
        for _ in range(2 * k):
            if len(out) >= k:
                break
            node = tree.root
            while True:
                kids = [tree.nodes[c] for c in node.children if not tree.nodes[c].dead]
                evaluated = [c for c in kids if c.status != NodeStatus.PENDING]
                if len(node.children) < self._allowed_children(node) or not evaluated:
                    new = [c for c in self._children_of(view, node, 1) if _new(c.payload, out)]
                    if new:
                        out.append(new[0])
                        break
                    if not evaluated:
                        break
                node = max(evaluated, key=lambda c: self._score(node, c, len(evaluated)))
        return out


STRATEGIES = {"greedy": Greedy, "beam": Beam, "evolutionary": Evolutionary, "mcts": MCTS}


def make_strategy(name: str, **kwargs) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy '{name}' (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name](**kwargs)
