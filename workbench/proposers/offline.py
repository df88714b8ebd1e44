"""The offline proposer: graph capture -> fusible groups -> parametric Triton families -> configurations.

A point in a problem's space is a `Choice`: for every fusion point (a GEMM whose consumer chain could be its
epilogue) fuse or split, and for every group one configuration of its family's valid space. The space is the product
of those choices; it can be enumerated in a fixed order or sampled reproducibly from a seed, and every point renders
to a complete candidate module whose origin records the choice, the coverage (share of the reference's FLOPs and
bytes computed in generated kernels; the rest stays torch calls) and the candidate's identity (`identity`: what
recorded measurements are matched by, whatever the rendered text).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import random
from typing import Any, Iterator

from ..core.candidate import Candidate
from ..kernels import family, template_version
from ..kernels.base import valid_space
from ..kernels.identity import Identity, anonymous, note_rendered, spec_json
from ..problems.problem import Problem
from .choice import Choice, canonical_json
from .graph import Captured, capture
from .guided import GUIDED_SHARE, MIN_SEVERITY, guided_moves, interleave
from .launch import CUDA_GRAPH, EAGER, LaunchEstimate, estimate
from .library_modules import LIBRARY_MODULES
from .partition import Group, fusion_points, partition
from .render import render_module

NETWORK_CONVS = 3  # convolution groups from which a problem is a network (see `layout_defaults`)
MOVE_MIN_LAUNCHES = 3  # kernels per forward from which the search tries the other launch mode


class OfflineProposer:
    def __init__(self, problem: Problem, library_modules: tuple = LIBRARY_MODULES):
        """`library_modules`: submodule types kept as one vendor-library call (recurrent layers by default; `()`
        traces through them, step by step)."""
        self.problem = problem
        self.captured: Captured = capture(problem, library_modules)
        self.precision = problem.effective_precision
        self.fusion_points = fusion_points(self.captured, self.precision)
        self._layouts: dict[tuple, list[Group]] = {}
        self._spaces: dict[Any, list[dict[str, Any]]] = {}
        self._kernel_keys: dict[Any, str] = {}
        self._launches: dict[tuple, LaunchEstimate] = {}

    # ---- structure ----
    def groups(self, fuse: dict[str, bool]) -> list[Group]:
        key = tuple(sorted(fuse.items()))
        if key not in self._layouts:
            self._layouts[key] = partition(self.captured, self.precision, fuse)
        return self._layouts[key]

    def fusion_patterns(self) -> Iterator[dict[str, bool]]:
        """Every combination of fused/split fusion points, in a fixed order (the first point flips fastest)."""
        for bits in range(2 ** len(self.fusion_points)):
            yield {p: bool(bits >> i & 1) for i, p in enumerate(self.fusion_points)}

    def group_space(self, group: Group) -> list[dict[str, Any]]:
        if group.spec not in self._spaces:  # specs are frozen dataclasses: equal specs share one space
            self._spaces[group.spec] = valid_space(family(group.family), group.spec)
        return self._spaces[group.spec]

    def kernel_key(self, spec: Any) -> str:
        """The spec up to its input names, as JSON: groups with equal keys (and configurations) share one kernel."""
        if spec not in self._kernel_keys:  # once per distinct spec, not per group and render
            self._kernel_keys[spec] = spec_json(anonymous(spec))
        return self._kernel_keys[spec]

    def space_size(self) -> int:
        return sum(math.prod(max(len(self.group_space(g)), 1) for g in self.groups(fuse))
                   for fuse in self.fusion_patterns())

    def coverage(self, groups: list[Group]) -> dict[str, float]:
        covered = {n.name for g in groups for n in g.nodes}
        cap = self.captured
        tf, tb = cap.total_flops, cap.total_bytes
        return {"flops": sum(v for k, v in cap.node_flops.items() if k in covered) / tf if tf else 1.0,
                "bytes": sum(v for k, v in cap.node_bytes.items() if k in covered) / tb if tb else 1.0}

    def identity(self, choice: Choice) -> Identity:
        """What the candidate of this choice is, whatever its text: per group, family, template version and spec,
        with the choice's configurations."""
        kernels = tuple((g.gid, g.family, template_version(g.family), spec_json(g.spec))
                        for g in self.groups(dict(choice.fuse)))
        return Identity(choice.canonical, kernels)

    # ---- points of the space ----
    def layout_defaults(self, fuse: dict[str, bool]) -> Choice:
        """The point with this fusion pattern and every group at its family's default configuration, except that in
        a network of convolutions (`NETWORK_CONVS` or more) each convolution starts on the vendor library with its
        epilogue generated: on the H200 the templates' defaults ran whole CNNs at 0.4-0.6x eager
        (results/kernelbench/h200_sample_l3), and a network's budget is spent before the search's `algo:` moves can
        switch dozens of convolutions. A lone convolution keeps its template default (its first `algo:` move tries
        the library). The launch mode is `launch.estimate`'s: a CUDA graph where the forward is bound by
        launching its kernels."""
        groups = self.groups(fuse)
        network = sum(g.family == "conv" for g in groups) >= NETWORK_CONVS
        configs = []
        for g in groups:
            fam = family(g.family)
            cfg = fam.algorithm_default(g.spec, "library") if network and g.family == "conv" else None
            configs.append((g.gid, canonical_json(cfg or fam.default(g.spec))))
        return Choice(tuple(sorted(fuse.items())), tuple(configs), self._launch(fuse).mode)

    def _launch(self, fuse: dict[str, bool]) -> LaunchEstimate:
        """The launch estimate of a fusion pattern, once per pattern (moves and samples ask for it every time)."""
        key = tuple(sorted(fuse.items()))
        if key not in self._launches:
            self._launches[key] = estimate(self.captured, self.groups(fuse))
        return self._launches[key]

    def launch_estimate(self, choice: Choice) -> dict[str, Any]:
        """The host/GPU/copy estimate behind a layout's default launch mode (what a reader asks when it flips)."""
        return self._launch(dict(choice.fuse)).to_dict()

    def default_choice(self) -> Choice:
        return self.layout_defaults({p: True for p in self.fusion_points})

    def sample(self, n: int, seed: int = 0) -> list[Choice]:
        """n distinct points (fewer if the space is smaller), the default first, reproducible from the seed; each
        with its layout's default launch mode."""
        rng = random.Random(seed)
        out, seen = [], set()
        first = self.default_choice()
        out.append(first)
        seen.add(first)
        attempts = 0
        while len(out) < n and attempts < 50 * n:
            attempts += 1
            fuse = {p: rng.random() < 0.5 for p in self.fusion_points}
            configs = []
            groups = self.groups(fuse)
            for g in groups:
                space = self.group_space(g)
                configs.append((g.gid, canonical_json(rng.choice(space)) if space else "{}"))
            c = Choice(tuple(sorted(fuse.items())), tuple(configs), self._launch(fuse).mode)
            if c not in seen:
                seen.add(c)
                out.append(c)
        return out

    def enumerate(self, limit: int | None = None) -> Iterator[Choice]:
        """Every point in a fixed order (fusion patterns, then configs, last group fastest), each with its layout's
        default launch mode (the other mode is one `launch:` move away)."""
        count = 0
        for fuse in self.fusion_patterns():
            groups = self.groups(fuse)
            spaces = [[canonical_json(c) for c in self.group_space(g)] or ["{}"] for g in groups]
            launch = self._launch(fuse).mode
            for combo in itertools.product(*spaces):
                yield Choice(tuple(sorted(fuse.items())), tuple(zip((g.gid for g in groups), combo)), launch)
                count += 1
                if limit is not None and count >= limit:
                    return

    def moves(self, choice: Choice, rng: random.Random, k: int = 8, memory=None, findings=None,
              guided_share: float | None = None, min_severity: str | None = None) -> list[tuple[str, Choice]]:
        """Up to k labelled moves from a point. Plain moves (`plain_moves`) are random; with profiler `findings`
        about the point (`Finding`s or their dicts), about `guided_share` of the moves in every prefix of the list
        follow those of at least `min_severity` instead (`guided.guided_moves`: "<finding move>:<group>"), plain
        moves filling in where the findings suggest nothing this space can do."""
        plain = self.plain_moves(choice, rng, k, memory)
        if not findings:
            return plain
        share = GUIDED_SHARE if guided_share is None else guided_share
        guided = guided_moves(self, choice, findings, rng, k, memory, min_severity or MIN_SEVERITY)
        return interleave(guided, plain, share, k)

    def config_alternatives(self, choice: Choice, gid: str) -> Iterator[Choice]:
        """Every point that differs from `choice` only in group `gid`'s configuration (what guided moves pick from)."""
        fuse = dict(choice.fuse)
        groups = self.groups(fuse)
        g = next((x for x in groups if x.gid == gid), None)
        if g is None:
            return
        configs = dict(choice.configs)
        for cfg in self.group_space(g):
            c = canonical_json(cfg)
            if c != configs.get(gid):
                yield Choice(choice.fuse, tuple((x.gid, c if x.gid == gid else configs[x.gid]) for x in groups),
                             choice.launch)

    def fusion_alternatives(self, choice: Choice) -> Iterator[Choice]:
        """The points one fusion flip away (the new layout starts from its families' defaults, as a fuse move does)."""
        fuse = dict(choice.fuse)
        for p in self.fusion_points:
            yield self.layout_defaults({**fuse, p: not fuse.get(p, True)})

    def plain_moves(self, choice: Choice, rng: random.Random, k: int = 8, memory=None) -> list[tuple[str, Choice]]:
        """Up to k labelled random moves from a point: "config:<group>" changes one group's configuration,
        "fuse:<node>" flips one fusion point (the new layout starts from its families' defaults). With a search
        memory, move kinds that paid off more often are drawn more often. The `algo:` moves and the `launch:` move
        (the other launch mode) come first: each changes the whole candidate at once."""
        fuse = dict(choice.fuse)
        configs = dict(choice.configs)
        groups = self.groups(fuse)
        kinds = (["config"] if groups else []) + (["fuse"] if self.fusion_points else [])
        if not kinds:
            return []
        weights = memory.move_weights(kinds) if memory is not None else {"config": 0.8, "fuse": 0.2}
        out: list[tuple[str, Choice]] = self.algorithm_moves(choice)[:max(1, k // 2)] + self.launch_moves(choice)
        for _ in range(4 * k):
            if len(out) >= k:
                break
            kind = rng.choices(kinds, weights=[weights.get(x, 0.5) for x in kinds])[0]
            if kind == "fuse":
                p = rng.choice(self.fusion_points)
                move = (f"fuse:{p}", self.layout_defaults({**fuse, p: not fuse.get(p, True)}))
            else:
                g = rng.choice(groups)
                space = self.group_space(g)
                if len(space) < 2:
                    continue
                new = dict(configs)
                new[g.gid] = canonical_json(rng.choice(space))
                move = (f"config:{g.gid}", Choice(choice.fuse, tuple((x.gid, new[x.gid]) for x in groups),
                                                  choice.launch))
            if move[1] != choice and all(move[1] != m[1] for m in out):
                out.append(move)
        return out

    def algorithm_moves(self, choice: Choice) -> list[tuple[str, Choice]]:
        """"algo:<name>" moves: every group whose family offers algorithm `name` (a convolution's implicit GEMM,
        direct or library kernel) switched to that algorithm's first configuration at once. Whole networks of
        convolutions need the switch made everywhere to show what it is worth, which single config moves never
        reach in a small budget."""
        fuse = dict(choice.fuse)
        configs = dict(choice.configs)
        groups = self.groups(fuse)
        by_algo: dict[str, dict[str, str]] = {}
        for g in groups:
            fam = family(g.family)
            pick = getattr(fam, "algorithm_default", None)
            current = json.loads(configs.get(g.gid, "{}")).get("ALGO")
            if pick is None or current is None:
                continue
            for algo in getattr(fam, "ALGORITHM_MOVE_ORDER", ()):
                cfg = pick(g.spec, algo) if algo != current else None
                if cfg is not None:
                    by_algo.setdefault(algo, {})[g.gid] = canonical_json(cfg)
        out = []
        for algo in by_algo:  # in the families' move order (dicts keep insertion order)
            new = {**configs, **by_algo[algo]}
            move = Choice(choice.fuse, tuple((x.gid, new[x.gid]) for x in groups), choice.launch)
            if move != choice:
                out.append((f"algo:{algo}", move))
        return out

    def launch_moves(self, choice: Choice) -> list[tuple[str, Choice]]:
        """"launch:<mode>": the same kernels under the other launch mode, where the forward launches at least
        `MOVE_MIN_LAUNCHES` kernels (fewer leave a replay nothing to save) and keeps no state between calls (a graph
        cannot replay reassigned attributes)."""
        est = self._launch(dict(choice.fuse))
        if est.launches < MOVE_MIN_LAUNCHES or self.captured.state_writes:
            return []
        other = EAGER if choice.launch == CUDA_GRAPH else CUDA_GRAPH
        return [(f"launch:{other}", dataclasses.replace(choice, launch=other))]

    def crossover(self, a: Choice, b: Choice, rng: random.Random) -> Choice | None:
        """Each group's configuration from one parent or the other (parents must share the fusion pattern)."""
        if a.fuse != b.fuse:
            return None
        cb = dict(b.configs)
        child = Choice(a.fuse, tuple((g, cfg if rng.random() < 0.5 else cb.get(g, cfg)) for g, cfg in a.configs),
                       a.launch if rng.random() < 0.5 else b.launch)
        return None if child in (a, b) else child

    # ---- rendering ----
    def render(self, choice: Choice) -> Candidate:
        fuse = dict(choice.fuse)
        groups = self.groups(fuse)
        configs = {k: json.loads(v) for k, v in choice.configs}
        codes, shared = {}, {}
        for g in groups:
            fam = family(g.family)
            cfg = configs.get(g.gid) or fam.default(g.spec)
            # groups with one family, spec (up to the names of their inputs) and configuration share one kernel: an
            # unrolled RNN or a stack of equal blocks would otherwise repeat it thousands of times (an LSTM over 512
            # steps: 12290 kernels, 27 MB of source). The shared kernel is the first such group's, named after it,
            # so findings about it guide that group.
            key = (g.family, self.kernel_key(g.spec), canonical_json(cfg))
            if key not in shared:
                name = f"_{g.gid}_{g.family}"
                r = fam.render(g.spec, cfg, name)
                shared[key] = (r.kernel_src, r.launcher_src, name)
            codes[g.gid] = shared[key]
        cov = self.coverage(groups)
        summary = {"problem": self.problem.name, "groups": [f"{g.gid}:{g.family}" + ("+epilogue" if g.fused_epilogue
                                                                                    else "") for g in groups],
                   "coverage": cov, **choice.to_dict()}
        comment = (f"Generated by workbench's offline proposer for {self.problem.name}.\n\n"
                   f"{json.dumps(summary, indent=1, sort_keys=True)}\n")
        source = render_module(self.captured, groups, codes, comment, choice.launch)
        canonical = choice.canonical
        identity = self.identity(choice)
        cand = Candidate(source, origin=(("kind", "offline"),
                                         ("choice", hashlib.sha256(canonical.encode()).hexdigest()[:12]),
                                         ("coverage_flops", round(cov["flops"], 4)),
                                         ("coverage_bytes", round(cov["bytes"], 4)),
                                         ("config", canonical), ("identity", identity.key)))
        note_rendered(self.problem.key, cand.hash, identity)
        return cand

    def propose(self, n: int, seed: int = 0) -> list[Candidate]:
        return [self.render(c) for c in self.sample(n, seed)]
