"""`SelectivePolicy`: which candidates get the GPU, given a surrogate's forecasts and a number of measurement slots.

Per candidate, one of:
- "measure": the forecast is confident (confidence >= tau) and promising (expected log2 speedup > min_gain): the GPU
  confirms it. These take slots first, most promising first.
- "defer": the forecast is unsure (confidence < tau), so the surrogate's opinion is not trusted and the GPU decides;
  unsure ones fill the slots left after "measure", most promising first.
- "explore": a few candidates the policy would otherwise skip, drawn at random, so that a surrogate that is
  confidently wrong gets caught: floor(explore * slots) slots are set aside for them before the rest is allotted.
- "skip": confident losers (confidence >= tau, expected log2 speedup <= min_gain), and whatever did not fit.

A forecast for a problem unlike the surrogate's training data (`SurrogateForecast.unlike`: the learned surrogate's
novelty check) is never confident, whatever its top probability: its confidence was calibrated on problems like the
training ones, so it is deferred to the GPU -- it competes for the slots with the other unsure ones, most promising
first, and is never skipped as a confident loser (`defer_unlike=False` trusts it like any other).

A forecast that carries no information (unparsed -- an unreadable reply or a failed call -- or exactly uniform) is never
skipped, whatever the slots: it is deferred to the GPU, outside the slot count, since nothing justifies dropping it.
Otherwise at most `slots` candidates are measured (measure + defer + explore). Confidence is `Forecast.confidence` (the
top probability; 0 for an unparsed forecast); promise is `expected_log2` (bins at their midpoints, "fails" at -3). Ties
keep the input order. Exploration draws from a generator seeded once per policy, so the same seed and the same calls
give the same decisions.

`tau` should come from data: `SelectivePolicy.from_validation` picks the lowest tau whose accepted validation
forecasts have mean error <= max_risk (`workbench.metrics.selectivity.threshold_for_risk`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.events import Decision
from ..core.outcomes import Forecast, expected_log2
from ..metrics.selectivity import threshold_for_risk

MEASURE, DEFER, SKIP, EXPLORE = Decision.MEASURE, Decision.DEFER, Decision.SKIP, Decision.EXPLORE


class SelectivePolicy:
    def __init__(self, tau: float, explore: float = 0.1, seed: int = 0, min_gain: float = 0.0,
                 defer_unlike: bool = True):
        if not 0.0 <= explore <= 1.0:
            raise ValueError("explore must be in [0, 1]")
        if tau != tau:
            raise ValueError("tau must not be NaN")
        self.tau = float(tau)
        self.explore = explore
        self.seed = seed
        self.min_gain = min_gain
        self.defer_unlike = defer_unlike
        self._rng = np.random.default_rng(seed)

    @classmethod
    def from_validation(cls, confidence, error, max_risk: float, **kw) -> "SelectivePolicy":
        """A policy whose tau is the lowest threshold at which the validation forecasts it would accept have mean
        error <= max_risk (+inf when none: everything is deferred to the GPU)."""
        return cls(threshold_for_risk(confidence, error, max_risk), **kw)

    @staticmethod
    def informative(f: Forecast) -> bool:
        """Whether a forecast says anything: parsed, and not the same probability on every outcome."""
        return f.parsed and max(f.probs) - min(f.probs) > 1e-9

    def unlike(self, f: Forecast) -> bool:
        """Whether the forecast says its problem is unlike the surrogate's training data (and the policy heeds it)."""
        return getattr(self, "defer_unlike", True) and bool(getattr(f, "unlike", False))

    def confident(self, f: Forecast) -> bool:
        return f.confidence >= self.tau and not self.unlike(f)

    def decide(self, forecasts: Sequence[Forecast], slots: int) -> list[Decision]:
        """One decision per forecast, in order (see the module docstring)."""
        n = len(forecasts)
        slots = max(0, min(int(slots), n))
        gain = [expected_log2(f) for f in forecasts]
        conf = [self.confident(f) for f in forecasts]
        blind = [not self.informative(f) for f in forecasts]
        by_gain = sorted((i for i in range(n) if not blind[i]), key=lambda i: (-gain[i], i))
        winners = [i for i in by_gain if conf[i] and gain[i] > self.min_gain]
        unsure = [i for i in by_gain if not conf[i]]
        n_explore = int(np.floor(self.explore * slots + 1e-9))
        out = [DEFER if blind[i] else SKIP for i in range(n)]
        for i in (winners + unsure)[:slots - n_explore]:
            out[i] = MEASURE if conf[i] else DEFER
        pool = [i for i in range(n) if out[i] == SKIP]
        if n_explore and pool:
            picks = self._rng.choice(len(pool), size=min(n_explore, len(pool)), replace=False)
            for j in picks:
                out[pool[int(j)]] = EXPLORE
        return out

    def __repr__(self) -> str:
        return f"SelectivePolicy(tau={self.tau:.4g}, explore={self.explore}, seed={self.seed})"
