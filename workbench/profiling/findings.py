"""What the profiler's expert tools return: a `Finding`, one short diagnosis with its evidence and a move.

A finding is written for two readers at once: a person (title and advice, in words) and a proposer (`move`, a short
machine-readable name of a change it can make: "fuse_epilogue", "increase_block", "reduce_num_stages", ...). The
numbers behind it travel in `evidence`, so a claim can always be checked against the counters it came from.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

SEVERITIES = ("info", "warning", "critical")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# Moves a proposer can act on (a finding may name another; these are the ones the tools here use).
MOVES = ("fuse_epilogue", "fuse_kernels", "increase_block", "decrease_block", "reduce_num_stages", "use_tensor_cores",
         "use_wgmma", "swizzle_group_m", "persistent", "split_k", "vectorize_loads", "coalesce_access",
         "reduce_registers", "swizzle_shared")


class ProfilerUnavailable(RuntimeError):
    """A profiler (ncu, NVML) or the GPU it needs is missing here; the message says which and what to do."""


@dataclasses.dataclass(frozen=True)
class Finding:
    tool: str
    title: str
    severity: str
    evidence: dict[str, Any]
    advice: str
    move: str | None = None
    kernel: str | None = None  # which kernel it is about (None: the candidate as a whole)

    def __post_init__(self):
        if self.severity not in _RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, got '{self.severity}'")

    @property
    def rank(self) -> int:
        return _RANK[self.severity]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first; the order within a severity is the order the tools produced them (stable sort)."""
    return sorted(findings, key=lambda f: -f.rank)


def render(findings: Iterable[Finding], limit: int = 5, evidence: bool = True) -> str:
    """A short text, most severe first, for an LLM prompt or a notebook cell."""
    ordered = sort_findings(findings)
    if not ordered:
        return "No findings: nothing the tools check for stands out."
    lines = []
    for f in ordered[:limit]:
        where = f" [{f.kernel}]" if f.kernel else ""
        move = f" (move: {f.move})" if f.move else ""
        lines.append(f"- {f.severity.upper()}{where} {f.title}{move}. {f.advice}")
        if evidence and f.evidence:
            lines.append("  evidence: " + ", ".join(f"{k}={_fmt(v)}" for k, v in f.evidence.items()))
    if len(ordered) > limit:
        lines.append(f"- ... {len(ordered) - limit} more finding(s) of lower or equal severity")
    return "\n".join(lines)


def moves(findings: Iterable[Finding]) -> list[str]:
    """The distinct moves, most severe first: what a proposer would try next."""
    out: list[str] = []
    for f in sort_findings(findings):
        if f.move and f.move not in out:
            out.append(f.move)
    return out
