"""`Forecast`: the shared surrogate output — probabilities over 9 outcomes of a candidate relative to an anchor kernel.

Outcomes, in order: 8 bins of log2(speedup vs the anchor) with edges (-inf, -2, -1, -0.5, 0, 0.5, 1, 2, +inf), then
"fails" (does not compile or is incorrect). Bins are half-open [lo, hi): a speedup of exactly 2x (log2 = 1) falls in
"[1,2)".

Every surrogate answers in this format and every metric scores it; it sits in the core because both need it.
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


def _phi(z: float) -> float:
    """Standard normal CDF (exact at +-inf)."""
    if math.isinf(z):
        return 1.0 if z > 0 else 0.0
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def gaussian_bin_probs(mu: float, sigma: float) -> tuple[float, ...]:
    """Mass of N(mu, sigma^2) in each of the 8 speedup bins: CDF(edge_{i+1}) - CDF(edge_i). sigma = 0 puts all of
    it in the bin holding mu."""
    if math.isnan(mu) or math.isinf(mu):
        raise ValueError("mu must be a finite log2 speedup")
    if not sigma >= 0 or math.isinf(sigma):
        raise ValueError("sigma must be finite and non-negative")
    if sigma == 0:
        out = [0.0] * FAILS
        out[bin_index(mu)] = 1.0
        return tuple(out)
    edges = (-math.inf, *EDGES, math.inf)
    cdf = [_phi((e - mu) / sigma) for e in edges]
    return tuple(max(0.0, hi - lo) for lo, hi in zip(cdf[:-1], cdf[1:]))


def from_log2(mu: float, sigma: float, p_fail: float, **kw) -> Forecast:
    """A Forecast from a Gaussian belief over log2 speedup: the speedup bins get the Gaussian's mass in them times
    (1 - p_fail), "fails" gets p_fail. Extra keywords (reasoning, call_ids) go to Forecast."""
    if not 0.0 <= p_fail <= 1.0:
        raise ValueError("p_fail must be in [0, 1]")
    probs = [(1.0 - p_fail) * p for p in gaussian_bin_probs(mu, sigma)] + [p_fail]
    return Forecast(tuple(probs), **kw)


def expected_log2(f: Forecast, fail_value: float = MIDPOINTS[0]) -> float:
    """Expected log2 speedup over all 9 outcomes, each bin at its midpoint and "fails" at `fail_value` (by default
    the worst bin's midpoint, -3: a failure is worth as little as an 8x slowdown)."""
    return sum(p * m for p, m in zip(f.probs, MIDPOINTS)) + f.p_fail * fail_value
