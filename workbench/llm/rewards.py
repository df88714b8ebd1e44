"""Scores for forecasts against measured outcomes, and measured evaluations exported as fine-tuning pairs.

Outcomes are indices into `BINS` (0..7 the log2-speedup bins, 8 "fails"); `outcome_index(speedup)` maps a
measurement to one. All scores take a probability vector over the 9 outcomes (a `Forecast` or a sequence):

- `brier`: sum over outcomes of (p_i - o_i)^2, 0 (perfect) to 2 (all mass on one wrong outcome). Lower is better.
- `rps` (ranked probability score): the outcomes on one ordinal scale, with "fails" placed *below the lowest bin*
  (failing is worse than any slowdown), i.e. the order fails, <-2, [-2,-1), ..., >=2; then
  sum_k (CDF_p(k) - CDF_o(k))^2 / (K - 1) over the K - 1 = 8 inner cut points. 0 perfect, 1 worst; a near miss
  (next bin) costs less than a far one, which the Brier score does not see. Lower is better.
- `log_score`: ln p(outcome), clamped at ln(1e-12). Higher is better (0 perfect).
- `correctness_reward`: the probability given to the right side of pass/fail, 1 - p_fail when the candidate was
  correct and p_fail when it failed; it scores the fail/no-fail call alone.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from ..core.outcomes import BINS, FAILS, outcome_index
from ..core.records import FAIL, Stage
from .surrogate import anchor_source, forecast_prompts

ANCHORS = {"eager": "speedup_vs_eager", "compile": "speedup_vs_compile"}
ORDINAL = (FAILS,) + tuple(range(FAILS))  # fails, then the bins from slowest to fastest


def _probs(forecast: Any) -> list[float]:
    p = list(getattr(forecast, "probs", forecast))
    if len(p) != len(BINS):
        raise ValueError(f"expected {len(BINS)} probabilities, got {len(p)}")
    return [float(x) for x in p]


def _check_outcome(outcome: int) -> int:
    if not 0 <= outcome < len(BINS):
        raise ValueError(f"outcome must be 0..{len(BINS) - 1}, got {outcome}")
    return outcome


def brier(forecast: Any, outcome: int) -> float:
    p, o = _probs(forecast), _check_outcome(outcome)
    return sum((pi - (1.0 if i == o else 0.0)) ** 2 for i, pi in enumerate(p))


def rps(forecast: Any, outcome: int) -> float:
    p, o = _probs(forecast), _check_outcome(outcome)
    ordered = [p[i] for i in ORDINAL]
    where = ORDINAL.index(o)
    total, cdf_p = 0.0, 0.0
    for k in range(len(ordered) - 1):
        cdf_p += ordered[k]
        cdf_o = 1.0 if k >= where else 0.0
        total += (cdf_p - cdf_o) ** 2
    return total / (len(ordered) - 1)


def log_score(forecast: Any, outcome: int, floor: float = 1e-12) -> float:
    return math.log(max(_probs(forecast)[_check_outcome(outcome)], floor))


def correctness_reward(forecast: Any, failed: bool) -> float:
    p_fail = _probs(forecast)[FAILS]
    return p_fail if failed else 1.0 - p_fail


def _failed(stages_json: str) -> bool:
    """Failed for a reason of the candidate's own (static, compile or correctness), not refused or out of budget."""
    stages = json.loads(stages_json)
    own = (Stage.STATIC, Stage.COMPILE, Stage.CORRECTNESS)
    return any(s.get("verdict") == FAIL and s.get("name") in own for s in stages)


def export_pairs(store: Any, path: str | Path, anchor: str = "eager") -> int:
    """Write measured evaluations as chat-format JSONL for supervised fine-tuning; returns the number of lines.

    Each line: {"messages": [system, user, assistant], "meta": {...}}: system and user are exactly the LLM
    surrogate's prompt (anchor "eager": the reference is the anchor; "compile": torch.compile of the reference), and
    the assistant answer is the measured outcome as JSON: {"outcome": label, "probabilities": one-hot by label,
    "log2_speedup": x or null}. Evaluations neither timed nor failed (refused, inconclusive, budget) are skipped.
    """
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {sorted(ANCHORS)}, got '{anchor}'")
    column = ANCHORS[anchor]
    problems = {r.key: r.source for r in store.frame("problems").itertuples()}
    frame = store.evaluations_frame()
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w") as f:
        for row in frame.itertuples():
            speedup = getattr(row, column)
            measured = speedup is not None and not (isinstance(speedup, float) and math.isnan(speedup))
            failed = _failed(row.stages)
            if not measured and not failed:
                continue
            source, cand = problems.get(row.problem_key), store.candidate_source(row.candidate_hash)
            if source is None or cand is None:
                continue
            idx = FAILS if failed else outcome_index(float(speedup))
            stable, user = forecast_prompts(source, anchor, anchor_source(source, anchor), cand)
            answer = {"outcome": BINS[idx], "probabilities": {b: float(i == idx) for i, b in enumerate(BINS)},
                      "log2_speedup": None if failed else math.log2(float(speedup))}
            line = {"messages": [{"role": "system", "content": stable}, {"role": "user", "content": user},
                                 {"role": "assistant", "content": json.dumps(answer)}],
                    "meta": {"evaluation_id": int(row.id), "problem": row.problem_name, "candidate": row.candidate_hash,
                             "device": row.device, "fidelity": row.fidelity, "anchor": anchor}}
            f.write(json.dumps(line) + "\n")
            n += 1
    return n


def mean_scores(pairs: Sequence[tuple[Any, int]]) -> dict[str, float]:
    """Average Brier, RPS and log score over (forecast, outcome) pairs."""
    if not pairs:
        return {"n": 0}
    k = len(pairs)
    return {"n": k, "brier": sum(brier(f, o) for f, o in pairs) / k, "rps": sum(rps(f, o) for f, o in pairs) / k,
            "log_score": sum(log_score(f, o) for f, o in pairs) / k}
