"""Search strategies behind one interface: `propose(search, k)` returns up to k (parent node id, move, choice) and
`observe(search, node)` learns from a finished evaluation. All randomness comes from the search's seeded RNG.

- greedy: expand the best measured node;
- beam: expand the `width` best measured nodes, round robin;
- evolutionary: tournament selection from the best `population`, crossover of configurations between parents with
  the same fusion pattern, else mutation;
- mcts: PUCT over the tree (priors from a surrogate when the search has one, uniform otherwise), progressive widening
  (a node with N visits may have ceil(c * N^alpha) children), log2-speedup rewards, dead subtrees never selected.

Children come from `search.child_moves(parent, k)`: the offline proposer's moves over its space, or LLM-written
candidates (`llm_moves.LLMMoves`, move "llm"). Proposals are compared by `tree.payload_key` (an LLM candidate by its
source's content hash). Crossover needs two offline choices: with LLM moves, evolutionary always mutates.
"""
from __future__ import annotations

import math
from typing import Any

from .tree import Node, payload_key


def _new(payload: Any, out: list) -> bool:
    key = payload_key(payload)
    return all(payload_key(o[2]) != key for o in out)


class Strategy:
    name = "base"

    def propose(self, search, k: int) -> list[tuple[int | None, str, Any]]:
        raise NotImplementedError

    def observe(self, search, node: Node) -> None:
        search.tree.backpropagate(node)

    def _children_of(self, search, parent: Node, k: int) -> list[tuple[int, str, Any]]:
        out = []
        for move, choice in search.child_moves(parent, k):
            if not search.tree.seen(choice) and _new(choice, out):
                out.append((parent.nid, move, choice))
            if len(out) >= k:
                break
        return out


class Greedy(Strategy):
    name = "greedy"

    def propose(self, search, k):
        parent = search.tree.best() or search.tree.root
        return self._children_of(search, parent, k) if parent else []


class Beam(Strategy):
    name = "beam"

    def __init__(self, width: int = 3):
        self.width = width

    def propose(self, search, k):
        parents = search.tree.ranked()[: self.width] or [search.tree.root]
        out: list = []
        per = max(1, math.ceil(k / len(parents)))
        for p in parents:
            out += [c for c in self._children_of(search, p, per) if _new(c[2], out)]
        return out[:k]


class Evolutionary(Strategy):
    name = "evolutionary"

    def __init__(self, population: int = 6, crossover_rate: float = 0.4, tournament: int = 3):
        self.population, self.crossover_rate, self.tournament = population, crossover_rate, tournament

    def _select(self, search, pool: list[Node]) -> Node:
        picks = [search.rng.choice(pool) for _ in range(min(self.tournament, len(pool)))]
        return max(picks, key=lambda n: n.speedup)

    def propose(self, search, k):
        pool = search.tree.ranked()[: self.population]
        if not pool:
            return self._children_of(search, search.tree.root, k) if search.tree.root else []
        out: list = []
        for _ in range(4 * k):
            if len(out) >= k:
                break
            a = self._select(search, pool)
            if len(pool) > 1 and search.supports_crossover and search.rng.random() < self.crossover_rate:
                b = self._select(search, [n for n in pool if n is not a] or pool)
                child = search.proposer.crossover(a.choice, b.choice, search.rng)
                if child is not None and not search.tree.seen(child) and _new(child, out):
                    out.append((a.nid, "crossover", child))
                    continue
            out += [c for c in self._children_of(search, a, 1) if _new(c[2], out)]
        return out[:k]


class MCTS(Strategy):
    name = "mcts"

    def __init__(self, c_puct: float = 1.5, widen_c: float = 1.0, widen_alpha: float = 0.5):
        self.c_puct, self.widen_c, self.widen_alpha = c_puct, widen_c, widen_alpha

    def _allowed_children(self, node: Node) -> int:
        return max(1, math.ceil(self.widen_c * (node.visits + 1) ** self.widen_alpha))

    def _score(self, parent: Node, child: Node, total_prior: float) -> float:
        prior = child.prior / total_prior if total_prior else 1.0
        explore = self.c_puct * prior * math.sqrt(parent.visits + 1) / (1 + child.visits)
        return child.q + explore

    def propose(self, search, k):
        tree = search.tree
        if tree.root is None:
            return []
        out: list = []
        for _ in range(2 * k):
            if len(out) >= k:
                break
            node = tree.root
            while True:
                kids = [tree.nodes[c] for c in node.children if not tree.nodes[c].dead]
                evaluated = [c for c in kids if c.status != "pending"]
                if len(node.children) < self._allowed_children(node) or not evaluated:
                    new = [c for c in self._children_of(search, node, 1) if _new(c[2], out)]
                    if new:
                        out.append(new[0])
                        break
                    if not evaluated:
                        break
                total = sum(c.prior for c in evaluated)
                node = max(evaluated, key=lambda c: self._score(node, c, total))
        return out


STRATEGIES = {"greedy": Greedy, "beam": Beam, "evolutionary": Evolutionary, "mcts": MCTS}


def make(name: str, **kwargs) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy '{name}' (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name](**kwargs)
