"""The optional parts of a `Search`, one frozen config each: screening by a surrogate, profiler findings, LLM-written
children. `Search(..., screening=None, findings=None, llm=None)` is the plain search: every proposal is measured, no
findings are read, children come from the offline proposer."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..llm.moves import LLMMoves
from ..surrogates.forecast import Surrogate
from ..surrogates.selective import SelectivePolicy

FINDINGS_MODES = ("static", "ncu")


@dataclasses.dataclass(frozen=True)
class ScreeningConfig:
    """Screening: each step the strategy proposes `overgenerate` x the step's slots, the surrogate forecasts every
    proposal, and the selective policy (`selective.decide(forecasts, slots)`) picks what the GPU measures. The rest
    become skipped nodes, each kept with its forecast, so calibration can be checked on any measured later."""

    surrogate: Surrogate
    selective: SelectivePolicy
    overgenerate: int = 3
    # Measured speedups go back to a surrogate that can learn from them (`observe_candidates`). Off by default:
    # why in results/search/report.md.
    surrogate_learns: bool = False

    def __post_init__(self) -> None:
        if self.surrogate is None or self.selective is None:
            raise ValueError("screening needs both a surrogate and a selective policy")
        if self.overgenerate < 1:
            raise ValueError(f"overgenerate must be at least 1, got {self.overgenerate}")


@dataclasses.dataclass(frozen=True)
class FindingsConfig:
    """Profiler findings on every told node (`diagnosis.NodeDiagnosis`), kept on the node, in its event and in the
    memory; the offline proposer's moves from a node follow them for about `guided_share` of its children."""

    # "static": the expert tools read each node's compile record and its roofline verdict, no GPU time;
    # "ncu": Nsight Compute counters too, on a live GPU, charged to the budget as "profile"
    mode: str = "static"
    guided_share: float | None = None  # None: the proposer's default share (proposers/guided.py)
    # the least severity a finding needs to guide moves; None: the proposer's default ("warning": an "info" finding
    # is one its tool judges harmless)
    guided_min_severity: str | None = None
    # collects counters for (problem, candidate) instead of ncu (a test double, or another profiler)
    counters: Callable[[Any, Any], dict[str, dict]] | None = None

    def __post_init__(self) -> None:
        if self.mode not in FINDINGS_MODES:
            raise ValueError(f"findings must be one of {FINDINGS_MODES} (or None for no findings), got {self.mode!r}")
        if self.guided_share is not None and not 0.0 <= self.guided_share <= 1.0:
            raise ValueError(f"guided_share must be within [0, 1], got {self.guided_share}")


@dataclasses.dataclass(frozen=True)
class LLMMovesConfig:
    """Children written by the LLM proposer (move "llm") from the parent's source, its last measurement summary and
    the memory's text; the root is still the offline proposer's default point. A reply with no usable module is no
    node: the memory keeps it as a failed "llm" attempt and a `proposal_failed` event records it."""

    moves: LLMMoves
    max_failed_steps: int = 3  # steps in a row whose proposals all failed before the search stops

    def __post_init__(self) -> None:
        if self.max_failed_steps < 1:
            raise ValueError(f"max_failed_steps must be at least 1, got {self.max_failed_steps}")
