"""workbench.surrogates: Forecast from a Gaussian, the roofline surrogate on built-in problems, the selective policy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core import ceilings, outcomes
from workbench.core.candidate import Candidate
from workbench.core.outcomes import expected_log2
from workbench.core.records import FAIL, PASS, StageRecord
from workbench.problems import Problem
from workbench.surrogates import (
    BINS,
    DEFER,
    EXPLORE,
    MEASURE,
    SKIP,
    Forecast,
    RooflineSurrogate,
    SelectivePolicy,
    Surrogate,
    from_log2,
)


def _phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


# ---- Forecast from a Gaussian ----

def test_forecast_is_the_llm_one():
    assert Forecast is outcomes.Forecast and BINS is outcomes.BINS


def test_from_log2_mass_in_the_right_bins():
    f = from_log2(0.25, 0.1, 0.1)  # bin [0, 0.5) holds mu +- 2.5 sigma
    assert sum(f.probs) == pytest.approx(1.0)
    assert f.p_fail == pytest.approx(0.1)
    assert f.probs[4] == pytest.approx(0.9 * (_phi(2.5) - _phi(-2.5)))
    assert f.most_likely == "[0,0.5)"
    g = from_log2(3.0, 0.5, 0.0)  # P(>= 2) = 1 - Phi((2 - 3) / .5) = Phi(2)
    assert g.probs[7] == pytest.approx(_phi(2.0)) and g.p_fail == 0.0
    h = from_log2(0.0, 1.0, 0.2)  # symmetric about the edge at 0
    assert h.probs[3] == pytest.approx(h.probs[4]) and h.probs[0] == pytest.approx(h.probs[7])
    assert from_log2(-0.7, 0.0, 0.0).probs[2] == 1.0  # sigma 0: a point mass in [-1, -0.5)
    assert from_log2(0.0, 1.0, 1.0).probs[-1] == 1.0
    with pytest.raises(ValueError):
        from_log2(0.0, 1.0, 1.5)


# ---- roofline ----

@pytest.fixture(scope="module")
def h200():
    c = ceilings.load("NVIDIA H200")
    if c is None:
        pytest.skip("no measured ceilings for the H200")
    return c


@pytest.fixture(scope="module")
def surrogate(h200):
    return RooflineSurrogate(h200)


def test_roofline_memory_bound_fusion_wins(surrogate):
    p = Problem.load("scale_shift_relu")
    assert isinstance(surrogate, Surrogate)
    counts = surrogate.counts(p)
    assert counts.eager_bytes > counts.min_bytes  # eager moves x three times
    mu, why = surrogate.log2_speedup(counts)
    # both memory-bound at the same efficiency: log2(eager_bytes / min_bytes) = log2(6 GiB / 2 GiB)
    assert mu == pytest.approx(math.log2(counts.eager_bytes / counts.min_bytes)) and mu > 0
    [f] = surrogate.forecast(p, [Candidate("class ModelNew: pass\n")])
    assert f.point > 0 and f.p_fail == pytest.approx(0.1)
    assert f.confidence < 0.6  # wide sigma: never confident
    assert "memory-bound" in f.reasoning


def test_roofline_gemm_ties(surrogate, h200):
    p = Problem.load("matmul_bf16")
    mu, _ = surrogate.log2_speedup(surrogate.counts(p))
    assert abs(mu) < 0.1
    [f] = surrogate.forecast(p, [Candidate("a = 1\n")])
    assert abs(f.point) < 0.1 and "compute-bound" in f.reasoning
    # an anchor at the ceilings: the candidate is left with its compute efficiency, log2(0.6)
    strict = RooflineSurrogate(h200, anchor_efficiency={"memory": 1.0, "compute": 1.0})
    assert strict.log2_speedup(surrogate.counts(p))[0] == pytest.approx(math.log2(0.6))
    with pytest.raises(ValueError):
        surrogate.forecast(p, [], anchor="compile")


def test_roofline_uses_compile_records(h200):
    ok, bad, spilly = Candidate("ok = 1\n"), Candidate("bad = 1\n"), Candidate("spilly = 1\n")
    records = {bad.hash: StageRecord("compile", FAIL, "compile error: boom"),
               spilly.hash: StageRecord("compile", PASS, flags=[{"check": "spills", "severity": "warning"}])}
    s = RooflineSurrogate(h200, compile_records=records)
    f_ok, f_bad, f_spill = s.forecast(Problem.load("scale_shift_relu"), [ok, bad, spilly])
    assert f_bad.p_fail == pytest.approx(0.95) and "compile failed" in f_bad.reasoning
    assert f_ok.p_fail == pytest.approx(0.1) == pytest.approx(f_spill.p_fail)
    counts = s.counts(Problem.load("scale_shift_relu"))
    mu_ok, mu_spill = s.log2_speedup(counts)[0], s.log2_speedup(counts, records[spilly.hash])[0]
    assert mu_spill == pytest.approx(mu_ok + math.log2(0.7))  # slower by the spill factor
    assert f_spill.point < f_ok.point


# ---- selective policy ----

WINNER = from_log2(1.5, 0.1, 0.0)  # confident, +1.5
LOSER = from_log2(-1.5, 0.1, 0.0)  # confident, -1.5
UNSURE = from_log2(0.5, 3.0, 0.1)  # spread thin
BROKEN = Forecast((0.05 / 8,) * 8 + (0.95,))  # confident it fails


def test_selective_hand_made():
    fs = [LOSER, UNSURE, WINNER, BROKEN]
    assert WINNER.confidence > 0.99 and UNSURE.confidence < 0.3 and expected_log2(BROKEN) < -2
    pol = SelectivePolicy(tau=0.5, explore=0.0)
    assert pol.decide(fs, 2) == [SKIP, DEFER, MEASURE, SKIP]
    assert pol.decide(fs, 1) == [SKIP, SKIP, MEASURE, SKIP]  # confident winners take slots first
    assert pol.decide(fs, 10) == [SKIP, DEFER, MEASURE, SKIP]  # confident losers are skipped even with room
    assert pol.decide(fs, 0) == [SKIP] * 4
    assert pol.decide([Forecast.uniform("unreadable")], 1) == [DEFER]  # unparsed: confidence 0


def test_selective_explore_respects_slots_and_seed():
    fs = [LOSER, UNSURE, WINNER, BROKEN]
    d = SelectivePolicy(tau=0.5, explore=0.5, seed=3).decide(fs, 2)
    # one slot set aside for exploring: the winner is measured, one of the other three explored
    assert d[2] == MEASURE and d.count(EXPLORE) == 1 and d.count(SKIP) == 2

    rng = np.random.default_rng(0)
    many = [from_log2(float(m), float(s), 0.1) for m, s in zip(rng.normal(0, 1, 60), rng.uniform(0.05, 2, 60))]
    runs = []
    for _ in range(2):
        pol = SelectivePolicy(tau=0.6, explore=0.2, seed=11)
        runs.append([pol.decide(many, 10) for _ in range(3)])
    assert runs[0] == runs[1]  # same seed, same calls, same decisions
    for d in runs[0]:
        assert sum(x != SKIP for x in d) <= 10 and d.count(EXPLORE) == 2
    assert runs[0][0] != runs[0][1] or runs[0][1] != runs[0][2]  # exploration moves between rounds


def test_selective_from_validation():
    # risks at tau .9/.8/.7/.6 = 0, 1/2, 1/3, 1/2 -> tau .7
    pol = SelectivePolicy.from_validation([0.9, 0.8, 0.7, 0.6], [0, 1, 0, 1], max_risk=0.4, explore=0.0)
    assert pol.tau == 0.7
    never = SelectivePolicy.from_validation([0.9], [1], max_risk=0.1, explore=0.0)
    assert never.tau == math.inf and never.decide([WINNER, LOSER], 2) == [DEFER, DEFER]
