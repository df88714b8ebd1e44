"""Typed records the ladder's stages return.

Every stage answers with a `StageRecord`: a verdict, a reason in words, the seconds it cost and the facts it measured.
An `Evaluation` is the list of records one candidate earned on its way up the ladder.
"""
from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class StoredWord(str, enum.Enum):
    """A str-Enum whose members are their stored strings: equal to them, hashed like them, printed as them, so JSON,
    SQLite rows and comparisons with the plain strings keep working."""

    __str__ = str.__str__
    __format__ = str.__format__


class Verdict(StoredWord):
    """A stage's answer. INCONCLUSIVE: the stage could not judge (e.g. a compile probe that could not trace the kernel
    launches on this machine); it never counts as a pass, and the reason says why. REFUSED: the stage did not run
    (timing on the CPU, a spent budget, a replay without a recording)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    REFUSED = "refused"


class Stage(StoredWord):
    """The ladder's stages, in ladder order."""

    STATIC = "static"
    COMPILE = "compile"
    CORRECTNESS = "correctness"
    QUICK_TIMING = "quick_timing"
    FULL_TIMING = "full_timing"


PASS, FAIL, INCONCLUSIVE, REFUSED = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.REFUSED
# how the correctness stage opens its verdict on a reference whose two runs on the same inputs differ: no candidate
# can be judged against it, so a search stops on it
RANDOM_REFERENCE = "the reference is random"
# how it opens its verdict on a problem with nothing to judge (every input empty, or a reference output of no values:
# None, empty tensors): any candidate would pass, so none can be judged
DEGENERATE_PROBLEM = "the problem is degenerate"

# Stage names in ladder order (plain strings, as stored); fidelity of a stored evaluation is the highest stage it
# reached.
STAGES = tuple(s.value for s in Stage)
TIMING_STAGES = (Stage.QUICK_TIMING.value, Stage.FULL_TIMING.value)

# Control flags older records carry inside `data`; `StageRecord.from_dict` lifts them into their fields.
_CONTROL_FLAGS = ("retry", "executor_failure")


@dataclasses.dataclass
class StageRecord:
    name: str
    verdict: Verdict
    reason: str = ""
    cost_s: float = 0.0  # wall seconds the stage took, worker time included
    gpu_s: float = 0.0  # the part of cost_s that held a GPU (what the budget counts)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    flags: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # Control flags: facts about the run, not the candidate. Either one makes the record not reusable.
    retry: bool = False  # not run for a reason outside the candidate (budget spent, no recording to replay)
    executor_failure: str | None = None  # the executor lost the work (e.g. "lost_worker", "timeout")

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    @property
    def reusable(self) -> bool:
        """Whether a store may answer a later request with this record: not when it says nothing about the candidate
        (the budget ran out, replay had no recording, the executor lost the work) and must be run again."""
        return not (self.retry or self.executor_failure)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["name"], d["verdict"] = str(self.name), self.verdict.value  # plain strings, as stored
        d["ok"] = self.ok
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageRecord":
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        if isinstance(kw.get("data"), dict) and any(k in kw["data"] for k in _CONTROL_FLAGS):
            data = dict(kw["data"])
            for k in _CONTROL_FLAGS:
                if k in data:
                    lifted = data.pop(k)
                    kw[k] = kw.get(k) or lifted
            kw["data"] = data
        return cls(**kw)


@dataclasses.dataclass
class Evaluation:
    problem: str
    candidate_hash: str
    device: str
    stages: list[StageRecord] = dataclasses.field(default_factory=list)
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no stage failed (a stage refused or inconclusive is not a failure; `fidelity` says how far the
        candidate got)."""
        return bool(self.stages) and any(s.ok for s in self.stages) and not any(s.verdict == FAIL for s in self.stages)

    @property
    def fidelity(self) -> str:
        """Highest stage passed ('none' when the first failed)."""
        passed = [s.name for s in self.stages if s.ok]
        return passed[-1] if passed else "none"

    def stage(self, name: str) -> StageRecord | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "problem": self.problem,
            "candidate": self.candidate_hash,
            "device": self.device,
            "fidelity": self.fidelity,
            "stages": [s.to_dict() for s in self.stages],
            "provenance": self.provenance,
            "cached": bool(self.provenance.get("from_store")),  # answered from the store, not measured by this run
        }
        for name in ("full_timing", "quick_timing"):
            st = self.stage(name)
            if st is not None and st.ok:
                for key in ("candidate_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile"):
                    if key in st.data:
                        out[key] = st.data[key]
                break
        return out

    def to_json(self) -> str:
        return json.dumps(self.summary(), default=str)
