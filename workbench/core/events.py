"""What a search event means: the one place that reads them.

A search emits one event per thing that happened, in order (`seq`), to its listeners, its store and its run
directory (`events.jsonl`):

- `NodeEvent` ("node"): a proposal became a node of the tree, measured (its evaluation's summary and last stage
  record) or skipped by the surrogate (`skipped`, with the forecast that decided it);
- `StepEvent` ("step"): a step ended (the GPU-seconds spent and the best node so far);
- `ProposalFailed` ("proposal_failed"): an LLM reply that gave no module (no node; the memory keeps it);
- `ProfileNote` ("profile_note"): why a node's counters could not be collected.

The events are frozen dataclasses whose `to_dict()` is the JSON stored today, and `event_from_dict` reads events
written by any earlier version (unknown keys are ignored, missing optional ones take their defaults).

The rules read from them live here too, so the search, the run directories and the views agree: a node's status
(`status_of`), which node is "best" (`best_key`: full-timing results before quick ones, then the highest speedup),
and the best-so-far trajectory of a run (`trajectory`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterable, Mapping, Union

from .records import FAIL, REFUSED, StoredWord


class NodeStatus(StoredWord):
    """Where a node of the search tree stands."""

    PENDING = "pending"  # proposed, not yet told
    MEASURED = "measured"  # timed: it has a speedup
    FAILED = "failed"  # a stage failed (or nothing ran)
    REFUSED = "refused"  # a stage was not run (timing on the CPU, a spent budget, a replay without a recording)
    PASSED = "passed"  # passed what ran, never timed
    SKIPPED = "skipped"  # the surrogate's forecast kept it off the GPU


class Decision(StoredWord):
    """The selective policy's decision on a forecast candidate (`surrogates.selective`)."""

    MEASURE = "measure"  # a confident, promising forecast: the GPU confirms it
    DEFER = "defer"  # an unsure forecast: the GPU decides
    EXPLORE = "explore"  # a random pick among the rest, to catch a confidently wrong surrogate
    SKIP = "skip"  # a confident loser, or no slot left


FULL_TIMING = "full_timing"


def status_of(summary: Mapping[str, Any] | None, last_stage: Mapping[str, Any] | None) -> NodeStatus:
    """A told node's status from its evaluation summary and last stage record (dicts, as events store them)."""
    if not last_stage or last_stage["verdict"] == FAIL:
        return NodeStatus.FAILED
    if (summary or {}).get("speedup_vs_eager"):
        return NodeStatus.MEASURED
    return NodeStatus.REFUSED if last_stage["verdict"] == REFUSED else NodeStatus.PASSED


def best_key(status: str, fidelity: str | None, speedup: float | None) -> tuple[bool, float] | None:
    """A node's rank for "best": None when it cannot be best (not measured, no speedup), else (reached full timing,
    speedup), so a full-timing result beats any quick one and the highest speedup wins among equals."""
    if status != NodeStatus.MEASURED or not speedup:
        return None
    return (fidelity == FULL_TIMING, float(speedup))


def skip_reason(forecast: Mapping[str, Any] | None) -> str:
    return f"skipped by the surrogate (confidence {(forecast or {}).get('confidence', 0.0):.2f})"


@dataclasses.dataclass(frozen=True)
class NodeEvent:
    """A proposal told to the search. `choice` is the offline proposer's point (`Choice.to_dict()`), None for an
    LLM-written module, which comes as `source` with its `origin`. `summary` is the evaluation's summary without its
    stages and `last_stage` its last stage record (both empty for a skipped node). `gpu_seconds`: the search's
    spend after it."""

    type: ClassVar[str] = "node"
    nid: int
    parent: int | None
    move: str
    candidate: str  # the candidate's content hash
    choice: dict[str, Any] | None = None
    source: str | None = None
    origin: dict[str, Any] | None = None
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_stage: dict[str, Any] | None = None
    forecast: dict[str, Any] | None = None  # the surrogate's forecast when the search screens
    findings: list[dict[str, Any]] | None = None  # profiler findings (Finding dicts) when the search reads them
    skipped: bool = False
    wall_s: float | None = None
    gpu_seconds: float = 0.0
    seq: int | None = None

    @property
    def status(self) -> NodeStatus:
        return NodeStatus.SKIPPED if self.skipped else status_of(self.summary, self.last_stage)

    @property
    def speedup(self) -> float | None:
        """Speedup vs eager (full timing when reached, else quick); None when not timed."""
        return self.summary.get("speedup_vs_eager")

    @property
    def fidelity(self) -> str:
        return self.summary.get("fidelity", "") or ""

    @property
    def best_key(self) -> tuple[bool, float] | None:
        return best_key(self.status, self.fidelity, self.speedup)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seq": self.seq, "type": self.type, "nid": self.nid, "parent": self.parent,
                             "move": self.move}
        if self.skipped:
            d["skipped"] = True
        d["choice"] = self.choice
        if self.source is not None:
            d.update(source=self.source, origin=self.origin)
        d.update(candidate=self.candidate, summary=self.summary, forecast=self.forecast, last_stage=self.last_stage)
        if self.findings is not None:
            d["findings"] = self.findings
        if self.wall_s is not None:
            d["wall_s"] = self.wall_s
        d["gpu_seconds"] = self.gpu_seconds
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeEvent:
        return cls(nid=d["nid"], parent=d.get("parent"), move=d.get("move", ""), candidate=d.get("candidate", ""),
                   choice=d.get("choice"), source=d.get("source"), origin=d.get("origin"),
                   summary=d.get("summary") or {}, last_stage=d.get("last_stage"), forecast=d.get("forecast"),
                   findings=d.get("findings"), skipped=bool(d.get("skipped")), wall_s=d.get("wall_s"),
                   gpu_seconds=float(d.get("gpu_seconds") or 0.0), seq=d.get("seq"))


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """A step ended. `best`: the best node's summary (`Search.best_summary()`). `rng_draws`: how many 32-bit words
    the search's seeded generator had drawn, so a resumed search continues the same stream (None in events written
    before it was recorded); `policy_rng`: the screening policy's generator state, for the same reason."""

    type: ClassVar[str] = "step"
    step: int
    gpu_seconds: float = 0.0
    best: dict[str, Any] | None = None
    rng_draws: int | None = None
    policy_rng: dict[str, Any] | None = None
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"seq": self.seq, "type": self.type, "step": self.step, "gpu_seconds": self.gpu_seconds,
             "best": self.best}
        if self.rng_draws is not None:
            d["rng_draws"] = self.rng_draws
        if self.policy_rng is not None:
            d["policy_rng"] = self.policy_rng
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepEvent:
        return cls(step=d["step"], gpu_seconds=float(d.get("gpu_seconds") or 0.0), best=d.get("best"),
                   rng_draws=d.get("rng_draws"), policy_rng=d.get("policy_rng"), seq=d.get("seq"))


