"""The surrogate interface: `Surrogate.forecast` answers one `Forecast` per candidate.

`Forecast` and `BINS` are the ones of `workbench.llm.forecast`, re-exported here (one class, two import paths): 8 bins
of log2(speedup vs the anchor) with edges (-inf, -2, -1, -0.5, 0, 0.5, 1, 2, +inf), bin i = [edge_i, edge_{i+1}),
then "fails".
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence, runtime_checkable

from ..candidate import Candidate
from ..llm.forecast import BINS, EDGES, FAILS, MIDPOINTS, Forecast, bin_index, check_probs, outcome_index
from ..problems.problem import Problem

__all__ = ["BINS", "EDGES", "FAILS", "MIDPOINTS", "Forecast", "Surrogate", "bin_index", "check_probs", "from_log2",
           "gaussian_bin_probs", "outcome_index"]


@runtime_checkable
class Surrogate(Protocol):
    """Anything that forecasts candidates of a problem relative to an anchor kernel ("eager": the PyTorch reference)."""

    def forecast(self, problem: Problem, candidates: list[Candidate], anchor: str = "eager") -> list[Forecast]:
        """One Forecast per candidate, in order."""
        ...


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


def forecasts_for(surrogate: Surrogate, problem: Problem, candidates: Sequence[Candidate],
                  anchor: str = "eager") -> list[Forecast]:
    """Call a surrogate and check it answered one Forecast per candidate."""
    out = surrogate.forecast(problem, list(candidates), anchor)
    if len(out) != len(candidates) or not all(isinstance(f, Forecast) for f in out):
        raise ValueError(f"{type(surrogate).__name__} answered {len(out)} forecasts for {len(candidates)} candidates")
    return out
