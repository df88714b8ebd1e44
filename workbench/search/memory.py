"""Search memory: what was tried, what failed and why, and which moves paid off.

A structured record, not a transcript: attempts (candidate, move, parent, outcome), failure reasons grouped by kind,
per-move statistics (tried, improved the parent, mean log2 gain), and profiler findings. The offline proposer asks it
which moves to favour; `render()` gives a short text for an LLM prompt; it round-trips through JSON.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter, defaultdict
from typing import Any

from ..core.records import DEGENERATE_PROBLEM, RANDOM_REFERENCE

UNJUDGEABLE = (RANDOM_REFERENCE, DEGENERATE_PROBLEM)  # verdicts after which no candidate of the problem can be judged


@dataclasses.dataclass
class Attempt:
    candidate: str  # content hash (a failed LLM proposal: its call id)
    parent: str | None  # the parent's content hash (None for the root)
    move: str  # "root", "config:g0", "fuse:addmm", "crossover", ...
    outcome: str  # "measured", "failed", "refused", "skipped"
    stage: str  # last stage reached
    speedup: float | None = None  # vs eager, quick or full timing
    reason: str = ""


def failure_kind(reason: str) -> str:
    """A short category for a failure reason (the first words before a colon, normalised)."""
    head = reason.split(":", 1)[0].strip().lower()
    return re.sub(r"\s+", " ", head)[:40] or "unknown"


class SearchMemory:
    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self.findings: list[dict[str, Any]] = []
        self._gains: dict[str, list[float]] = defaultdict(list)  # move kind -> log2(child / parent speedup)
        self.random_reference: str | None = None  # the verdict that found the reference random: nothing can be judged

    def record(self, attempt: Attempt, parent_speedup: float | None = None) -> None:
        self.attempts.append(attempt)
        self.random_reference = self.random_reference or _unjudgeable(attempt.reason)
        if attempt.speedup is not None and parent_speedup:
            self._gains[attempt.move.split(":", 1)[0]].append(math.log2(attempt.speedup / parent_speedup))

    def add_findings(self, findings: list[dict[str, Any]]) -> None:
        self.findings.extend(findings)

    # ---- what the proposer and the prompt read ----
    def failures(self) -> Counter:
        return Counter(failure_kind(a.reason) for a in self.attempts if a.outcome == "failed")

    def move_stats(self) -> dict[str, dict[str, float]]:
        tried = Counter(a.move.split(":", 1)[0] for a in self.attempts if a.move != "root")
        out = {}
        for kind, n in tried.items():
            gains = self._gains.get(kind, [])
            out[kind] = {"tried": n, "improved": sum(g > 0 for g in gains),
                         "mean_log2_gain": sum(gains) / len(gains) if gains else 0.0}
        return out

    def move_weights(self, kinds: list[str], prior: float = 1.0) -> dict[str, float]:
        """Sampling weights over move kinds: moves that paid off more often get more weight (a Beta-like mean)."""
        stats = self.move_stats()
        return {k: (stats.get(k, {}).get("improved", 0) + prior) / (stats.get(k, {}).get("tried", 0) + 2 * prior)
                for k in kinds}

    def best(self) -> Attempt | None:
        measured = [a for a in self.attempts if a.speedup is not None]
        return max(measured, key=lambda a: a.speedup) if measured else None

    def render(self, limit: int = 6) -> str:
        lines = [f"{len(self.attempts)} attempts: "
                 + ", ".join(f"{v} {k}" for k, v in Counter(a.outcome for a in self.attempts).items())]
        best = self.best()
        if best:
            lines.append(f"best so far: {best.candidate} at {best.speedup:.3g}x eager (move {best.move})")
        fails = self.failures().most_common(limit)
        if fails:
            lines.append("failures: " + "; ".join(f"{k} x{n}" for k, n in fails))
        stats = sorted(self.move_stats().items(), key=lambda kv: -kv[1]["mean_log2_gain"])[:limit]
        if stats:
            lines.append("moves: " + "; ".join(f"{k} tried {s['tried']}, improved {s['improved']}, mean gain "
                                               f"{s['mean_log2_gain']:+.2f} log2" for k, s in stats))
        for f in self.findings[-limit:]:
            lines.append(f"finding: {f.get('title', '')} - {f.get('advice', '')}".strip())
        return "\n".join(lines)

    # ---- persistence ----
    def to_json(self) -> str:
        return json.dumps({"attempts": [dataclasses.asdict(a) for a in self.attempts], "findings": self.findings,
                           "gains": dict(self._gains)})

    @classmethod
    def from_json(cls, text: str) -> SearchMemory:
        d = json.loads(text)
        m = cls()
        for a in d["attempts"]:
            m.attempts.append(Attempt(**a))
            m.random_reference = m.random_reference or _unjudgeable(m.attempts[-1].reason)
        m.findings = d["findings"]
        for k, v in d.get("gains", {}).items():
            m._gains[k] = list(v)
        return m


def _unjudgeable(reason: str) -> str | None:
    """The part of a verdict that says no candidate can be judged on this problem (random or degenerate)."""
    for marker in UNJUDGEABLE:
        if marker in reason:
            return reason[reason.index(marker):]
    return None
