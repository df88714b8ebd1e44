"""`RecordedProposer`: the offline proposer restricted to the points of its space that were measured on a real GPU.

A search on the replay device can only learn from candidates the dataset recorded; any other candidate is answered
"not measured". Rather than waste steps on those, a replay search walks the recorded subset of the space: the
offline proposer's own moves are kept when they land on a recorded point, and when too few do, the nearest recorded
points (fewest differing fusion flags and configuration fields) are offered as "jump" moves. Findings-guided moves
(`guided.py`) pick among recorded points too: the nearest one whose configuration goes the way a finding asks. For a
problem whose whole space was measured the walk is exactly the offline proposer's. The default point is the
proposer's default when recorded, else the recorded point nearest to it.

Points are recorded choices (the dataset's `choice_json`) whose measured kernels the current templates still render:
rows marked `regenerates` by the export, whose identity still holds (`workbench.kernels.identity`: a family whose
template version was bumped since makes its rows another candidate). A test keeps templates and data in step.
"""
from __future__ import annotations

import json
import random
import warnings
from typing import Any, Iterable

import numpy as np

from ..problems import Problem
from ..store.dataset import answering_rows, load, measured_identities
from .choice import Choice, distance
from .offline import OfflineProposer


class RecordedProposer(OfflineProposer):
    def __init__(self, problem, recorded: Iterable[dict[str, Any] | str],
                 identities: Iterable[str | None] | None = None):
        """`recorded`: the measured choices; `identities`: the identity key each was measured as (None, or left out:
        measured before identities were recorded). A choice whose kernels changed since is left out."""
        super().__init__(problem)
        recorded = list(recorded)
        identities = [None] * len(recorded) if identities is None else list(identities)
        self.recorded: dict[str, Choice] = {}
        for item, measured in zip(recorded, identities, strict=True):
            c = Choice.from_dict(json.loads(item) if isinstance(item, str) else item)
            if self.identity(c).measured_by(measured):
                self.recorded[c.canonical] = c
        if not self.recorded:
            raise ValueError(f"no recorded points for {problem.name}: the replay dataset holds no measurement of it "
                             "at the current template versions (collect some with experiments/collect_dataset.py on "
                             "a GPU)")

    @classmethod
    def from_dataset(cls, problem, path=None) -> "RecordedProposer":
        df = load("candidates", path)
        rows = answering_rows(df[df["problem_key"] == problem.key])
        return cls(problem, rows["choice_json"].tolist(), measured_identities(rows))

    def is_recorded(self, choice: Choice) -> bool:
        return choice.canonical in self.recorded

    def space_size(self) -> int:
        return len(self.recorded)

    def default_choice(self) -> Choice:
        d = super().default_choice()
        if self.is_recorded(d):
            return d
        return min(self.recorded.values(), key=lambda c: (distance(c, d), c.canonical))

    def sample(self, n: int, seed: int = 0) -> list[Choice]:
        first = self.default_choice()
        rest = sorted((c for c in self.recorded.values() if c != first), key=lambda c: c.canonical)
        random.Random(seed).shuffle(rest)
        return [first] + rest[: max(n - 1, 0)]

    def enumerate(self, limit: int | None = None):
        for i, c in enumerate(sorted(self.recorded.values(), key=lambda c: c.canonical)):
            if limit is not None and i >= limit:
                return
            yield c

    def plain_moves(self, choice: Choice, rng: random.Random, k: int = 8, memory=None) -> list[tuple[str, Choice]]:
        out = [(m, c) for m, c in super().plain_moves(choice, rng, k=k, memory=memory) if self.is_recorded(c)]
        if len(out) < k:
            taken = {c.canonical for _, c in out} | {choice.canonical}
            near = sorted((distance(c, choice), rng.random(), key) for key, c in self.recorded.items()
                          if key not in taken)
            out += [("jump", self.recorded[key]) for _, _, key in near[: k - len(out)]]
        return out

    def config_alternatives(self, choice: Choice, gid: str):
        """Recorded points with the same fusion pattern and a different configuration of group `gid` (other groups
        may differ too: the measured points rarely share all but one group's configuration)."""
        mine = dict(choice.configs).get(gid)
        for c in self.recorded.values():  # dataset order: deterministic
            other = dict(c.configs).get(gid)
            if c.fuse == choice.fuse and other is not None and other != mine:
                yield c

    def fusion_alternatives(self, choice: Choice):
        """Recorded points with another fusion pattern."""
        for c in self.recorded.values():
            if c.fuse != choice.fuse:
                yield c

    def crossover(self, a: Choice, b: Choice, rng: random.Random) -> Choice | None:
        child = super().crossover(a, b, rng)
        return child if child is not None and self.is_recorded(child) else None


class DatasetSources:
    """Candidate sources and problems of dataset rows, rebuilt from the recorded choices (built-in problems at the
    sizes the dataset was measured at). A row is rebuilt when its choice still renders the kernels that were measured
    (its identity holds); a rebuilt text that differs from the measured one is drift (a cosmetic template edit),
    listed in `drift` and warned about once."""

    def __init__(self, candidates):
        need = {"problem", "problem_key", "candidate", "choice_json"}
        if need - set(candidates.columns):
            raise ValueError(f"candidate rows lack {sorted(need - set(candidates.columns))} "
                             "(see workbench/proposers/recorded.py)")
        rows = answering_rows(candidates) if "regenerates" in candidates.columns else candidates
        self._choice = {(k, h): (cj, ident) for k, h, cj, ident in zip(rows["problem_key"], rows["candidate"],
                                                                       rows["choice_json"], measured_identities(rows))}
        self._name = dict(zip(candidates["problem_key"], candidates["problem"]))
        self._problems: dict[str, Any] = {}
        self._proposers: dict[str, Any] = {}
        self.drift: dict[tuple[str, str], str] = {}  # (problem key, recorded hash) -> the hash it renders to now

    def available(self, table):
        """Per row of `table`: is its candidate's source regenerable?"""
        return np.array([(k, h) in self._choice for k, h in zip(table["problem_key"], table["candidate"])], bool)

    def problem(self, problem_key: str):
        if problem_key not in self._problems:
            name = self._name.get(problem_key) or problem_key.split("@")[0]
            p = Problem.load(name)
            if p.key != problem_key:
                raise ValueError(f"dataset problem {problem_key} is not the built-in {name} at its default sizes "
                                 f"(that is {p.key}): its candidates cannot be rebuilt here")
            self._problems[problem_key] = p
        return self._problems[problem_key]

    def candidate(self, problem_key: str, candidate_hash: str):
        found = self._choice.get((problem_key, candidate_hash))
        if found is None:
            raise ValueError(f"no regenerable source for candidate {candidate_hash} of {problem_key} (its recorded "
                             "choice no longer renders the measured kernels, or it is not in the dataset)")
        if problem_key not in self._proposers:
            self._proposers[problem_key] = OfflineProposer(self.problem(problem_key))
        proposer = self._proposers[problem_key]
        choice = Choice.from_dict(json.loads(found[0]))
        if not proposer.identity(choice).measured_by(found[1]):
            raise ValueError(f"candidate {candidate_hash} of {problem_key}: a kernel template it uses changed version "
                             "since it was measured (another candidate now)")
        cand = proposer.render(choice)
        if cand.hash != candidate_hash:
            if not self.drift:
                warnings.warn(f"candidate {candidate_hash} of {problem_key} renders to {cand.hash} now (same kernels, "
                              "different text: a template was edited since the measurement; DatasetSources.drift "
                              "lists every such row)", stacklevel=2)
            self.drift[(problem_key, candidate_hash)] = cand.hash
        return cand
