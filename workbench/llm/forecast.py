"""`Forecast`: the shared surrogate output — probabilities over 9 outcomes of a candidate relative to an anchor kernel.

Outcomes, in order: 8 bins of log2(speedup vs the anchor) with edges (-inf, -2, -1, -0.5, 0, 0.5, 1, 2, +inf), then
"fails" (does not compile or is incorrect). Bins are half-open [lo, hi): a speedup of exactly 2x (log2 = 1) falls in
"[1,2)".

It lives here until the surrogates issue moves it (with `BINS`) to `workbench/surrogates/`; import it from
`workbench.llm` meanwhile and the move will keep that name working.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any, Iterable, Sequence

EDGES = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)  # interior edges; the outer ones are -inf and +inf
BINS = ("<-2", "[-2,-1)", "[-1,-0.5)", "[-0.5,0)", "[0,0.5)", "[0.5,1)", "[1,2)", ">=2", "fails")
FAILS = len(BINS) - 1
MIDPOINTS = (-3.0, -1.5, -0.75, -0.25, 0.25, 0.75, 1.5, 3.0)  # the open ends count as +-3 (8x)


def bin_index(log2_speedup: float) -> int:
    """Index of the bin holding this log2 speedup (0..7)."""
    if math.isnan(log2_speedup):
        raise ValueError("log2 speedup is NaN")
    return bisect.bisect_right(EDGES, log2_speedup)


def outcome_index(speedup: float | None) -> int:
    """Outcome of a measurement: the bin of log2(speedup), or FAILS when there is none (failed candidate)."""
    if speedup is None or not speedup > 0:
        return FAILS
    return bin_index(math.log2(speedup))


def check_probs(probs: Sequence[float]) -> tuple[float, ...]:
    """9 finite non-negative numbers with a positive sum, normalised; ValueError otherwise."""
    p = [float(x) for x in probs]
    if len(p) != len(BINS):
        raise ValueError(f"expected {len(BINS)} probabilities, got {len(p)}")
    if any(math.isnan(x) or math.isinf(x) for x in p):
        raise ValueError("probabilities must be finite numbers")
    if any(x < 0 for x in p):
        raise ValueError("probabilities must not be negative")
    s = sum(p)
    if s <= 0:
        raise ValueError("probabilities sum to zero")
    return tuple(x / s for x in p)


@dataclasses.dataclass(frozen=True)
class Forecast:
    probs: tuple[float, ...]
    parsed: bool = True
    reasoning: str = ""
    call_ids: tuple[str, ...] = ()
    failure: str | None = None  # why the replies could not be read (parsed=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "probs", check_probs(self.probs))

    @classmethod
    def uniform(cls, failure: str, call_ids: Iterable[str] = ()) -> "Forecast":
        return cls(tuple([1.0] * len(BINS)), parsed=False, call_ids=tuple(call_ids), failure=failure)

    @classmethod
    def mean(cls, forecasts: Sequence["Forecast"], **kw: Any) -> "Forecast":
        if not forecasts:
            raise ValueError("no forecasts to average")
        probs = tuple(sum(f.probs[i] for f in forecasts) / len(forecasts) for i in range(len(BINS)))
        return cls(probs, **kw)

    @property
    def p_fail(self) -> float:
        return self.probs[FAILS]

    @property
    def point(self) -> float | None:
        """Expected log2 speedup over the bin midpoints, given the candidate does not fail (None if it surely does)."""
        ok = 1.0 - self.p_fail
        if ok <= 1e-12:
            return None
        return sum(p * m for p, m in zip(self.probs, MIDPOINTS)) / ok

    @property
    def confidence(self) -> float:
        """The largest probability (0 for an unparsed forecast)."""
        return max(self.probs) if self.parsed else 0.0

    @property
    def entropy_confidence(self) -> float:
        """1 - entropy / log(9): 1 for a certain forecast, 0 for a uniform one (and for an unparsed one)."""
        if not self.parsed:
            return 0.0
        h = -sum(p * math.log(p) for p in self.probs if p > 0)
        return max(0.0, 1.0 - h / math.log(len(BINS)))

    @property
    def most_likely(self) -> str:
        return BINS[max(range(len(BINS)), key=lambda i: self.probs[i])]

    def to_dict(self) -> dict[str, Any]:
        return {"probabilities": dict(zip(BINS, self.probs)), "parsed": self.parsed, "point": self.point,
                "confidence": self.confidence, "entropy_confidence": self.entropy_confidence,
                "reasoning": self.reasoning, "call_ids": list(self.call_ids), "failure": self.failure}
