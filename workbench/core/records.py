"""Typed records the ladder's stages return.

Every stage answers with a `StageRecord`: a verdict, a reason in words, the seconds it cost and the facts it measured.
An `Evaluation` is the list of records one candidate earned on its way up the ladder.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

# Verdicts. "inconclusive" means the stage could not judge (e.g. a compile probe that could not trace the kernel
# launches on this machine); it never counts as a pass, and the reason says why.
PASS, FAIL, INCONCLUSIVE, REFUSED = "pass", "fail", "inconclusive", "refused"

# Stage names in ladder order; fidelity of a stored evaluation is the highest stage it reached.
STAGES = ("static", "compile", "correctness", "quick_timing", "full_timing")


@dataclasses.dataclass
class StageRecord:
    name: str
    verdict: str
    reason: str = ""
    cost_s: float = 0.0  # wall seconds the stage took, worker time included
    gpu_s: float = 0.0  # the part of cost_s that held a GPU (what the budget counts)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    flags: list[dict[str, str]] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageRecord":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


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
