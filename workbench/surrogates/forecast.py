"""The surrogate interface: `Surrogate.forecast` answers one `Forecast` (`workbench.core.outcomes`) per candidate."""
from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable

from ..core.candidate import Candidate
from ..core.outcomes import Forecast
from ..problems.problem import Problem


@dataclasses.dataclass(frozen=True)
class SurrogateForecast(Forecast):
    """A `Forecast` that also says how far its candidate lies from what the surrogate was trained on: `ood` (the
    larger of the candidate's and its problem's range excess, 1 = the edge of what calibration saw) and `unlike`
    (the problem is unlike the training data; `SelectivePolicy` then defers the candidate to the GPU rather than
    trust the forecast's confidence). Everything else reads it as a plain Forecast."""

    ood: float = 0.0
    unlike: bool = False


@runtime_checkable
class Surrogate(Protocol):
    """Anything that forecasts candidates of a problem relative to an anchor kernel ("eager": the PyTorch reference)."""

    def forecast(self, problem: Problem, candidates: list[Candidate], anchor: str = "eager") -> list[Forecast]:
        """One Forecast per candidate, in order."""
        ...


def forecasts_for(surrogate: Surrogate, problem: Problem, candidates: Sequence[Candidate],
                  anchor: str = "eager") -> list[Forecast]:
    """Call a surrogate and check it answered one Forecast per candidate."""
    out = surrogate.forecast(problem, list(candidates), anchor)
    if len(out) != len(candidates) or not all(isinstance(f, Forecast) for f in out):
        raise ValueError(f"{type(surrogate).__name__} answered {len(out)} forecasts for {len(candidates)} candidates")
    return out