@dataclasses.dataclass(frozen=True)
class ProposalFailed:
    """An LLM reply with no usable module. `parent`: the parent candidate's content hash."""

    type: ClassVar[str] = "proposal_failed"
    parent: str | None
    reason: str
    call_id: str | None = None
    rationale: str = ""
    move: str = "llm"
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "parent": self.parent, "move": self.move, "reason": self.reason,
                "call_id": self.call_id, "rationale": self.rationale}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProposalFailed:
        return cls(parent=d.get("parent"), reason=d.get("reason", ""), call_id=d.get("call_id"),
                   rationale=d.get("rationale") or "", move=d.get("move", "llm"), seq=d.get("seq"))


@dataclasses.dataclass(frozen=True)
class ProfileNote:
    """Why node `nid`'s counters could not be collected (the search went on with its static findings)."""

    type: ClassVar[str] = "profile_note"
    nid: int
    note: str
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "nid": self.nid, "note": self.note}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileNote:
        return cls(nid=d["nid"], note=d.get("note", ""), seq=d.get("seq"))


Event = Union[NodeEvent, StepEvent, ProposalFailed, ProfileNote]
EVENT_TYPES: dict[str, Any] = {c.type: c for c in (NodeEvent, StepEvent, ProposalFailed, ProfileNote)}


def event_from_dict(d: Mapping[str, Any]) -> Event | None:
    """The typed event of a stored dict; None for a type this version does not know."""
    cls = EVENT_TYPES.get(d.get("type", ""))
    return cls.from_dict(d) if cls is not None else None


def node_events(events: Iterable[Mapping[str, Any] | Event]) -> list[NodeEvent]:
    """The node events among stored dicts or typed events, in order."""
    out = []
    for e in events:
        e = e if isinstance(e, NodeEvent) else (event_from_dict(e) if isinstance(e, Mapping) else None)
        if isinstance(e, NodeEvent):
            out.append(e)
    return out


TRAJECTORY_MEASURED, TRAJECTORY_FAILED, TRAJECTORY_NOT_TIMED = "measured", "failed", "not timed"


def trajectory(events: Iterable[Mapping[str, Any] | Event]) -> list[dict[str, Any]]:
    """One row per told node that was not skipped, in order:

    - `gpu_s`: the search's GPU-seconds after it;
    - `measured`: GPU measurements so far: nodes that were timed or that the GPU budget was charged for (a replayed
      node whose full timing was never recorded still counts for its quick timing);
    - `speedup`: its own (None when not timed); `best`: the best so far by `best_key` (full timing before quick, then
      the highest speedup: the node `Tree.best` picks), None until one was timed;
    - `status`: measured, failed or not timed; `nid`, `seq` and `candidate` (its content hash)."""
    out, key, best, measured, spent = [], None, None, 0, 0.0
    for e in node_events(events):
        if e.skipped:
            continue
        status = e.status
        timed = status == NodeStatus.MEASURED
        if timed or e.gpu_seconds > spent:
            measured += 1
        spent = max(spent, e.gpu_seconds)
        k = e.best_key
        if k is not None and (key is None or k > key):
            key, best = k, float(e.speedup)
        out.append({"seq": e.seq, "nid": e.nid, "candidate": e.candidate, "gpu_s": e.gpu_seconds,
                    "measured": measured, "speedup": float(e.speedup) if timed else None, "best": best,
                    "status": TRAJECTORY_MEASURED if timed else
                    (TRAJECTORY_FAILED if status == NodeStatus.FAILED else TRAJECTORY_NOT_TIMED)})
    return out


__all__ = ["Decision", "Event", "NodeEvent", "NodeStatus", "ProfileNote", "ProposalFailed", "StepEvent",
           "best_key", "event_from_dict", "node_events", "skip_reason", "status_of", "trajectory"]
